#!/usr/bin/env python3
"""configs/: one fairseq hydra config per recipe row, generated from the recipes themselves.

The recipes (``examples/<task>/<family>/*.sh``) stay the one place where a row's settings are
written (the dataset schedule in ``examples/common/lib.sh``, the family's flags in its
``common.sh``, the row's model flags in its script, the architecture in the presets). This
command runs every recipe with ``DRY_RUN=1`` on one GPU (``NUM_GPUS=1``, nothing else from the
environment), takes the last ``fairseq-train`` it prints (the row's own model; earlier ones are
its teachers) and writes that training as a hydra config, in fairseq's layout (``common``,
``task``, ``model``, ``criterion``, ``optimizer``, ``lr_scheduler``, ``optimization``,
``dataset``, ``checkpoint``, ``distributed_training``: the groups of fairseq's
``FairseqConfig``; each flag in the group whose dataclass owns it, model flags under ``model``):
``configs/<family>/<script name, '-' -> '_'>.yaml``, e.g. ``configs/lightformer/
table7_lightformer_12_2.yaml`` for ``examples/translation/lightformer/table7-lightformer-12-2.sh``.
Only the flags the recipe gives are written; the run's paths are left to overrides
(``task.data`` is mandatory, ``???``; ``checkpoint.save_dir``, ``checkpoint.finetune_from_model``
and the KD / teacher paths as the recipe prints them). The header repeats the recipe's own
description (paper, table, row, the paper's numbers) and the parameter count of the model,
built on the meta device at the row's vocabulary.

::

    python scripts/make_configs.py            # (re)write configs/
    python scripts/make_configs.py --check    # exit 1 naming every config that differs

tests/test_configs.py checks that the committed configs equal what this command writes, so that
a recipe and its config cannot drift. Run a row from its config::

    fairseq-hydra-train --config-dir configs/lightformer --config-name table7_lightformer_12_2 \\
        task.data=data-bin/iwslt14.tokenized.de-en checkpoint.save_dir=checkpoints/x
"""

from __future__ import annotations

import argparse
import dataclasses
import glob
import os
import re
import shlex
import subprocess
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
CONFIGS = os.path.join(ROOT, "configs")
EXAMPLES = os.path.join(ROOT, "examples")
# the recipes' environment overrides: a generated config is the recipe's defaults
CLEAN = (
    "MAX_TOKENS",
    "UPDATE_FREQ",
    "MAX_UPDATE",
    "LR",
    "WARMUP",
    "DROPOUT",
    "WEIGHT_DECAY",
    "SAVE_ROOT",
    "DATA_ROOT",
    "DATA_BIN",
    "KD_BIN",
    "SMALL",
    "SMALL_MAX_UPDATE",
    "SMALL_MAX_TOKENS",
    "CPU_WPS",
    "INIT",
    "TEACHER",
    "CUDA_VISIBLE_DEVICES",
    "NUM_GPUS",
    "MEASURE_SPEED",
    "SEED",
    "AVG_N",
    "FP16",
    "EXTRA_TRAIN_ARGS",
    "USER_DIR",
    "PYTHON",
    "LF_ARCH",
    "DENSE_ARCH",
    "GROUP_INIT",
    "ARCH",
    "RANK",
    "MIN_FREE_GB",
)
USER_DIR = "lightcompress"  # resolves from the checkout's root, and next to an installed fairseq
# the groups of fairseq's FairseqConfig in the order a config lists them
GROUPS = (
    "common",
    "task",
    "model",
    "criterion",
    "optimizer",
    "lr_scheduler",
    "optimization",
    "dataset",
    "checkpoint",
    "distributed_training",
    "bmuf",
    "generation",
    "ema",
)
COMPONENTS = {
    "task": "task",
    "arch": "model",
    "criterion": "criterion",
    "optimizer": "optimizer",
    "lr_scheduler": "lr_scheduler",
}
# flags of the run, not of the row: left to overrides (the recipe's dry run prints them)
RUN_FLAGS = ("--user-dir", "--save-dir", "--finetune-from-model", "--admin-profile-file")
# paths every run must give (mandatory values, ``???``), and a recipe's values computed at run
# time (printed in capitals by its dry run: ``--sm-rank RANK``)
MANDATORY_FLAGS = ("--dawid-teacher", "--kd-distilled-data")
PLACEHOLDER = re.compile(r"[A-Z][A-Z_]+")
# the environment of a recipe whose row is not its last training (DA-WID's optional same-size
# LightFormer comes after it)
ROW_ENV = {"examples/translation/dawid/iwslt14-dawid.sh": {"SAME_SIZE_LIGHTFORMER": "0"}}
# the vocabulary a row's parameter count is given at, when its architecture is not a preset
# that names one (the joined dictionaries the papers' sizes are counted at)
DATA_VOCAB = {
    "iwslt14.tokenized.de-en": 10200,
    "wmt16_en_de_bpe32k": 37232,
    "wmt16_en_ro": 34976,
    "gigaword": 13952,
    "wikitext-103": 267744,
    "cnn_dm": 50000,
    "results": 10200,
}
GLUE_VOCAB = 50265  # roberta.base's GPT-2 BPE dictionary
# the paper of each recipe folder (papers/ of the project's notes)
PAPERS = {
    "lightformer": "LightFormer: Light-weight Transformer Using SVD-based Weight Transfer and "
    "Parameter Sharing (Lu et al.)",
    "hypoformer": "Hypoformer: Hybrid Tensor-Train (HTT) decomposition of the Transformer for NMT",
    "subformer": "Subformer: A Parameter Reduced Transformer (Reid et al.)",
    "smartformer": "Smartformer: An Intelligent Model Compression Framework for Transformer "
    "(Wang et al.)",
    "dawid": "Improving Weight-Inherited Distillation with Data-aware Initialization and "
    "Structural Adaptation (DA-WID)",
    "kd": "Hypoformer's sequence-level knowledge distillation (Sec. 5.2, Table 6)",
}

