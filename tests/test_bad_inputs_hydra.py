"""The bad-input sweep of issue 56, item 6: ``configs/`` with ``fairseq-hydra-train``.

A config that cannot train ends in one line naming the key (hydra's ``Error executing job with
overrides`` before it, its ``HYDRA_FULL_ERROR`` hint after it), no traceback and a non-zero exit,
before the save directory is made (or with the directory fairseq made removed again), and the
corrected command then trains in that save directory (:mod:`lightcompress.hydra_checks`).

The runs are ``fairseq_cli.hydra_train.cli_main`` (what the console script calls) one after the
other in one child process (one start-up for all), the plugin imported through
``common.user_dir`` by the first as fairseq imports it; the checks' other cases on composed
configs in this process.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest
from harness import REPO_ROOT, USER_DIR

TINY = [
    "++model.encoder_embed_dim=32",
    "++model.decoder_embed_dim=32",
    "++model.encoder_ffn_embed_dim=64",
    "++model.decoder_ffn_embed_dim=64",
    "++model.encoder_attention_heads=2",
    "++model.decoder_attention_heads=2",
    "++model.encoder_layers=4",
    "++model.decoder_layers=2",
    "++model.lc_encoder_groups=2",
    "++model.lc_rank=8",
    "++model.lc_embed_rank=8",
]
RUN = [
    "common.cpu=true",
    "optimization.max_update=1",
    "dataset.max_tokens=2048",
    "dataset.num_workers=0",
    "dataset.data_buffer_size=0",
]
LIGHT = ("lightformer", "table7_lightformer_12_2")

# id: (config, overrides (DATA: the tiny data-bin), words of the line): run by fairseq-hydra-train
CASES = {
    "data-unset": (
        ("lightformer", "table2_iwslt14_lightformer"),
        ["common.fp16=false"],
        ["task.data is not set", "task.data=DIR"],
    ),
    "data-unset-subformer": (
        ("subformer", "table2_sandwich_6_6"),
        ["common.fp16=false"],
        ["task.data is not set"],
    ),
    "data-missing": (
        LIGHT,
        ["task.data=DATA/nope", "common.fp16=false"],
        ["task.data=", "no directory", "nope"],
    ),
    "rank-abc": (
        LIGHT,
        ["task.data=DATA", "common.fp16=false", "++model.lc_rank=abc"],
        ["model.lc_rank='abc' is not an integer", "--lc-rank"],
    ),
    "fp16-on-cpu": (
        LIGHT,
        ["task.data=DATA"],  # the config's fp16: true
        ["common.fp16=true needs a CUDA GPU", "common.cpu=true", "common.fp16=false"],
    ),
    "rank-too-large": (
        LIGHT,
        [
            "task.data=DATA",
            "common.fp16=false",
            "++model.lc_embed_rank=135",
        ],  # found as the model is built
        ["rank 135", "encoder.embed_tokens"],
    ),
    "kd-data-unset": (
        ("kd", "run_iwslt14_kd"),
        ["task.data=DATA", "common.fp16=false"],
        ["task.kd_distilled_data is not set", "task.kd_distilled_data=DIR"],
    ),
    "dawid-teacher-unset": (
        ("dawid", "iwslt14_dawid"),
        ["task.data=DATA", "common.fp16=false"],
        ["model.dawid_teacher is not set"],
    ),
}
# the same checks on a composed config (lightcompress.configs_build.compose), in this process
CHECKS = {
    "data-not-a-data-bin": (LIGHT, ["task.data=EMPTY"], ["task.data=", "no dict.de.txt"]),
    "data-a-file": (LIGHT, ["task.data=DATA/dict.de.txt"], ["task.data=", "is a file"]),
    "rank-float": (LIGHT, ["++model.lc_rank=0.5"], ["model.lc_rank=0.5 is not an integer"]),
    "rank-list": (LIGHT, ["++model.lc_rank=[8,8]"], ["model.lc_rank=", "is not an integer"]),
    "rank-bool": (LIGHT, ["++model.lc_rank=true"], ["model.lc_rank=True is not an integer"]),
    "ratio-abc": (
        LIGHT,
        ["++model.lc_rank_ratio=abc"],
        ["model.lc_rank_ratio='abc' is not a number"],
    ),
    "dropout-abc": (LIGHT, ["++model.dropout=abc"], ["model.dropout='abc' is not a number"]),
    "admin-init-choice": (
        LIGHT,
        ["++model.admin_init=maybe"],
        ["model.admin_init='maybe' is not one of", "closed-form"],
    ),
    "hypoformer-rank-abc": (
        ("hypoformer", "table4_r4_hypoformer_no_kd"),
        ["++model.hypo_ffn_rank=abc"],
        ["model.hypo_ffn_rank='abc'"],
    ),
    "fp16-on-cpu": (LIGHT, ["common.fp16=true"], ["common.fp16=true needs a CUDA GPU"]),
}
# after rank-too-large (fairseq had made its save directory): the corrected command trains
CORRECTED = (LIGHT, ["task.data=DATA", "common.fp16=false"])

_DRIVER = r"""
import contextlib, io, json, os, sys
from hydra.core.global_hydra import GlobalHydra
from fairseq_cli import hydra_train
cases, path, results = json.loads(sys.argv[1]), sys.argv[2], {}
for name, argv in cases.items():
    GlobalHydra.instance().clear()
    out, err = io.StringIO(), io.StringIO()
    sys.argv = ["fairseq-hydra-train", *argv]
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            hydra_train.cli_main()
            status = 0
        except SystemExit as exc:
            status = exc.code
    save = next(a for a in argv if a.startswith("checkpoint.save_dir=")).split("=", 1)[1]
    results[name] = [status, out.getvalue(), err.getvalue(), os.path.exists(save)]
