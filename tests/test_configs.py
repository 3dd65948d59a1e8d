"""configs/: one fairseq hydra config per recipe row, generated from the recipes.

- the committed configs are what ``scripts/make_configs.py`` writes from the recipes' dry runs
  (a recipe and its config cannot drift), one per row;
- every config composes as ``fairseq-hydra-train`` composes it and builds its model with the
  parameter count its header states (the presets' paper sizes);
- one config per family trains a few updates through ``fairseq-hydra-train`` and generates
  (tests/test_configs_train.py).
"""

import glob
import os
import re
import sys

import pytest
from harness import REPO_ROOT
from omegaconf import OmegaConf

sys.path.insert(0, os.path.join(REPO_ROOT, "scripts"))
import make_configs

import lightcompress.plugin  # noqa: F401  (registers the plugin)
from lightcompress.configs_build import build_config_model, compose
from lightcompress.modules import count_unique_params

CONFIGS = sorted(
    os.path.relpath(p, REPO_ROOT)
    for p in glob.glob(os.path.join(REPO_ROOT, "configs", "*", "*.yaml"))
)
SIZE = re.compile(r"^# parameters: ([\d,]+) at a ([\d,]+)-entry dictionary", re.MULTILINE)


@pytest.fixture(scope="module")
def rows():
    """{config path: recipe} of every recipe that trains."""
    out = {}
    for recipe in make_configs.recipes():
        argv = make_configs.row_training(recipe)
        if argv is not None:
            out[make_configs.config_path(recipe)] = (recipe, argv)
    return out


def test_every_recipe_row_has_its_config_and_every_config_a_recipe(rows):
    assert sorted(rows) == CONFIGS
    # the five papers' tables are all there (Subformer's LM and summarization, DA-WID's GLUE)
    names = {os.path.splitext(p)[0].split("/", 1)[1] for p in CONFIGS}
    for name in (
        "lightformer/table7_lightformer_12_2",
        "lightformer/table2_iwslt14_lightformer",
        "hypoformer/table5_r4_iwslt14_hypoformer_12_2_d256",
        "subformer/table5_subformer",
        "subformer/table6_cnn_dm_subformer",
        "smartformer/iwslt14_smartformer_search",
        "dawid/glue_RTE",
        "dawid/iwslt14_dawid",
    ):
        assert name in names


def test_committed_configs_are_what_the_recipes_generate(rows):
    """Everything but the built size (checked below by building the model)."""
    stale = []
    for path, (recipe, argv) in rows.items():
        cfg = make_configs.row_config(argv)
        want = make_configs.render(recipe, cfg, 0, 0)
        with open(os.path.join(REPO_ROOT, path), encoding="utf-8") as f:
            have = f.read()
        mask = re.compile(r"^# parameters: .*$", re.MULTILINE)
        if mask.sub("", have) != mask.sub("", want):
            stale.append(path)
    assert stale == [], f"out of date (python scripts/make_configs.py rewrites them): {stale}"


def _compose(path, *overrides):
    folder, name = os.path.split(os.path.join(REPO_ROOT, path))
    return compose(folder, name[: -len(".yaml")], ["task.data=/nonexistent", *overrides])


@pytest.mark.parametrize("path", [p for p in CONFIGS if not p.startswith("configs/dawid/")])
def test_config_composes_and_builds_its_model_with_the_stated_size(path):
    with open(os.path.join(REPO_ROOT, path), encoding="utf-8") as f:
        text = f.read()
    cfg = _compose(path)
    assert cfg.common.user_dir == "lightcompress" and cfg.task.data == "/nonexistent"
    size = SIZE.search(text)
    if size is None:  # a value the recipe computes at run time (a matched rank): mandatory
        (computed,) = [k for k in cfg.model if OmegaConf.is_missing(cfg.model, k)]
        assert f"model.{computed}" in text
        cfg = _compose(path, f"model.{computed}=64")
        assert count_unique_params(build_config_model(cfg, 10200)) > 0
        return
    params, vocab = (int(g.replace(",", "")) for g in size.groups())
    assert count_unique_params(build_config_model(cfg, vocab)) == params