__all__ = ["expected", "recipes", "render", "row_config", "write_all"]


def recipes() -> list[str]:
    """Every recipe row: an executable script under examples/<task>/<family>/ of the recipe
    library (sourcing a family's common.sh), outside the lab's results/ folder."""
    out = []
    for path in sorted(glob.glob(os.path.join(EXAMPLES, "*", "*", "*.sh"))):
        rel = os.path.relpath(path, ROOT)
        if "/results/" in rel or os.path.basename(path).startswith("prepare-"):
            continue
        with open(path, encoding="utf-8") as f:
            text = f.read()
        if text.startswith("#!") and "common.sh" in text:
            out.append(rel)
    return out


def config_path(recipe: str) -> str:
    """configs/<family>/<script name with '_' for '-'>.yaml of a recipe."""
    family = os.path.basename(os.path.dirname(recipe))
    name = os.path.basename(recipe)[: -len(".sh")].replace("-", "_")
    return os.path.join("configs", family, name + ".yaml")


def dry_run(recipe: str) -> list[list[str]]:
    """The commands ``DRY_RUN=1 NUM_GPUS=1`` prints for a recipe, as argv lists."""
    env = {k: v for k, v in os.environ.items() if k not in CLEAN}
    env.update(DRY_RUN="1", NUM_GPUS="1", USER_DIR=USER_DIR, PYTHON=sys.executable)
    env.update(ROW_ENV.get(recipe, {}))
    with tempfile.TemporaryDirectory() as work:
        env["HOME"] = work
        proc = subprocess.run(
            ["bash", os.path.join(ROOT, recipe)],
            cwd=work,
            env=env,
            capture_output=True,
            text=True,
            timeout=120,
            check=False,
        )
    if proc.returncode != 0:
        raise RuntimeError(f"{recipe}: DRY_RUN=1 failed:\n{proc.stderr[-2000:]}")
    return [shlex.split(ln[2:]) for ln in proc.stdout.splitlines() if ln.startswith("+ ")]


def row_training(recipe: str) -> list[str] | None:
    """The row's own fairseq-train argv (the last one the recipe prints), or None."""
    trains = [c for c in dry_run(recipe) if c[0] == "fairseq-train"]
    return trains[-1] if trains else None


def _header(recipe: str) -> list[str]:
    """The recipe's description: its first paragraph of comment lines after the shebang."""
    lines = []
    with open(os.path.join(ROOT, recipe), encoding="utf-8") as f:
        next(f)
        for line in f:
            if not line.startswith("#") or line.strip() == "#":
                break
            lines.append(line.rstrip("\n"))
    return lines


def _owner_fields():
    """{group: field names} of fairseq's top-level configuration groups."""
    from fairseq.dataclass.configs import FairseqConfig

    out = {}
    for f in dataclasses.fields(FairseqConfig):
        default = f.default
        if isinstance(default, type) and dataclasses.is_dataclass(default):
            out[f.name] = {g.name for g in dataclasses.fields(default)}
    return out


