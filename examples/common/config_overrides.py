"""The hydra overrides that turn a row's config into the training a recipe runs.

Run by examples/common/lib.sh (with ``python -c``, so it imports neither fairseq nor the
plugin) after a dry run: ``config_overrides.py CONFIG fairseq-train DATA FLAGS...`` prints
``fairseq-hydra-train --config-dir DIR --config-name NAME`` followed by the overrides: the
run's paths (data, save dir, converted weights, user dir), the device (``--cpu``, no
``--fp16``, several GPUs) and whatever the environment changed (LR=..., SMALL=1, ...).
"""

import os
import shlex
import sys

import yaml

# the keys of flags a recipe adds that its config leaves to the run
RUN_KEYS = {
    "save_dir": "checkpoint",
    "finetune_from_model": "checkpoint",
    "user_dir": "common",
    "cpu": "common",
    "fp16": "common",
    "distributed_world_size": "distributed_training",
    "admin_profile_file": "model",
}
NAMES = {
    "task": "task",
    "arch": "model",
    "criterion": "criterion",
    "optimizer": "optimizer",
    "lr_scheduler": "lr_scheduler",
}


def flags_of(args):
    """{dest: value} of a fairseq-train flag list (True for a flag without a value)."""
    out, i = {}, 0
    while i < len(args):
        dest = args[i][2:].replace("-", "_")
        if i + 1 < len(args) and not args[i + 1].startswith("--"):
            out[dest] = args[i + 1]
            i += 2
        else:
            out[dest] = True
            i += 1
    return out


def same(config_value, flag_value):
    if config_value is True or flag_value is True:
        return config_value is True and flag_value is True
    if isinstance(config_value, list):
        config_value = ",".join(str(v) for v in config_value)
    try:
        return float(config_value) == float(flag_value)
    except (TypeError, ValueError):
        return str(config_value) == str(flag_value)


def text(value):
    return "true" if value is True else str(value)


def overrides(cfg, data, flags):
    where = {k: g for g, body in cfg.items() if g != "hydra" for k in body if k != "_name"}
    out = [f"task.data={data}"]
    for dest, value in flags.items():
        if dest in NAMES:
            if cfg.get(NAMES[dest], {}).get("_name") != value:
                out.append(f"{NAMES[dest]}._name={value}")
            continue
        group = where.get(dest) or RUN_KEYS.get(dest)
        if group is None:
            out.append(f"+?.{dest}={text(value)}")  # an EXTRA_TRAIN_ARGS flag: find its group
            continue
        have = cfg.get(group, {}).get(dest)
        if have == "???" or have is None or not same(have, value):
            if group == "optimization" and dest in ("lr", "update_freq"):
                value = f"[{value}]"
            add = "++" if have is None and group == "model" else ""  # model: a free dict
            out.append(f"{add}{group}.{dest}={text(value)}")
    for dest, group in where.items():
        if dest not in flags and cfg[group][dest] is True:
            out.append(f"{group}.{dest}=false")
    return out


def main(argv):
    path, train = argv[0], argv[1:]
    with open(path, encoding="utf-8") as f:
        cfg = yaml.safe_load(f)
    data, flags = train[1], flags_of(train[2:])
    folder, name = os.path.split(path)
    cmd = ["fairseq-hydra-train", "--config-dir", folder, "--config-name", name[: -len(".yaml")]]
    print(shlex.join(cmd + overrides(cfg, data, flags)))


main(sys.argv[1:])