def test_the_sizes_are_the_papers():
    """The headers' sizes: the presets' paper sizes (as tests/test_lightformer.py and the
    others check the presets), here for the rows whose config changes the preset's depth."""
    expect = {  # config: paper size (M), from the papers' tables
        "lightformer/table2_iwslt14_lightformer": 7.7,  # Table 2 / Table 6 r5-r6
        "lightformer/table7_lightformer_12_2": 6.7,  # Table 7
        "lightformer/table7_lightformer_18_2": 6.7,
        "lightformer/table7_lightformer_18_1": 5.8,
        "lightformer/table8_lightformer_18_3_groups9": 9.4,  # Table 8
        "lightformer/table8_lightformer_18_3_groups1": 4.8,
        "lightformer/table6_r4_lmf": 14.6,  # Table 6 r4
        "hypoformer/table5_r1_iwslt14_hypoformer_12_2_d512": 9.8,  # Table 5
        "hypoformer/table5_r4_iwslt14_hypoformer_12_2_d256": 3.6,
        "subformer/table5_subformer": 96.3,  # Subformer Table 5
    }
    for name, paper in expect.items():
        with open(os.path.join(REPO_ROOT, "configs", name + ".yaml"), encoding="utf-8") as f:
            params = int(SIZE.search(f.read()).group(1).replace(",", ""))
        assert abs(params / 1e6 - paper) / paper < 0.02, (name, params, paper)


def test_a_dawid_config_needs_its_teacher():
    from omegaconf.errors import MissingMandatoryValue

    cfg = _compose("configs/dawid/glue_RTE.yaml")
    assert cfg.model._name == "dawid_roberta" and cfg.criterion._name == "dawid"
    assert cfg.task.num_classes == 2 and cfg.optimization.lr == [2e-05]
    with pytest.raises(MissingMandatoryValue):
        cfg.model.dawid_teacher  # noqa: B018


def test_an_unknown_row_is_one_clear_error():
    with pytest.raises(ValueError, match="no config 'table9_nothing' .* table7_lightformer_12_2"):
        compose(os.path.join(REPO_ROOT, "configs", "lightformer"), "table9_nothing")


def test_a_recipes_dry_run_prints_its_config_and_the_overrides_it_uses(tmp_path):
    """NUM_GPUS=0 and LR=1e-3: the printed config with its overrides composes to the training
    the recipe runs (the CPU, the learning rate, the paths)."""
    import shlex
    import subprocess

    recipe = os.path.join(REPO_ROOT, "examples/translation/lightformer/table7-lightformer-12-2.sh")
    env = {k: v for k, v in os.environ.items() if k not in make_configs.CLEAN}
    env.update(
        DRY_RUN="1",
        NUM_GPUS="0",
        LR="1e-3",
        USER_DIR="lightcompress",
        PYTHON=sys.executable,
        HOME=str(tmp_path),
    )
    proc = subprocess.run(
        ["bash", recipe],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
    )
    lines = proc.stdout.splitlines()
    i = next(i for i, ln in enumerate(lines) if "this row's training from its config" in ln)
    assert lines[i].endswith("configs/lightformer/table7_lightformer_12_2.yaml:")
    cmd = shlex.split(lines[i + 1].strip()[: -len(")")])
    assert cmd[:5] == [
        "fairseq-hydra-train",
        "--config-dir",
        os.path.join(REPO_ROOT, "configs", "lightformer"),
        "--config-name",
        "table7_lightformer_12_2",
    ]
    cfg = compose(cmd[2], cmd[4], cmd[5:])
    save = "checkpoints/lightformer/iwslt14/lightformer-12-2-g6-svd"
    assert cfg.task.data == "data-bin/iwslt14.tokenized.de-en"
    assert cfg.checkpoint.save_dir == save
    assert cfg.checkpoint.finetune_from_model == save + "/student_init.pt"
    assert cfg.common.cpu is True and cfg.common.fp16 is False
    assert cfg.optimization.lr == [0.001] and cfg.model.encoder_layers == 12
    assert len(cmd) == 5 + 6  # data, save dir, converted weights, cpu, fp16, lr: no more