def _component_fields(group: str, name: str) -> set[str]:
    """Field names of a registered task / criterion / optimizer / lr_scheduler dataclass (a
    legacy argparse component: the dests of its add_args)."""
    from fairseq.registry import REGISTRIES
    from fairseq.tasks import TASK_DATACLASS_REGISTRY, TASK_REGISTRY

    if group == "task":
        dc, cls = TASK_DATACLASS_REGISTRY.get(name), TASK_REGISTRY.get(name)
    else:
        reg = REGISTRIES[group]
        dc, cls = reg["dataclass_registry"].get(name), reg["registry"].get(name)
    if dc is not None:
        return {f.name for f in dataclasses.fields(dc)}
    parser = argparse.ArgumentParser(add_help=False)
    if cls is not None and hasattr(cls, "add_args"):
        cls.add_args(parser)
    return {a.dest for a in parser._actions}


def _dests(flags: list[str]) -> list[str]:
    """The argparse dests of the long flags given, in order (``--lr-scheduler`` -> lr_scheduler)."""
    return [f[2:].replace("-", "_") for f in flags if f.startswith("--")]


def row_config(argv: list[str]) -> dict:
    """A fairseq-train argv as a hydra config: {group: {key: value}} of the flags given."""
    from fairseq import options

    data, rest, mandatory = argv[1], [], []
    i = 2
    while i < len(argv):
        flag = argv[i]
        value = argv[i + 1] if i + 1 < len(argv) else ""
        if flag in RUN_FLAGS:
            i += 2
            continue
        if flag in MANDATORY_FLAGS or (flag.startswith("--") and PLACEHOLDER.fullmatch(value)):
            mandatory.append(flag[2:].replace("-", "_"))
            i += 2
            continue
        rest.append(flag)
        i += 1
    task = rest[rest.index("--task") + 1] if "--task" in rest else "translation"
    parser = options.get_training_parser(default_task=task)
    args = options.parse_args_and_arch(parser, [data, *rest])
    owners = _owner_fields()
    components = {
        g: getattr(args, key) for key, g in COMPONENTS.items() if getattr(args, key, None)
    }
    fields = {g: _component_fields(g, n) for g, n in components.items() if g != "model"}
    cfg: dict = {"common": {"user_dir": USER_DIR}, "task": {"_name": task, "data": "???"}}
    for group, name in components.items():
        cfg.setdefault(group, {})["_name"] = name
    for dest in _dests(rest) + mandatory:
        if dest in COMPONENTS:
            continue
        value = "???" if dest in mandatory else getattr(args, dest)
        group = next((g for g in GROUPS if dest in owners.get(g, ())), None)
        if group is None:
            group = next((g for g, names in fields.items() if dest in names), "model")
        cfg.setdefault(group, {})[dest] = value
    cfg["model"].update(_arch_values(args))
    return {g: cfg[g] for g in GROUPS if g in cfg}


def _arch_values(args) -> dict:
    """For a dataclass model (a language model) named by an architecture: the values the
    architecture function sets that differ from the dataclass defaults. fairseq-hydra-train
    fills the dataclass defaults in before the architecture function runs, which then keeps
    them (``transformer_lm_wiki103`` would build the 6-layer default): written out, they win."""
    from fairseq.models import ARCH_MODEL_NAME_REGISTRY, MODEL_DATACLASS_REGISTRY

    dc = MODEL_DATACLASS_REGISTRY.get(ARCH_MODEL_NAME_REGISTRY.get(args.arch))
    if dc is None:
        return {}
    out = {}
    for f in dataclasses.fields(dc):
        default = f.default
        if f.default_factory is not dataclasses.MISSING:
            default = f.default_factory()
        if not hasattr(args, f.name) or (isinstance(default, str) and "${" in default):
            continue
        value = getattr(args, f.name)
        if isinstance(value, bool) and isinstance(default, int) and not isinstance(default, bool):
            value = int(value)  # an architecture's False for an int field (base_shuffle)
        if value != default and not (isinstance(value, str) and "${" in value):
            out[f.name] = value
    return out


def _vocab(cfg: dict, data: str) -> int:
    from lightcompress.models.presets import PRESETS

    preset = PRESETS.get(cfg["model"]["_name"])
    if preset is not None and preset.vocab:
        return preset.vocab
    if cfg["task"]["_name"] == "sentence_prediction":
        return GLUE_VOCAB
    return DATA_VOCAB[os.path.basename(data.rstrip("/"))]


def buildable(cfg: dict) -> bool:
    """Whether the model is defined by the config alone: not a DA-WID model (built from its
    teacher's checkpoint) and no value the recipe computes at run time (``???``)."""
    model = cfg["model"]
    return not model["_name"].startswith("dawid") and "???" not in model.values()