with open(path, "w") as f:
    json.dump(results, f)
"""


def _argv(config, overrides, data, save) -> list[str]:
    family, row = config
    model = TINY if family == "lightformer" else []
    subst = [o.replace("DATA", data) for o in overrides]
    return [
        "--config-dir",
        os.path.join(REPO_ROOT, "configs", family),
        "--config-name",
        row,
        f"common.user_dir={USER_DIR}",
        f"checkpoint.save_dir={save}",
        *RUN,
        *model,
        *subst,
    ]


@pytest.fixture(scope="module")
def runs(tiny_data, tmp_path_factory):
    """{case: (exit status, stdout, stderr, whether the save directory exists after it)} of
    every case, and of ``corrected`` (run last, in the save directory of ``rank-too-large``)."""
    root = tmp_path_factory.mktemp("hydra")
    argvs, saves = {}, {}
    for name, (config, overrides, _words) in CASES.items():
        saves[name] = str(root / "ckpt" / name)
        argvs[name] = _argv(config, overrides, tiny_data, saves[name])
    saves["corrected"] = saves["rank-too-large"]
    argvs["corrected"] = _argv(*CORRECTED, tiny_data, saves["corrected"])
    env = dict(os.environ, PYTHONWARNINGS="ignore", OMP_NUM_THREADS="1")
    env["PYTHONPATH"] = os.pathsep.join(p for p in (REPO_ROOT, env.get("PYTHONPATH")) if p)
    env.pop("HYDRA_FULL_ERROR", None)
    result = root / "results.json"
    proc = subprocess.run(
        [sys.executable, "-c", _DRIVER, json.dumps(argvs), str(result)],
        cwd=root,
        env=env,
        timeout=300,
        capture_output=True,
        text=True,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr[-4000:]
    with open(result) as f:
        return json.load(f)


def _the_line(err: str) -> str:
    """The error's line: what hydra prints besides its own two lines."""
    lines = [
        ln
        for ln in err.splitlines()
        if ln.strip()
        and not ln.startswith(
            (
                "Error executing job with overrides:",
                "Set the environment variable HYDRA_FULL_ERROR",
                "DEBUG:hydra",
            )
        )
    ]
    assert len(lines) == 1, err
    return lines[0]


@pytest.mark.parametrize("case", list(CASES))
def test_6_a_config_that_cannot_train_is_one_line(runs, case):
    status, out, err, save_dir_made = runs[case]
    assert status not in (0, None), (out[-2000:], err)
    assert "Traceback" not in out + err
    line = _the_line(err)
    assert all(w in line for w in CASES[case][2]), line
    if case != "rank-too-large":  # found before fairseq makes the save directory
        assert "[fairseq_cli.train][INFO] - {" not in out  # nor logs the config
    assert not save_dir_made


def test_6_the_corrected_command_trains_in_that_save_directory(runs):
    status, out, err, save_dir_made = runs["corrected"]
    assert status == 0 and save_dir_made, err[-3000:]
    assert "num_updates 1" in out or "num_updates: 1 >= max_update: 1" in out, out[-3000:]


@pytest.mark.parametrize("case", list(CHECKS))
def test_6_the_checks_name_the_key(case, tiny_data, tmp_path):
    from lightcompress.configs_build import compose
    from lightcompress.errors import ConfigError
    from lightcompress.hydra_checks import check_config

    (family, row), overrides, words = CHECKS[case]
    overrides = [o.replace("DATA", tiny_data).replace("EMPTY", str(tmp_path)) for o in overrides]
    if not any(o.startswith("task.data=") for o in overrides):
        overrides.append(f"task.data={tiny_data}")
    if not any(o.startswith("common.fp16=") for o in overrides):
        overrides.append("common.fp16=false")
    cfg = compose(os.path.join(REPO_ROOT, "configs", family), row, ["common.cpu=true", *overrides])
    with pytest.raises(ConfigError) as info:
        check_config(cfg)
    line = str(info.value)
    assert "\n" not in line and all(w in line for w in words), line


def test_6_the_checks_pass_every_shipped_config_given_its_values(tiny_data):
    """No shipped row is refused once its ??? values are given (the rows as written: the
    values hydra reads from them; composing all of them takes minutes)."""
    import glob

    from omegaconf import OmegaConf

    from lightcompress.hydra_checks import check_config

    rows = sorted(glob.glob(os.path.join(REPO_ROOT, "configs", "*", "*.yaml")))
    assert len(rows) > 100
    for path in rows:
        cfg = OmegaConf.load(path)
        for group in ("task", "model"):
            for key in cfg[group]:
                if OmegaConf.is_missing(cfg[group], key):
                    cfg[group][key] = tiny_data if key.endswith("data") else "8"
        cfg.task.data = tiny_data
        if "source_lang" in cfg.task:  # (the tiny data is de-en)
            cfg.task.source_lang, cfg.task.target_lang = "de", "en"
        cfg.common.cpu, cfg.common.fp16 = True, False
        check_config(cfg)