def built_params(recipe: str, cfg: dict, vocab: int) -> int:
    """Unique parameters of the config's model as fairseq-hydra-train builds it (the config
    written to a temporary folder and composed), on the meta device at ``vocab``."""
    from lightcompress.configs_build import build_config_model, compose
    from lightcompress.modules import count_unique_params

    name = os.path.splitext(os.path.basename(config_path(recipe)))[0]
    with tempfile.TemporaryDirectory() as folder:
        with open(os.path.join(folder, name + ".yaml"), "w", encoding="utf-8") as f:
            f.write(render(recipe, cfg, 0, vocab))
        composed = compose(folder, name, ["task.data=/nonexistent"])
    return count_unique_params(build_config_model(composed, vocab))


def _yaml_value(value) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (int, float)):
        return repr(value)
    if isinstance(value, (list, tuple)):
        return "[" + ", ".join(_yaml_value(v) for v in value) + "]"
    text = str(value)
    if (
        text == "???"
        or re.fullmatch(r"[A-Za-z_][\w./-]*", text)
        and text not in ("true", "false", "null", "yes", "no", "on", "off")
    ):
        return text
    return "'" + text.replace("'", "''") + "'"


def render(recipe: str, cfg: dict, params: int | None, vocab: int) -> str:
    """The config's text: the recipe's description, its size, the groups."""
    from lightcompress.models.presets import PRESETS

    name = os.path.splitext(os.path.basename(config_path(recipe)))[0]
    family = os.path.basename(os.path.dirname(recipe))
    preset = PRESETS.get(cfg["model"]["_name"])
    paper = ""
    if preset is not None and preset.paper_params:
        paper = f" ({cfg['model']['_name']} as a preset: paper {preset.paper_params}M)"
    if cfg["model"]["_name"].startswith("dawid"):
        size = "# parameters: the teacher's (model.dawid_teacher), pruned by DA-WID's training"
    elif params is None:
        computed = ", ".join(f"model.{k}" for k, v in cfg["model"].items() if v == "???")
        size = f"# parameters: set by {computed}, which the recipe computes at run time (???)"
    else:
        size = f"# parameters: {params:,} at a {vocab:,}-entry dictionary{paper}"
    lines = [
        "# @package _group_",
        f"# Generated by scripts/make_configs.py from {recipe}: edit the recipe, then rerun it.",
        f"# paper: {PAPERS[family]}",
        *_header(recipe),
        size,
        f"# run: fairseq-hydra-train --config-dir configs/{family} --config-name {name} "
        + "task.data=DATA checkpoint.save_dir=DIR",
        f"#   (the recipe, with DRY_RUN=1, prints the overrides it uses: bash {recipe})",
        "hydra:",
        "  run:",
        "    dir: .",
        "  output_subdir: null",
    ]
    for group, body in cfg.items():
        lines.append(f"{group}:")
        for key, value in body.items():
            lines.append(f"  {key}: {_yaml_value(value)}")
    return "\n".join(lines) + "\n"


def expected(recipe: str) -> str | None:
    """The text configs/ should hold for a recipe (None: it trains nothing)."""
    argv = row_training(recipe)
    if argv is None:
        return None
    cfg = row_config(argv)
    vocab = _vocab(cfg, argv[1])
    params = None
    if buildable(cfg):
        params = built_params(recipe, cfg, vocab)
    return render(recipe, cfg, params, vocab)


def write_all(check: bool = False) -> list[str]:
    """Write (or, with ``check``, compare) every recipe's config; returns the paths that
    differ (check) or were written."""
    import lightcompress.plugin  # noqa: F401  (registers the plugin)

    out = []
    for recipe in recipes():
        text = expected(recipe)
        if text is None:
            continue
        path = os.path.join(ROOT, config_path(recipe))
        old = None
        if os.path.exists(path):
            with open(path, encoding="utf-8") as f:
                old = f.read()
        if old == text:
            continue
        out.append(os.path.relpath(path, ROOT))
        if not check:
            os.makedirs(os.path.dirname(path), exist_ok=True)
            with open(path, "w", encoding="utf-8") as f:
                f.write(text)
    return out


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--check", action="store_true", help="only compare; exit 1 on a difference")
    args = parser.parse_args(argv)
    changed = write_all(check=args.check)
    for path in changed:
        print(("differs: " if args.check else "wrote: ") + path)
    if args.check and changed:
        print("configs/ is out of date: run python scripts/make_configs.py", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
