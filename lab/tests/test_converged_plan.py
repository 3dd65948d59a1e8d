"""The converged plan (lab/results/converged.py): its dry run names every row
with its commands, a row stopped after its checkpoint resumes from it (also after another
device trained it on: device/handoff.py), a finished row is not redone, and the table builds from the row JSON alone (the committed rows included)."""

import json
import os
import shlex
import shutil
import subprocess
import sys
import tarfile

import harness
import pytest

RESULTS = os.path.join(harness.REPO_ROOT, "lab", "results")  # the harness
PLAN = os.path.join(RESULTS, "converged.py")
HANDOFF = os.path.join(RESULTS, "device", "handoff.py")
# the committed rows and the shipped teacher (beside the product, where README links them)
SHIPPED = os.path.join(harness.REPO_ROOT, "examples", "translation", "results")
TEACHER = os.path.join(SHIPPED, "teacher")
sys.path.insert(0, RESULTS)

import converged


def _handoff(*args, check=True, env=None):
    env = dict(os.environ, PYTHONPATH=harness.SOURCES, OMP_NUM_THREADS="1", **(env or {}))
    proc = subprocess.run(
        [sys.executable, HANDOFF, *map(str, args)],
        capture_output=True,
        text=True,
        env=env,
        timeout=600,
        check=False,
    )
    if check:
        assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-3000:]
    return proc


def _plan(*args, check=True):
    env = dict(os.environ, PYTHONPATH=harness.SOURCES, OMP_NUM_THREADS="1")
    proc = subprocess.run(
        [sys.executable, PLAN, *map(str, args)],
        capture_output=True,
        text=True,
        env=env,
        timeout=600,
        check=False,
    )
    if check:
        assert proc.returncode == 0, proc.stderr[-3000:]
    return proc


@pytest.fixture(scope="module")
def corpus(tmp_path_factory):
    """A tiny corpus in the teacher's vocabulary: the model card's test sentences, encoded by
    the teacher's sentencepiece model and binarized with its dictionaries (what the plan's
    --data-dir holds: bin/ and raw/test.en)."""
    import sentencepiece as spm

    root = tmp_path_factory.mktemp("converged_corpus")
    with open(os.path.join(TEACHER, "head.json"), encoding="utf-8") as f:
        pairs = json.load(f)["pairs"]
    sp = spm.SentencePieceProcessor(model_file=os.path.join(TEACHER, "spm.model"))
    (root / "raw").mkdir()
    (root / "spm").mkdir()
    src = [p["de"] for p in pairs] * 2
    ref = [p["en"] for p in pairs] * 2
    for split in ("train", "valid", "test"):
        for lang, lines in (("de", src), ("en", ref)):
            text = "\n".join(" ".join(sp.encode(s, out_type=str)) for s in lines) + "\n"
            (root / "spm" / f"{split}.{lang}").write_text(text, encoding="utf-8")
    (root / "raw" / "test.en").write_text("\n".join(ref) + "\n", encoding="utf-8")
    harness.run_cli(
        "fairseq-preprocess",
        [
            "-s",
            "de",
            "-t",
            "en",
            "--trainpref",
            root / "spm" / "train",
            "--validpref",
            root / "spm" / "valid",
            "--testpref",
            root / "spm" / "test",
            "--destdir",
            root / "bin",
            "--srcdict",
            os.path.join(TEACHER, "dict.de.txt"),
            "--tgtdict",
            os.path.join(TEACHER, "dict.en.txt"),
            "--workers",
            "1",
        ],
    )
    return root


def test_the_dry_run_names_every_row_with_its_commands(corpus, tmp_path):
    out = _plan(
        "plan",
        "--data-dir",
        corpus,
        "--save-root",
        tmp_path / "runs",
        "--rows-dir",
        tmp_path / "rows",
        "--cpu",
    ).stdout
    heads = [ln.split(":")[0][2:] for ln in out.splitlines() if ln.startswith("# ")]
    assert heads == [*converged.ROWS, "speed", "table"]
    blocks = out.split("\n# ")
    by = {b.split(":")[0].lstrip("# "): b for b in blocks}
    for row in converged.ROWS:
        assert "\n+ " in by[row], row  # every row prints at least one command
    # the compress rows run lightcompress-compress with the plan's budget, the others fairseq
    assert "-m lightcompress.compress" in by["default"] and "--max-update 7000" in by["default"]
    assert "--keep-depth" in by["lightformer_keep_depth"]
    assert "--method hypoformer --kd" in by["hypoformer_kd"]
    assert "--method hypoformer --no-kd" in by["hypoformer"]
    assert "--search-ranks 32,64,128" in by["smartformer_search"]
    # the random-init row is the default student's own training without its SVD start
    rand = by["lightformer_random"]
    assert "fairseq-train" in rand and "--arch lightformer" in rand
    assert "--finetune-from-model" not in rand and "--lc-rank 50" in rand
    # the subformer row: the teacher's own recipe (read from the shipped checkpoint) and the
    # plugin's default initialisation; the diagnostic rows: the paper's schedule, each init named
    sub = by["subformer"].split("\n+ ")[1].split()
    assert "--arch" in sub and sub[sub.index("--arch") + 1] == "subformer"
    assert "--subformer-init" not in sub
    for flag, value in (
        ("--max-tokens", "16384"),
        ("--lr", "0.0015"),
        ("--warmup-updates", "500"),
        ("--patience", "10"),
        ("--max-update", "30000"),
        ("--dropout", "0.3"),
    ):
        assert sub[sub.index(flag) + 1] == value, flag
    assert "--validate-interval-updates" not in sub  # every epoch, as the teacher
    bert, fi = (
        by[r].split("\n+ ")[1].split() for r in ("subformer_bert_init", "subformer_fairseq_init")
    )
    i, j = bert.index("--save-dir"), fi.index("--save-dir")
    assert fi[j + 1].endswith(os.path.join("subformer_fairseq_init", "student"))
    assert (
        "--lr 5e-4" in by["subformer_bert_init"]
        and "--max-tokens 4096" in by["subformer_bert_init"]
    )
    k = bert.index("--subformer-init")
    assert bert[k + 1] == "bert" and fi[k + 1] == "fairseq"
    assert fi[:k] + fi[k + 2 : j] + fi[j + 2 :] == bert[:k] + bert[k + 2 : i] + bert[i + 2 :]
    # the control: the default row's training with the teacher's architecture, from the teacher
    ctl = by["teacher_control"].split("\n+ ")[1].split()
    assert ctl[ctl.index("--arch") + 1] == "transformer" and "--lc-rank" not in ctl
    assert ctl[ctl.index("--finetune-from-model") + 1] == os.path.join(TEACHER, "checkpoint.pt")
    assert "measure_speed.sh" in by["speed"] and "--shortlist" in by["speed"]
    assert not (tmp_path / "runs").exists() and not (tmp_path / "rows").exists()


def test_bad_input_is_one_line(corpus, tmp_path):
    bad = _plan("run", "nosuchrow", "--data-dir", corpus, check=False)
    assert (
        bad.returncode == 2 and bad.stderr.count("\n") == 1 and "no row 'nosuchrow'" in bad.stderr
    )
    missing = _plan(
        "run",
        "subformer",
        "--data-dir",
        tmp_path / "none",
        "--save-root",
        tmp_path / "runs",
        "--rows-dir",
        tmp_path / "rows",
        check=False,
    )
    assert missing.returncode == 2 and "l10n_corpus.py --permissive-only" in missing.stderr
    early = _plan(
        "run",
        "dawid",
        "--data-dir",
        corpus,
        "--save-root",
        tmp_path / "runs",
        "--rows-dir",
        tmp_path / "rows",
        check=False,
    )
    assert early.returncode == 2 and "run that row first" in early.stderr
    assert not (tmp_path / "rows").exists()


def test_a_row_stopped_after_its_checkpoint_resumes_and_a_finished_row_is_kept(corpus, tmp_path):
    runs, rows = tmp_path / "runs", tmp_path / "rows"
    common = [
        "--data-dir",
        corpus,
        "--save-root",
        runs,
        "--rows-dir",
        rows,
        "--cpu",
        "--validate-every",
        2,
        "--patience",
        5,
    ]
    # a first run that stops after update 2 (its checkpoint written), as a stop would leave it
    _plan("run", "subformer", *common, "--max-update", 2)
    save = runs / "subformer"
    assert (save / "student" / "checkpoint_last.pt").exists()
    (rows / "subformer.json").unlink()
    # a row still training: source-check measures its last checkpoint and records nothing
    out = _plan("source-check", "subformer", *common).stdout
    assert out.startswith("subformer (training; ") and "not recorded" in out, out
    live = json.loads(out.split("not recorded): ", 1)[1])
    assert live["updates"] == 2 and live["own_bits"] > 0 and live["other_bits"] > 0, live
    assert not (rows / "subformer.json").exists()
    # trained but not scored yet (its translation not written): status says so
    (save / "generate-test.txt").unlink()
    where = _plan("status", *common).stdout.splitlines()
    assert any(ln.startswith("subformer: trained, not scored yet, 2 of") for ln in where), where
    (save / "student" / "train.done").unlink()
    # handed to "another device" (device/handoff.py; here the same CPU): send packs update 2,
    # train goes on for one update (its time limit), receive puts update 3 back into the row
    carry, back = tmp_path / "carry", tmp_path / "back"
    budget = [*common, "--max-update", 4]
    # more than the device tool takes (the working tree + the carried folder): refused, no state
    big = _handoff(
        "send",
        "subformer",
        "--carry",
        carry,
        *budget,
        check=False,
        env={"HANDOFF_CARRY_MIB": "0.5"},
    )
    assert big.returncode == 2 and "exceed the tool's" in big.stderr, big.stderr
    assert big.stderr.count("\n") == 1 and not (carry / "state" / "subformer").exists()
    _handoff("send", "subformer", "--carry", carry, *budget)
    with tarfile.open(carry / "bin.tar.xz", "w:xz") as t:
        t.add(os.path.join(corpus, "bin"), arcname="bin")
    env = {"OUT": str(back)}
    _handoff("train", "--carry", carry, "--secs", "0.001", "--work", tmp_path / "w", env=env)
    res = json.loads((back / "subformer" / "result.json").read_text(encoding="utf-8"))
    assert (res["from_update"], res["last_update"], res["ended"], res["fresh"]) == (
        2,
        3,
        False,
        False,
    ), res
    assert "last" in res["files"] and "--cpu" not in json.dumps(res)
    bad = _handoff("receive", "dawid", back / "subformer", *budget, check=False)
    assert bad.returncode == 2 and "holds the row 'subformer', not 'dawid'" in bad.stderr
    bad = _handoff("receive", "dawid", back, *budget, check=False)  # (no dawid/ there)
    assert bad.returncode == 2 and "no readable result.json" in bad.stderr
    _handoff("receive", "subformer", back, *budget)
    assert (save / "student" / "checkpoint_last.cpu-2.pt").exists()
    again = _handoff("receive", "subformer", back, *budget, check=False)  # (taken already)
    assert again.returncode == 2 and "at update 3, the device went on from 2" in again.stderr
    _plan("run", "subformer", *common, "--max-update", 4)
    log = (save / "train.log").read_text(encoding="utf-8")
    assert "Loaded checkpoint" in log and "@ 3 updates)" in log  # resumed, not restarted
    parts = converged._device_parts(log, 4)
    assert [(p["from_update"], p["updates"]) for p in parts] == [(0, 2), (2, 1), (3, 1)], parts
    rec = json.loads((rows / "subformer.json").read_text(encoding="utf-8"))
    assert rec["updates"] == 4 and rec["row"] == "subformer"
    assert rec["params"] > 0 and rec["sentences"] == 10 and 0 <= rec["bleu"] <= 100
    assert rec["budget"] == {
        "max_update": 4,
        "validate_every": 2,
        "patience": 5,
        "max_tokens": 16384,
    }
    assert "/" + os.path.basename(str(runs)) not in json.dumps(rec)  # SAVE, not this machine's path
    assert rec["checkpoint"] == "SAVE/subformer/student/checkpoint_best.pt"
    # a device run that ends the training (--max-update 5): the step is marked done, and the
    # lane only scores the row (no fairseq-train here: no fourth "Loaded checkpoint")
    for f in (rows / "subformer.json", save / "generate-test.txt", save / "student" / "train.done"):
        f.unlink()
    budget = [*common, "--max-update", 5]
    _handoff("send", "subformer", "--carry", carry, *budget)
    shutil.rmtree(back)
    _handoff("train", "--carry", carry, "--secs", "600", "--work", tmp_path / "w2", env=env)
    res = json.loads((back / "subformer" / "result.json").read_text(encoding="utf-8"))
    assert (res["from_update"], res["last_update"], res["ended"]) == (4, 5, True), res
    assert set(res["files"]) <= {"final"} and res["final"] == "checkpoint_best.pt"
    _handoff("receive", "subformer", back, *budget)
    assert (save / "student" / "train.done").exists()
    _plan("run", "subformer", *budget)
    log = (save / "train.log").read_text(encoding="utf-8")
    assert log.count("Loaded checkpoint") == 3, log[-3000:]
    rec = json.loads((rows / "subformer.json").read_text(encoding="utf-8"))
    assert rec["updates"] == 5 and rec["budget"]["max_update"] == 5
    # source-check: the row's JSON gets how much its encoder output depends on the source
    out = _plan("source-check", "subformer", *common).stdout
    rec = json.loads((rows / "subformer.json").read_text(encoding="utf-8"))
    check = rec["source_check"]
    assert out.startswith("subformer: {") and -1.0 <= check["pooled_cosine"] <= 1.0
    assert check["updates"] == 5 and check["own_bits"] > 0 and check["other_bits"] > 0
    assert check["translations"] == 10 and 1 <= check["distinct_translations"] <= 10
    bad = _plan("source-check", "dawid", *common, check=False)
    assert bad.returncode == 2 and "dawid: no finished row" in bad.stderr
    # a finished row is kept as it is
    before = (rows / "subformer.json").read_bytes()
    again = _plan("run", "subformer", *budget)
    assert "done before" in again.stderr and (rows / "subformer.json").read_bytes() == before


def test_a_row_another_process_trains_is_skipped_and_options_go_before_rows(corpus, tmp_path):
    """Two ``run`` commands (one per core) never train one row at once: a row whose lock another
    process holds is skipped, and so is a row made from such a row; options may come first."""
    import fcntl

    runs, rows = tmp_path / "runs", tmp_path / "rows"
    common = ["--data-dir", corpus, "--save-root", runs, "--rows-dir", rows, "--cpu"]
    held = []
    for row in ("subformer", "smartformer_search"):
        (runs / row).mkdir(parents=True)
        f = open(runs / row / "row.lock", "a+", encoding="utf-8")  # noqa: SIM115
        fcntl.flock(f, fcntl.LOCK_EX | fcntl.LOCK_NB)
        held.append(f)
    # a compress row without KD: its fairseq-train log is step 02's (03 after the KD data)
    (runs / "smartformer_search" / "logs").mkdir()
    (runs / "smartformer_search" / "logs" / "02-fine-tune.log").write_text(
        "2026-01-01 00:00:01 | INFO | train_inner | epoch 001:     10 / 270 loss=5.1, ups=0.5, "
        "num_updates=500\n2026-01-01 00:00:02 | INFO | valid | epoch 001 | valid on 'valid' "
        "subset | loss 5.654 | nll_loss 4.1 | num_updates 500\n"
        "2026-01-01 00:00:03 | INFO | train_inner | epoch 002:     10 / 270 loss=5.0, ups=0.5, "
        "num_updates=1000\n2026-01-01 00:00:04 | INFO | valid | epoch 002 | valid on 'valid' "
        "subset | loss 5.9 | nll_loss 4.2 | num_updates 1000\n"
    )
    # DA-WID, stopped part-way: its status says it has no early stop (the last checkpoint ships)
    (runs / "dawid" / "logs").mkdir(parents=True)
    shutil.copy(
        runs / "smartformer_search" / "logs" / "02-fine-tune.log",
        runs / "dawid" / "logs" / "01-fine-tune.log",
    )
    try:
        proc = _plan("run", *common, "subformer", "smartformer")
        where = _plan("status", *common).stdout.splitlines()
        made = rows.exists() or (runs / "subformer" / "student").exists()
        # a finished row that a run trains again now (run --again): both said
        rows.mkdir()
        (rows / "smartformer_search.json").write_text(
            json.dumps(
                {
                    "row": "smartformer_search",
                    "bleu": 30.1,
                    "updates": 300,
                    "stopped": "max-update",
                    "budget": {"max_update": 300, "validate_every": 500, "patience": 4},
                }
            ),
            encoding="utf-8",
        )
        again = _plan("status", *common).stdout.splitlines()
    finally:
        for f in held:
            f.close()
    # (with no process training it, a finished row's state directory is not "trained again")
    done = _plan("status", *common).stdout.splitlines()
    assert [ln for ln in done if ln.startswith("smartformer_search: ")] == [
        ln.split("; trained again")[0] for ln in again if ln.startswith("smartformer_search: ")
    ]
    shutil.rmtree(rows)
    assert "subformer: another process is training it" in proc.stderr
    assert (
        "smartformer: made from smartformer_search, which another process is training"
        in proc.stderr
    )
    assert not made
    # status: one line per row, in the plan's order
    assert [ln.split(":")[0] for ln in where] == converged.ROWS
    assert "subformer: training now" in where and "default: not started" in where
    assert (
        "smartformer_search: training now, 1000 of at most 7000 updates, best validation loss "
        "5.654 at 500, last 5.9 at 1000; at most 3.3 h left at 0.50 updates/s" in where
    )
    assert "smartformer: not started (made from smartformer_search)" in where
    assert (
        "dawid: stopped part-way, 1000 of at most 7000 updates, best validation loss 5.654 at "
        "500, last 5.9 at 1000 (no early stop: its masks' schedule runs to the cap, the last "
        "checkpoint is fused); at most 3.3 h left at 0.50 updates/s" in where
    ), where
    assert (
        "smartformer_search: done, BLEU 30.1 (300 updates, max-update); at another budget than "
        "the plan's: at most 300 updates, validation every 500, patience 4, the plan's at most "
        "7,000 updates, validation every 500, patience 4; trained again: training now, 1000 of "
        "at most 7000 updates, best validation loss 5.654 at 500, last 5.9 at 1000; at most "
        "3.3 h left at 0.50 updates/s" in again
    ), again
    # with the locks released, the prerequisite's absence is the usual one-line error
    alone = _plan("run", *common, "smartformer", check=False)
    assert alone.returncode == 2 and "run that row first" in alone.stderr


def _row(name, bleu, params, **kw):
    rec = {
        "row": name,
        "what": converged.WHAT[name],
        "params": params,
        "size_bytes": params * 4,
        "onnx_size_bytes": params * 4 + 1000,
        "bleu": bleu,
        "chrf": bleu + 10,
        "bleu_signature": "nrefs:1|tok:13a",
        "chrf_signature": "nrefs:1|nc:6",
        "updates": 100,
        "best_update": 80,
        "machine": "m",
        "code": "c0ffee",
        "finished": "2026-11-27T12:00:00+00:00",
        "budget": {"max_update": 100, "validate_every": 20, "patience": 4},
        "teacher": {"params": 8000, "size_bytes": 32000, "bleu": 40.0, "chrf": 50.0},
    }
    rec.update(kw)
    return rec


def test_the_table_and_claims_come_from_the_json_alone(tmp_path):
    int8 = {"precision": "int8-large", "bleu": 39.2, "chrf": 49.0, "onnx_size_bytes": 9000000}
    rows = {
        "default": _row("default", 39.5, 2000, int8=int8, train_hours=1.64, ups_median=0.97),
        "lightformer_random": _row(
            "lightformer_random", 30.0, 2000, onnx_size_bytes=None, size_bytes=10**8
        ),
        "hypoformer_kd": _row("hypoformer_kd", 35.0, 2600),
        "hypoformer": _row("hypoformer", 36.0, 2600),
        "lightformer_keep_depth": _row(
            "lightformer_keep_depth", 41.01, 2100, stopped="max-update", best_update=100
        ),
        "dawid": _row(
            "dawid",
            38.0,
            2500,
            updates=50,
            budget={"max_update": 50, "validate_every": 20, "patience": 4},
        ),
    }
    for name, rec in rows.items():
        (tmp_path / f"{name}.json").write_text(json.dumps(rec), encoding="utf-8")
    speed = {
        "machine": "m",
        "code": "c0ffee",
        "batch_1": {
            "teacher": {"ctranslate2-int8": 1000.0, "ctranslate2-int8+shortlist": 1500.0},
            "default": {
                "onnxruntime": 2500.0,
                "onnxruntime+shortlist": 3000.0,
                "onnxruntime-int8-large": 2800.0,
            },
            "lightformer_keep_depth": {"onnxruntime": 2000.0},
        },
        "batch_32": {"teacher": {"ctranslate2-int8": 4000.0}, "default": {"onnxruntime": 6000.0}},
    }
    (tmp_path / "speed.json").write_text(json.dumps(speed), encoding="utf-8")
    text = converged.table(str(tmp_path))
    line = next(ln for ln in text.splitlines() if ln.startswith("| default "))
    cells = [c.strip() for c in line.strip("|").split("|")]
    assert cells[1:8] == ["2,000", "4.00x", "0.0 MB", "39.50", "49.50", "-0.50", "100 (80)"]
    assert cells[8:] == ["2,500", "2.50x", "2.00x", "6,000", "1.50x", "-"]
    # a row without an export: its float32 weights (not its checkpoint with Adam's state)
    line = next(ln for ln in text.splitlines() if ln.startswith("| lightformer_random "))
    assert [c.strip() for c in line.strip("|").split("|")][3] == "0.0 MB"
    # the row's int8 export: its own line, BLEU and speed from its JSON
    line = next(ln for ln in text.splitlines() if ln.startswith("| default, int8 (large maps) "))
    cells = [c.strip() for c in line.strip("|").split("|")]
    assert cells[1:7] == ["2,000", "4.00x", "9.0 MB", "39.20", "49.00", "-0.80"]
    assert cells[8:11] == ["2,800", "2.80x", "-"]
    assert (
        "| default | 2,000 (4.00x fewer) | 39.50 (-0.50); int8 39.20 (-0.80) | 49.50; int8 49.00 "
        "| 2.50x / 1.50x; int8 2.80x / - |" in converged.compact(str(tmp_path))
    )
    assert (
        "within 1 BLEU): holds for the default student (4.00x fewer parameters, -0.50 BLEU)" in text
    )
    assert "SVD transfer beats random initialisation at equal updates: holds here" in text
    assert "KD helps: does not hold here: hypoformer_kd BLEU 35.00 against hypoformer 36.00" in text
    assert "searched ranks beat one fixed rank at equal size: not measured yet" in text
    assert "come within 1 BLEU of the teacher with fewer parameters: not measured yet" in text
    a = _row(
        "subformer_bert_init",
        1.0,
        6000,
        valid_curve=[[20, 9.0], [40, 8.5]],
        commands=["fairseq-train x --warmup-updates 700 --lr 5e-4"],
    )
    b = _row(
        "subformer_fairseq_init",
        2.0,
        6000,
        valid_curve=[[20, 9.5], [40, 9.1], [60, 9.0]],
        commands=["fairseq-train x --warmup-updates 150"],
    )
    diag = {"subformer_bert_init": a, "subformer_fairseq_init": b}
    line = converged._subformer_claim(diag, rows["default"]["teacher"])
    assert line.startswith(
        "- Subformer: sandwich sharing and SAFE, trained from scratch, come "
        "within 1 BLEU of the teacher with fewer parameters: not measured yet "
        "(subformer, trained with the teacher's recipe, has no finished row); "
        "the diagnostic rows: subformer_bert_init (the authors' BERT"
    )
    assert line.endswith(
        "; at 40 updates, validation loss subformer_bert_init 8.500, "
        "subformer_fairseq_init 9.100 (warm-up 700 against 150 updates: the plan "
        "scales it with the budget)."
    )
    # the claim is decided on the subformer row, trained with the teacher's own recipe
    recipe = converged.teacher_recipe(os.path.join(TEACHER, "checkpoint.pt"))[1]
    sub = _row("subformer", 39.5, 6000, budget=dict(recipe), stopped="early stop (patience)")
    line = converged._subformer_claim({**diag, "subformer": sub}, rows["default"]["teacher"])
    assert line.startswith(
        "- Subformer: sandwich sharing and SAFE, trained from scratch, come "
        "within 1 BLEU of the teacher with fewer parameters: holds here: "
        "subformer BLEU 39.50 with 6,000 parameters after 100 updates (early "
        "stop (patience)), the teacher 40.00 with 8,000"
    )
    assert "both with the teacher's recipe. The diagnostic rows: subformer_bert_init" in line
    sub["budget"]["max_update"] = 2000  # a shrunk budget is said
    line = converged._subformer_claim({"subformer": sub}, rows["default"]["teacher"])
    assert (
        "; at another budget than the teacher's: subformer at most 2,000 updates of 16,384" in line
    )
    assert (
        "against the teacher's depth: does not hold here: default BLEU 39.50 against "
        "lightformer_keep_depth 41.01 (-1.51, 2,000 against 2,100 parameters); the shallow "
        "decoder decodes 1.25x as fast at batch 1; compares unfinished rows: "
        "lightformer_keep_depth was stopped by its budget at 100 updates while still "
        "improving."
    ) in text
    assert (
        "- Stopped by the budget while still improving: lightformer_keep_depth (best at 100 of 100 updates)."
        in text
    )
    # a row whose budget was shrunk: the budget line names it, its claim says so
    assert (
        "Budget of the rows: at most 100 updates, validation every 20, patience 4 (default, "
        "lightformer_keep_depth, lightformer_random, hypoformer_kd, hypoformer); at most 50 "
        "updates, validation every 20, patience 4 (dawid)."
    ) in text
    # the README's block: the rows and a link to these lines (results.md), not the lines
    block = converged.compact(str(tmp_path))
    assert "Budget of the rows" not in block
    # (the claims there in short: each claim's verdict and marks, not its figures)
    short = [line for line in block.splitlines() if line.startswith("- ")]
    assert len(short) == 7 and not any("BLEU 38.00" in line for line in short), short
    assert (
        "- DA-WID: weight-inherited distillation beats the LightFormer of the same "
        "non-embedding size (DA-WID keeps the teacher's embeddings): **does not hold** "
        "(unequal budgets)"
    ) in short, short
    assert block.endswith("[results.md](results.md#the-papers-claims-in-direction).\n")
    assert (
        "non-embedding size (DA-WID keeps the teacher's embeddings): does not hold here: "
        "dawid BLEU 38.00 against default 39.50 (2,500 against 2,000 parameters); at unequal "
        "budgets: dawid 50 updates of at most 50, default 100 updates of at most 100."
    ) in text
    # rows that both stopped early are compared at equal budgets whatever their caps
    early = {"stopped": "early stop (patience)"}
    x = _row("dawid", 1.0, 1, **early)
    y = _row(
        "default", 1.0, 1, **early, budget={"max_update": 900, "validate_every": 20, "patience": 4}
    )
    assert converged._unequal(x, y) == ""
    y["budget"]["patience"] = 8  # ... but not at another patience
    assert converged._unequal(x, y) == (
        "at unequal budgets: dawid 100 updates of at most 100 "
        "(patience 4), default 100 updates of at most 900 "
        "(patience 8)"
    )
    # a DA-WID row trains to its cap by design: at the same budget as an early-stopped row it is
    # not "unfinished", and the line says it trained longer
    cap = {"max_update": 700, "validate_every": 20, "patience": 4}
    x = _row("dawid", 1.0, 1, method="dawid", stopped="max-update", updates=700, best_update=700)
    y = _row("default", 1.0, 1, updates=460, **early)
    x["budget"], y["budget"] = dict(cap), dict(cap)
    assert not converged._still_improving(x)
    assert (
        converged._unequal(x, y)
        == converged._unequal(y, x)
        == (
            "dawid has no early stop (its masks' schedule runs to its cap): 700 updates against "
            "default's 460"
        )
    )
    x["method"] = "lightformer"  # (any other row at its cap with its best at the last: unfinished)
    assert converged._still_improving(x)
    assert converged._unequal(x, y).startswith("compares unfinished rows: dawid was stopped")
    # keep_depth (41.01) is more than 1 BLEU above the teacher (40.0); default (39.5) is not
    above = next(ln for ln in text.splitlines() if ln.startswith("- Above the teacher"))
    assert above.startswith(
        "- Above the teacher by more than 1 BLEU: lightformer_keep_depth "
        "(+1.01). These start from the teacher's weights and train up to 100 "
        "updates more"
    )
    assert above not in converged.compact(str(tmp_path))  # (results.md's, linked)
    assert above.endswith(
        "is the control row's question (teacher_control: `converged.py run "
        "teacher_control`), not measured yet."
    )
    # with the control row: the students against the teacher given the same extra training
    ctl = _row("teacher_control", 41.5, 8000, stopped="early stop (patience)")
    (tmp_path / "teacher_control.json").write_text(json.dumps(ctl), encoding="utf-8")
    above = next(
        ln
        for ln in converged.table(str(tmp_path)).splitlines()
        if ln.startswith("- Above the teacher")
    )
    assert above.endswith(
        "The control, the teacher itself fine-tuned the same way "
        "(teacher_control: 100 updates, early stop (patience)), scores 41.50 "
        "(+1.50); against it: lightformer_keep_depth -0.49 (compares unfinished "
        "rows: lightformer_keep_depth was stopped by its budget at 100 updates "
        "while still improving): the same extra training gives the teacher as "
        "much: the gain is not the compression's."
    )
    # the README: the teacher, the default row (its int8 inline) and the best row of each other
    # method (the control and the method's other rows only in results.md)
    block = converged.compact(str(tmp_path))
    names = [ln.split("|")[1].strip() for ln in block.splitlines()[2:] if ln.startswith("| ")]
    assert names == [
        "teacher 3-3 (dense)",
        "default",
        "hypoformer (best hypoformer row)",
        "dawid (best dawid row)",
    ]
    # "several times smaller at the same BLEU" also against the control, in both places
    small = "- Several times smaller at the same BLEU (within 1 BLEU): "
    assert (
        small + "holds for the default student (4.00x fewer parameters, -0.50 BLEU); against "
        "the control (the teacher given the same extra training, 41.50): -2.00 BLEU."
    ) in converged.table(str(tmp_path)).splitlines()
    assert (
        small + "**holds** (the default student: 4.00x fewer parameters, -0.50 BLEU; -2.00 "
        "against the teacher given the same extra training)"
    ) in block.splitlines()
    (tmp_path / "teacher_control.json").unlink()
    assert (
        small + "**holds** (the default student: 4.00x fewer parameters, -0.50 BLEU)"
    ) in converged.compact(str(tmp_path)).splitlines()
    # the CPU route's cost: each timed row's training hours (rows without a time are left out)
    timing = next(ln for ln in text.splitlines() if ln.startswith("Training time of each row"))
    assert timing.endswith(": default 1.6 h (0.97 updates/s).")
    # the CLI writes results.md; an empty folder is one line
    assert _plan("table", "--rows-dir", tmp_path).returncode == 0
    assert (tmp_path / "results.md").read_text(encoding="utf-8") == text
    empty = _plan("table", "--rows-dir", tmp_path / "none", check=False)
    assert empty.returncode == 2 and "no row JSON" in empty.stderr


def test_rows_timed_on_another_machine_keep_their_own_run_and_teacher(tmp_path):
    """Rows trained in a later session (the earlier rows' checkpoints on another machine) are
    timed in a run of their own with the teacher; each row's ratios are against the teacher of
    its own run, and its tokens/s are marked as that run's machine's."""
    first = {
        "machine": "AMD",
        "code": "c1",
        "notes": ["dawid: an old note", "default: kept"],
        "batch_1": {
            "teacher": {"ctranslate2-int8": 1000.0},
            "default": {"onnxruntime": 2500.0},
            "lightformer_keep_depth": {"onnxruntime": 2000.0},
            "dawid": {"onnxruntime": 1.0},
        },
        "batch_32": {
            "teacher": {"ctranslate2-int8": 4000.0},
            "default": {"onnxruntime": 6000.0},
            "dawid": {"onnxruntime": 1.0},
        },
    }
    later = {
        "machine": "Intel",
        "code": "c2",
        "notes": ["dawid: new"],
        "batch_1": {"teacher": {"ctranslate2-int8": 500.0}, "dawid": {"onnxruntime": 750.0}},
        "batch_32": {"teacher": {"ctranslate2-int8": 2000.0}, "dawid": {"onnxruntime": 1000.0}},
    }
    merged = converged.merge_speed_runs(first, later)
    assert [r["machine"] for r in merged["runs"]] == ["AMD", "Intel"]
    assert "dawid" not in merged["runs"][0]["batch_1"] and merged["runs"][0]["notes"] == [
        "default: kept"
    ]
    # a later run that times every row of the earlier one replaces it
    assert converged.merge_speed_runs({"batch_1": {"teacher": {}, "dawid": {}}}, later) == later
    assert converged.merge_speed_runs(None, later) == later
    rows = {
        "default": _row("default", 39.5, 2000),
        "lightformer_keep_depth": _row("lightformer_keep_depth", 39.0, 2100),
        "dawid": _row("dawid", 38.0, 2500),
    }
    for name, rec in rows.items():
        (tmp_path / f"{name}.json").write_text(json.dumps(rec), encoding="utf-8")
    (tmp_path / "speed.json").write_text(json.dumps(merged), encoding="utf-8")
    text = converged.table(str(tmp_path))
    cells = lambda row: [
        c.strip()
        for c in next(ln for ln in text.splitlines() if ln.startswith(f"| {row} "))
        .strip("|")
        .split("|")
    ]
    assert cells("dawid")[8:] == ["750\u2020", "1.50x", "-", "1,000\u2020", "0.50x", "-"]
    assert cells("default")[8:] == ["2,500", "2.50x", "-", "6,000", "1.50x", "-"]
    assert cells("teacher (dense, CTranslate2 int8 for speed)")[8:10] == ["1,000", "1.00x"]
    assert "Speed: AMD, code c1 (the teacher's line and every row without a mark)." in text
    assert (
        "\u2020 dawid: timed in a later run, Intel, code c2, against the teacher timed in "
        "that run (its CTranslate2 int8: 500 tokens/s at batch 1, 2,000 at batch 32)"
    ) in text
    assert "- dawid: new" in text and "- default: kept" in text and "old note" not in text
    assert "the shallow decoder decodes 1.25x as fast at batch 1" in text
    assert "| dawid (best dawid row) | 2,500 (3.20x fewer) |" in converged.compact(str(tmp_path))
    assert "| 1.50x / 0.50x |" in converged.compact(str(tmp_path))


def test_speed_with_no_finished_rows_checkpoint_here_is_one_error(tmp_path, capsys):
    rows = tmp_path / "rows"
    rows.mkdir()
    (rows / "default.json").write_text(
        json.dumps({"checkpoint": str(tmp_path / "elsewhere.pt")}), encoding="utf-8"
    )
    opts = converged.get_parser().parse_args(
        ["speed", "--save-root", str(tmp_path / "runs"), "--rows-dir", str(rows)]
    )
    with pytest.raises(converged.PlanError, match="nothing to time"):
        converged.speed(converged.Plan(opts), dry=False)
    assert "default: checkpoint not on this machine; no earlier run timed default" in (
        capsys.readouterr().err
    )


def test_a_speed_run_reuses_a_batch_size_only_when_it_timed_the_same_models(tmp_path, monkeypatch):
    """A stopped speed run keeps its finished batch size; a later run with another finished
    row times again instead of taking the earlier models' figures for the new set."""
    rows, runs = tmp_path / "rows", tmp_path / "runs"
    rows.mkdir()
    runs.mkdir()
    (runs / "shortlist.txt").write_text("x\n", encoding="utf-8")
    for r in ("default", "dawid"):
        (tmp_path / f"{r}.pt").write_bytes(b"x")
    (rows / "default.json").write_text(json.dumps({"checkpoint": str(tmp_path / "default.pt")}))
    opts = converged.get_parser().parse_args(
        ["speed", "--save-root", str(runs), "--rows-dir", str(rows)]
    )
    plan = converged.Plan(opts)
    timed = []

    def fake(cmd, log, stdout=None):  # what measure_speed --json writes, for the labels timed
        labels = [p.split("=")[0] for p in cmd[cmd.index("--path") + 1].split(",")]
        timed.append(labels)
        doc = {
            "protocol": {},
            "models": [
                {"label": lab, "engine": "onnxruntime", "tokens_per_s": 100.0} for lab in labels
            ],
        }
        with open(cmd[cmd.index("--json") + 1], "w", encoding="utf-8") as f:
            json.dump(doc, f)

    monkeypatch.setattr(plan, "run_cmd", fake)
    converged.speed(plan, dry=False)
    assert timed == [["teacher", "default"]] * 2
    converged.speed(plan, dry=False)  # the same models: both batch sizes kept
    assert len(timed) == 2
    (rows / "dawid.json").write_text(json.dumps({"checkpoint": str(tmp_path / "dawid.pt")}))
    converged.speed(plan, dry=False)
    assert timed[2:] == [["teacher", "default", "dawid"]] * 2
    doc = json.loads((rows / "speed.json").read_text())
    assert set(doc["batch_1"]) == set(doc["batch_32"]) == {"teacher", "default", "dawid"}
    # a row recorded in another row's state directory (subformer_bert_init ran as the old
    # "subformer" row): the model there now is the other row's, so it is not timed again and
    # keeps its earlier run
    (runs / "subformer" / "student").mkdir(parents=True)
    (runs / "subformer" / "student" / "checkpoint_best.pt").write_bytes(b"x")
    (rows / "subformer_bert_init.json").write_text(
        json.dumps({"checkpoint": "SAVE/subformer/student/checkpoint_best.pt"})
    )
    earlier = {**doc, "batch_1": {**doc["batch_1"], "subformer_bert_init": {"fairseq": 5.0}}}
    (rows / "speed.json").write_text(json.dumps(earlier))
    (rows / "default.json").write_text(json.dumps({"checkpoint": str(tmp_path / "default.pt")}))
    converged.speed(plan, dry=False)
    assert len(timed) == 4  # (the same models as the last run: its batch sizes kept)
    runs_now = converged._speed_runs(json.loads((rows / "speed.json").read_text()))
    assert [set(r["batch_1"]) for r in runs_now] == [
        {"teacher", "subformer_bert_init"},
        {"teacher", "default", "dawid"},
    ]
    assert converged._state_owner("SAVE/subformer/student/x.pt") == "subformer"
    assert converged._state_owner("SAVE/elsewhere/x.pt") is None
    assert converged._state_owner("/abs/SAVE/subformer/x.pt") is None


def test_the_committed_rows_build_the_committed_table_and_the_readme(tmp_path):
    committed = os.path.join(SHIPPED, "converged")
    names = [n for n in os.listdir(committed) if n.endswith(".json")]
    assert "default.json" in names
    for n in names:
        shutil.copy(os.path.join(committed, n), tmp_path / n)
    text = converged.table(str(tmp_path))
    with open(os.path.join(committed, "results.md"), encoding="utf-8") as f:
        assert f.read() == text
    with open(os.path.join(committed, "default.json"), encoding="utf-8") as f:
        default = json.load(f)
    assert f"| default | {default['params']:,} |" in text and f"{default['bleu']:.2f}" in text
    # the README's results are the same rows (converged.py table --readme README.md)
    with open(os.path.join(harness.REPO_ROOT, "README.md"), encoding="utf-8") as f:
        readme = f.read()
    block = readme.split("<!-- converged -->\n", 1)[1].split("<!-- /converged -->", 1)[0]
    link = "examples/translation/results/converged/results.md"  # (from README.md's folder)
    assert block == converged.compact(str(tmp_path), link)
    # header, at most six rows, the claims' verdicts (a heading and one line each), the link
    verdicts = [line for line in block.splitlines() if line.startswith("- ")]
    assert len(block.splitlines()) <= 2 + 6 + 1 + 2 + len(verdicts) + 2
    assert "\n## The papers' claims, in direction\n" in text  # (the link's anchor)


def test_record_int8_adds_a_later_runs_int8_figures_of_the_same_student(tmp_path):
    rows, save = tmp_path / "rows", tmp_path / "save"
    rows.mkdir()
    save.mkdir()
    ckpt, first = save / "student.pt", tmp_path / "first.pt"  # (the row's own run: a copy)
    ckpt.write_bytes(b"the student")
    first.write_bytes(b"the student")
    (rows / "default.json").write_text(
        json.dumps(_row("default", 39.5, 2000, checkpoint=str(first)))
    )
    (save / "plan.json").write_text(
        json.dumps({"student": {"checkpoint": str(ckpt)}, "commands": ["c1", "c2"]})
    )
    q = {
        "precision": "int8-large",
        "bleu": 39.1,
        "chrf": 48.5,
        "onnx_size_bytes": 1234,
        "sentences": 40,
    }
    (save / "report.json").write_text(json.dumps({"models": {"student": {"int8": q}}}))
    assert _plan("record-int8", "default", save, "--rows-dir", rows).returncode == 0
    rec = json.loads((rows / "default.json").read_text())
    assert {k: rec["int8"][k] for k in q if k != "sentences"} == {
        k: v for k, v in q.items() if k != "sentences"
    }
    assert rec["int8"]["commands"] == ["c1", "c2"] and rec["bleu"] == 39.5
    assert rec["onnx_size_bytes"] == 2000 * 4 + 1000 and "onnx_export" not in rec
    # the float32 export's size too, where the later run's export differs (newer code)
    student = {"int8": q, "onnx_size_bytes": 5000}
    (save / "report.json").write_text(json.dumps({"models": {"student": student}}))
    assert _plan("record-int8", "default", save, "--rows-dir", rows).returncode == 0
    rec = json.loads((rows / "default.json").read_text())
    assert rec["onnx_size_bytes"] == 5000 and rec["onnx_export"]["was_bytes"] == 9000
    assert rec["onnx_export"]["code"] == rec["int8"]["code"]
    line = (
        f"Export sizes made again by later code from the same student (`record-int8`): "
        f"default 0.0 MB (code {rec['int8']['code']}; was 0.0 MB)."
    )
    assert converged._exports_again([rec]) == [line, ""]
    # another student's run, or a report without int8, is refused in one line
    ckpt.write_bytes(b"another student")
    proc = _plan("record-int8", "default", save, "--rows-dir", rows, check=False)
    assert proc.returncode == 2 and "holds another student" in proc.stderr.strip()
    ckpt.write_bytes(b"the student")
    (save / "report.json").write_text(json.dumps({"models": {"student": {}}}))
    proc = _plan("record-int8", "default", save, "--rows-dir", rows, check=False)
    assert proc.returncode == 2 and "no int8 figures" in proc.stderr


def test_the_fixed_rank_row_takes_the_searched_models_size(tmp_path):
    """``smartformer`` (fixed CP rank) gets the rank that gives the searched model's size: the
    mean of the searched ranks, a decoder layer (self and cross attention) counted twice."""
    opts = converged.get_parser().parse_args(["plan", "--save-root", str(tmp_path)])
    plan = converged.Plan(opts)
    assert plan.matched_rank() == "<the searched model's mean rank>"  # (no search yet)
    log = tmp_path / "smartformer_search" / "student" / "rank_search.jsonl"
    log.parent.mkdir(parents=True)
    first = {
        "ranks": {
            "encoder.layers.0": 64,
            "encoder.layers.1": 64,
            "encoder.layers.2": 64,
            "decoder.layers.0": 64,
        }
    }
    last = {
        "ranks": {
            "encoder.layers.0": 32,
            "encoder.layers.1": 64,
            "encoder.layers.2": 128,
            "decoder.layers.0": 64,
        }
    }
    log.write_text(json.dumps(first) + "\n" + json.dumps(last) + "\n", encoding="utf-8")
    assert plan.matched_rank() == 70  # (32 + 64 + 128 + 2 * 64) / 5 = 70.4
    (cmd,) = plan.commands("smartformer")
    assert cmd[cmd.index("--rank") + 1] == "70" and "--search-ranks" not in cmd
    log.write_text("", encoding="utf-8")
    with pytest.raises(converged.StepError, match="logged no decision"):
        plan.matched_rank()


def test_the_random_init_row_is_the_default_rows_own_training_without_its_transfer(tmp_path):
    """``lightformer_random`` runs the default row's recorded fairseq-train command (same data,
    KD data, recipe, budget) without ``--finetune-from-model``, with this checkout's plugin,
    saving to its own directory; a run without that row, or without its KD data, is refused."""
    rows, kd = tmp_path / "rows", tmp_path / "kd-bin"
    opts = converged.get_parser().parse_args(
        ["run", "--save-root", str(tmp_path / "runs"), "--rows-dir", str(rows)]
    )
    plan = converged.Plan(opts)
    with pytest.raises(converged.StepError, match="no JSON yet"):
        plan.commands("lightformer_random", dry=False)
    recorded = (
        "/old/venv/bin/fairseq-train /data/bin --user-dir /old/clone/lightcompress "
        f"--task translation_seqkd --kd-distilled-data {kd} --arch lightformer "
        "--finetune-from-model /old/student_init.pt --max-update 7000 "
        "--save-dir /old/student --seed 1"
    )
    rows.mkdir()
    (rows / "default.json").write_text(
        json.dumps({"commands": ["/old/venv/bin/lightcompress-convert -i t.pt", recorded]}),
        encoding="utf-8",
    )
    with pytest.raises(converged.PlanError, match="KD data"):
        plan.commands("lightformer_random", dry=False)
    kd.mkdir()
    train, generate = plan.commands("lightformer_random", dry=False)
    assert "--finetune-from-model" not in train and "/old/student_init.pt" not in train
    assert train[0] == os.path.join(os.path.dirname(plan.py), "fairseq-train")
    assert train[train.index("--user-dir") + 1] == os.path.join(harness.REPO_ROOT, "lightcompress")
    assert train[train.index("--save-dir") + 1] == str(
        tmp_path / "runs" / "lightformer_random" / "student"
    )
    for flag, value in (
        ("--task", "translation_seqkd"),
        ("--kd-distilled-data", str(kd)),
        ("--seed", "1"),
    ):
        assert train[train.index(flag) + 1] == value  # (the rest as the default row ran it)
    # its budget: the plan's for the row (until early stopping, its warm-up the recorded one's)
    assert train[train.index("--max-update") + 1] == "20000"
    assert train[train.index("--patience") + 1] == "4"
    assert "fairseq-generate" in generate[0]


def _fairseq_lines(first, last, ups, step=50):
    """train_inner and valid lines of a fairseq log from update ``first`` to ``last``."""
    out = []
    for n in range(first + step, last + 1, step):
        out.append(
            f"2026-01-01 00:00:01 | INFO | train_inner | epoch 001:     10 / 270 loss=5.1, "
            f"ups={ups}, num_updates={n}"
        )
        out.append(
            f"2026-01-01 00:00:02 | INFO | valid | epoch 001 | valid on 'valid' subset | "
            f"loss {9 - n / 1000:.3f} | nll_loss 4.1 | num_updates {n}"
        )
    return out


def test_a_row_continued_on_another_device_counts_each_part_at_its_own_speed(tmp_path):
    """A row's log with a ``[converged] device:`` line (its training went on on a GPU): each
    part's updates at that part's median speed, not one median over both."""
    log = tmp_path / "train.log"
    lines = [
        *_fairseq_lines(0, 1000, 0.5),
        "[converged] prose about the move, not a mark",
        "[converged] device: one NVIDIA H200 from update 1000",
        *_fairseq_lines(1000, 3000, 10.0),
        (
            "2026-01-01 00:00:03 | INFO | fairseq_cli.train | early stop since valid performance "
            "hasn't improved for last 4 runs"
        ),
    ]
    log.write_text("\n".join(lines) + "\n", encoding="utf-8")
    t = converged._training(str(log))
    assert t["updates"] == 3000 and t["stopped"] == "early stop (patience)"
    assert [
        (p["device"], p["from_update"], p["updates"], p["ups_median"]) for p in t["devices"]
    ] == [
        ("this machine", 0, 1000, 0.5),
        ("one NVIDIA H200", 1000, 2000, 10.0),
    ]
    assert t["train_hours"] == round(1000 / 0.5 / 3600 + 2000 / 10.0 / 3600, 2)
    assert "ups_median" not in t  # one median over both parts would mean nothing
    (line,) = [ln for ln in converged._timing([{"row": "subformer", **t}]) if ln]
    assert (
        "subformer 0.6 h (1,000 updates at 0.50/s on one CPU thread + 2,000 updates at "
        "10.00/s on one NVIDIA H200)"
    ) in line
    # without a device line: one part, one median, as before
    log.write_text("\n".join(_fairseq_lines(0, 1000, 0.5)) + "\n", encoding="utf-8")
    t = converged._training(str(log))
    assert "devices" not in t and t["ups_median"] == 0.5
    assert t["train_hours"] == round(1000 / 0.5 / 3600, 2)


def test_a_continued_compress_row_counts_both_runs_updates_curve_and_hours(tmp_path):
    """A DA-WID row made with --continue-from: the earlier run's log (up to the checkpoint it
    continued from) and the continuation's, each part at its own speed; DA-WID's update is its
    last (it fuses its last checkpoint), not its lowest validation loss."""
    import torch

    first = tmp_path / "dawid-1800"
    (first / "logs").mkdir(parents=True)
    (first / "student").mkdir()
    ckpt = first / "student" / "checkpoint_last.pt"
    torch.save({"model": {}, "optimizer_history": [{"num_updates": 1800}]}, ckpt)
    early = _fairseq_lines(0, 1900, 0.25)  # (its lines past 1,800 were not continued)
    early[1] = early[1].replace("loss 8.950", "loss 1.000")  # its lowest loss at update 50
    (first / "logs" / "01-fine-tune.log").write_text("\n".join(early) + "\n", encoding="utf-8")
    save = tmp_path / "dawid"
    (save / "logs").mkdir(parents=True)
    (save / "logs" / "01-fine-tune.log").write_text(
        "\n".join([*_fairseq_lines(1800, 3000, 0.5), "fairseq_cli.train | done training"]) + "\n",
        encoding="utf-8",
    )
    train = f"fairseq-train bin --arch dawid --continue-once {ckpt} --max-update 3000"
    student = {"params": 3000, "size_bytes": 1, "onnx_size_bytes": 2, "bleu": 40.0, "chrf": 50.0}
    report = {
        "plan": {
            "method": "dawid",
            "choice": "c",
            "student": {"shape": "3-3", "kd": False},
            "commands": [train, "lightcompress-convert dawid-fuse"],
        },
        "models": {"student": student, "teacher": {"params": 8000, "bleu": 41.0}},
    }
    (save / "report.json").write_text(json.dumps(report), encoding="utf-8")
    rec = converged.compress_record(str(save), "dawid", threads=2)
    assert rec["updates"] == 3000 and rec["stopped"] == "max-update"
    assert [
        (p["device"], p["from_update"], p["updates"], p["ups_median"]) for p in rec["devices"]
    ] == [
        ("this machine", 0, 1800, 0.25),
        ("this machine, continued on 2 CPU threads", 1800, 1200, 0.5),
    ]
    assert rec["train_hours"] == round(1800 / 0.25 / 3600 + 1200 / 0.5 / 3600, 2)
    curve = [u for u, _ in rec["valid_curve"]]
    assert curve[0] == 50 and curve[-1] == 3000 and 1850 in curve and curve.count(1850) == 1
    assert rec["best_update"] == 3000 and rec["best_valid_loss"] == rec["valid_curve"][-1][1]
    (line,) = [ln for ln in converged._timing([{"row": "dawid", **rec}]) if ln]
    assert (
        "dawid 2.7 h (1,800 updates at 0.25/s on one CPU thread + 1,200 updates at 0.50/s on "
        "this machine, continued on 2 CPU threads)" in line
    )
    # the earlier run's log is gone: one error naming it
    (first / "logs" / "01-fine-tune.log").unlink()
    with pytest.raises(converged.StepError, match="the log of the run this row continued"):
        converged.compress_record(str(save), "dawid", threads=2)


def test_a_row_that_gives_every_source_the_same_vector_is_said_not_to_translate(tmp_path):
    """source-check's figures: one line under the table for every measured row, and a
    finding among the claims for a row whose encoder output is the same for every source."""
    deaf = {"sources": 100, "pooled_cosine": 1.0, "distinct_translations": 1, "translations": 1952}
    rows = {
        "default": _row(
            "default", 39.5, 2000, source_check={"sources": 100, "pooled_cosine": 0.75}
        ),
        "subformer": _row("subformer", 0.04, 6000, source_check=deaf),
    }
    for name, rec in rows.items():
        (tmp_path / f"{name}.json").write_text(json.dumps(rec), encoding="utf-8")
    text = converged.table(str(tmp_path))
    assert ("source): default 0.750; subformer 1.000 (1 distinct of 1,952 translations).") in text
    lines = converged.claims(rows, {"params": 8000, "bleu": 40.0})
    assert (
        "- subformer did not learn to translate: its encoder gives every source the same vector "
        "(source-check cosine 1.000; 1 distinct of 1,952 test translations)." in lines
    )
    assert not any(ln.startswith("- default did not") for ln in lines)


def test_the_dawid_row_keeps_the_teachers_embeddings_and_matches_the_default_layers(tmp_path):
    """DA-WID prunes inside the teacher's layers and keeps its embeddings, so its row asks for
    the teacher's embedding parameters plus the default student's non-embedding parameters
    (the default student's total, whose embedding is factorized, is out of its reach)."""
    rows = tmp_path / "rows"
    opts = converged.get_parser().parse_args(
        ["plan", "--save-root", str(tmp_path / "runs"), "--rows-dir", str(rows)]
    )
    plan = converged.Plan(opts)
    assert plan.dawid_params().startswith("<")  # (no default row yet)
    rows.mkdir()
    student = os.path.join(harness.REPO_ROOT, "tests", "data", "pre_registry", "lightformer.pt")
    (rows / "default.json").write_text(json.dumps({"checkpoint": student}), encoding="utf-8")
    # the shipped teacher: 8,080 x 256 shared embedding; the tiny LightFormer: 20,224 outside it
    assert plan.dawid_params() == 8080 * 256 + 20224
    (cmd,) = plan.commands("dawid")
    assert cmd[cmd.index("--method") + 1 :][:3] == ["dawid", "--params", str(8080 * 256 + 20224)]


def test_a_row_that_stopped_short_goes_on_with_continue_from_and_says_so(tmp_path):
    """A compress row whose run ended short of its target (DA-WID's masks) goes on from its
    checkpoint with a larger --max-update and the first run's schedule: compress gets both
    flags, and the row's budget (its JSON, the table's budget line) records them."""
    import torch

    ckpt = tmp_path / "dawid-1800" / "checkpoint_last.pt"
    ckpt.parent.mkdir()
    torch.save({"model": {}, "optimizer_history": [{"num_updates": 1890}]}, ckpt)
    rows = tmp_path / "rows"
    argv = [
        "plan",
        "dawid",
        "--save-root",
        str(tmp_path / "runs"),
        "--rows-dir",
        str(rows),
        "--max-update",
        "3000",
        "--schedule-updates",
        "1800",
        "--continue-from",
        str(ckpt),
    ]
    plan = converged.Plan(converged.get_parser().parse_args(argv))
    (cmd,) = plan.commands("dawid")
    assert cmd[cmd.index("--max-update") + 1] == "3000"
    assert cmd[-4:] == ["--schedule-updates", "1800", "--continue-from", str(ckpt)]
    budget = plan.budget("dawid")
    assert budget["schedule_updates"] == 1800
    assert budget["continued_from"] == {"checkpoint": str(ckpt), "updates": 1890}
    (tmp_path / "plan.json").write_text(json.dumps({"commands": ["compress --max-update 1800"]}))
    assert plan.budget("dawid")["continued_from"]["commands"] == ["compress --max-update 1800"]
    assert converged._budget_text({"budget": budget}) == (
        "at most 3,000 updates, validation every 500, patience 4, continued from its run stopped "
        "at 1,890 updates (its schedule set for 1,800)"
    )
    # one compress row only, and a file that is there
    for bad, want in (
        (["run", "dawid", "default"], "one compress row"),
        (["run", "subformer"], "one compress row"),
        (["run", "dawid", "--continue-from", str(tmp_path / "none.pt")], "no such file"),
    ):
        extra = [] if "--continue-from" in bad else ["--continue-from", str(ckpt)]
        proc = _plan(*bad, *extra, "--rows-dir", rows, check=False)
        assert proc.returncode == 2 and proc.stderr.count("\n") == 1 and want in proc.stderr


def test_the_dawid_row_rebuilds_the_default_students_shape_when_its_checkpoint_is_elsewhere(
    tmp_path,
):
    """A fresh machine has the committed default.json but not its checkpoint: the dawid row
    then counts the student that the row's recorded lightcompress-convert command builds from
    the teacher (the same shape, so the same non-embedding parameters)."""
    rows = tmp_path / "rows"
    rows.mkdir()
    with open(os.path.join(converged.ROWS_DIR, "default.json"), encoding="utf-8") as f:
        committed = json.load(f)
    doc = {
        "checkpoint": str(tmp_path / "gone" / "checkpoint_best.pt"),
        "commands": committed["commands"],
    }
    (rows / "default.json").write_text(json.dumps(doc), encoding="utf-8")
    opts = converged.get_parser().parse_args(
        ["plan", "--save-root", str(tmp_path / "runs"), "--rows-dir", str(rows)]
    )
    # the default student: 1,872,448 parameters, of which its factorized (rank 100) embedding
    # is 8,080 x 100 + 100 x 256; DA-WID keeps the teacher's 8,080 x 256 table instead
    outside = committed["params"] - (8080 * 100 + 100 * 256)
    assert converged.Plan(opts).dawid_params() == 8080 * 256 + outside
    doc["commands"] = [c for c in doc["commands"] if "lightcompress-convert" not in c]
    (rows / "default.json").write_text(json.dumps(doc), encoding="utf-8")
    assert converged.Plan(opts).dawid_params().startswith("<")


def test_handoff_takes_a_compress_rows_fairseq_train_command_and_makes_it_portable(tmp_path):
    sys.path.insert(0, os.path.dirname(HANDOFF))
    import handoff

    opts = converged.get_parser().parse_args(["status", "--save-root", str(tmp_path)])
    plan = converged.Plan(opts)
    repo, save = "/src/lc", str(tmp_path / "dawid")
    train = [
        "/v/bin/fairseq-train",
        plan.bin,
        "--user-dir",
        f"{repo}/lightcompress",
        "--arch",
        "dawid",
        "--dawid-teacher",
        f"{repo}/examples/t/checkpoint.pt",
        "--finetune-from-model",
        f"{save}/init.pt",
        "--save-dir",
        f"{save}/student",
        "--max-update",
        "7000",
        "--cpu",
    ]
    os.makedirs(save)
    with open(os.path.join(save, "plan.json"), "w", encoding="utf-8") as f:
        json.dump({"commands": ["/v/bin/lightcompress-convert -i x -o y", shlex.join(train)]}, f)
    cmd, log = handoff.train_args(converged, plan, "dawid")
    assert cmd == train and log == converged.fine_tune_log(save)
    assert handoff.portable(cmd, plan.bin) == [
        "{BIN}",
        "--user-dir",
        "{REPO}/lightcompress",
        "--arch",
        "dawid",
        "--dawid-teacher",
        "{REPO}/examples/t/checkpoint.pt",
        "--save-dir",
        "{SAVE}",
        "--max-update",
        "7000",
    ]
    kd = [a if a != plan.bin else f"{save}/kd-bin" for a in train]
    with pytest.raises(handoff.HandoffError, match="argument 1 .*kd-bin.* lacks"):
        handoff.portable(kd, plan.bin)
    with pytest.raises(handoff.HandoffError, match="not a fairseq-train command"):
        handoff.portable(["/v/bin/lightcompress-convert", "-i", "x"], plan.bin)


def test_a_claim_that_does_not_hold_says_what_was_measured_about_it():
    by = {
        "smartformer_search": _row("smartformer_search", 38.0, 5000, best_valid_loss=5.4),
        "smartformer": _row("smartformer", 39.0, 4900, best_valid_loss=5.3),
    }
    line = next(c for c in converged.claims(by, by["smartformer"]["teacher"]) if "Smartformer" in c)
    assert line.startswith(
        "- Smartformer: searched ranks beat one fixed rank at equal size: "
        "does not hold here: smartformer_search BLEU 38.00 against "
        "smartformer 39.00 (5,000 against 4,900 parameters); the searched "
        "model starts at its largest rank"
    )
    assert line.endswith("(best validation loss 5.400 against 5.300).")
    by["smartformer_search"]["bleu"] = 40.0  # holds: no reason given
    line = next(c for c in converged.claims(by, by["smartformer"]["teacher"]) if "Smartformer" in c)
    assert line.endswith(
        "holds here: smartformer_search BLEU 40.00 against smartformer 39.00 "
        "(5,000 against 4,900 parameters)."
    )


def test_pack_stores_float16_exact_weights_as_float16_and_restores_them_exactly(tmp_path):
    import torch

    sys.path.insert(0, os.path.dirname(HANDOFF))
    import pack

    exact = torch.randn(64, 64).half().float()  # (weights inherited from a float16 teacher)
    trained = torch.randn(64, 64)
    moment = torch.rand(64, 64)
    st = {
        "model": {"frozen": exact, "trained": trained, "step": torch.tensor(3)},
        "last_optimizer_state": {"state": {0: {"exp_avg": moment, "exp_avg_sq": moment * 2}}},
    }
    torch.save(st, tmp_path / "ck.pt")
    pack.pack(tmp_path / "ck.pt", tmp_path / "p")
    small = sum(p.stat().st_size for p in tmp_path.glob("p.part*"))
    assert small < (tmp_path / "ck.pt").stat().st_size * 0.7  # the float16-exact half + moments
    pack.unpack(tmp_path / "p", tmp_path / "back.pt")
    back = torch.load(tmp_path / "back.pt", weights_only=False)
    for k, t in st["model"].items():
        assert back["model"][k].dtype == t.dtype and torch.equal(back["model"][k], t), k
    assert "_pack_float16_exact" not in back
    got = back["last_optimizer_state"]["state"][0]["exp_avg_sq"]
    assert got.dtype == torch.float32 and torch.allclose(got, moment * 2, rtol=1e-2)


def test_the_committed_rows_name_no_machines_paths():
    """The committed JSON names the checkout's files relative to it and the machine's folders
    as DATA (the corpus) and SAVE (the rows' state): no absolute path of the machine that ran."""
    import re

    committed = os.path.join(SHIPPED, "converged")
    for name in sorted(os.listdir(committed)):
        if name.endswith(".json"):
            with open(os.path.join(committed, name), encoding="utf-8") as f:
                text = f.read()
            found = re.findall(r"(?<![\w.])/(?:root|work|home|tmp|usr|opt|mnt)/[^\s\"']*", text)
            assert not found, (name, found[:3])
    # the writer: this machine's folders become placeholders, a recorded path comes back here
    opts = converged.get_parser().parse_args(
        ["plan", "--data-dir", "/d/corpus", "--save-root", "/s/conv"]
    )
    plan = converged.Plan(opts)
    cmd = (
        f"{os.path.dirname(sys.executable)}/fairseq-train /d/corpus/bin --user-dir "
        f"{harness.REPO_ROOT}/lightcompress --user-dir /other/clone/lightcompress "
        "--save-dir /s/conv/x/student --path /other/clone/examples/t.pt --x /s/conv2/y"
    )
    want = (
        "fairseq-train DATA/bin --user-dir lightcompress --user-dir lightcompress --save-dir "
        "SAVE/x/student --path examples/t.pt --x /s/conv2/y"
    )
    assert plan.portable({"c": [cmd]}) == {"c": [want]}
    assert plan.local("SAVE/x/student") == "/s/conv/x/student"
    assert plan.local("DATA/bin") == "/d/corpus/bin"
    assert plan.local("lightcompress") == os.path.join(harness.REPO_ROOT, "lightcompress")
    assert plan.local("--arch") == "--arch" and plan.local("/abs/p") == "/abs/p"


def test_the_control_row_fine_tunes_the_teacher_with_the_default_rows_training(corpus, tmp_path):
    """teacher_control runs the default row's recorded KD-data and fairseq-train commands on this
    machine (DATA, SAVE and relative paths made this machine's), with the teacher's architecture
    in place of the student's, fine-tuned from the shipped (float16) teacher; its JSON is
    portable and its budget the plan's."""
    runs, rows = tmp_path / "runs", tmp_path / "rows"
    rows.mkdir()
    train = (
        "fairseq-train DATA/bin --user-dir lightcompress --task translation_seqkd "
        "--kd-data-mode both --kd-distilled-data SAVE/default/kd-bin -s de -t en --arch "
        "lightformer --encoder-layers 3 --decoder-layers 1 --encoder-embed-dim 256 "
        "--decoder-embed-dim 256 --encoder-ffn-embed-dim 1024 --decoder-ffn-embed-dim 1024 "
        "--encoder-attention-heads 4 --decoder-attention-heads 4 --share-all-embeddings "
        "--lc-encoder-groups 0 --lc-rank 8 --lc-embed-rank 16 --finetune-from-model "
        "SAVE/default/student_init.pt --optimizer adam --lr 0.0015 --lr-scheduler "
        "inverse_sqrt --warmup-updates 700 --criterion label_smoothed_cross_entropy "
        "--label-smoothing 0.1 --dropout 0.3 --max-tokens 4096 --max-update 7000 "
        "--validate-interval-updates 500 --save-interval-updates 500 --no-epoch-checkpoints "
        "--save-dir SAVE/default/student --log-format simple --num-workers 0 --seed 1 "
        "--data-buffer-size 0 --cpu --patience 4"
    )
    kd = (
        "bash scripts/distill_data.sh DATA/bin --path examples/translation/results/teacher/"
        "checkpoint.pt --out-dir SAVE/default/kd-bin --user-dir lightcompress --beam 1 "
        "--max-tokens 4096 --num-shards 0 --generate-args '--max-len-a 1.2 --max-len-b 10' --cpu"
    )
    (rows / "default.json").write_text(
        json.dumps({"commands": ["lightcompress-convert -i x", kd, train]}), encoding="utf-8"
    )
    common = ["--data-dir", corpus, "--save-root", runs, "--rows-dir", rows, "--cpu"]
    (cmd_kd, cmd, _gen) = converged.Plan(
        converged.get_parser().parse_args(["run", *map(str, common)])
    ).commands("teacher_control", dry=False)
    assert cmd_kd[:2] == ["bash", os.path.join(harness.REPO_ROOT, "scripts", "distill_data.sh")]
    assert cmd[cmd.index("--arch") + 1] == "transformer"
    assert cmd[cmd.index("--decoder-layers") + 1] == "3" and "--lc-rank" not in cmd
    assert cmd[cmd.index("--finetune-from-model") + 1] == os.path.join(TEACHER, "checkpoint.pt")
    assert cmd[cmd.index("--kd-distilled-data") + 1] == str(runs / "default" / "kd-bin")
    assert cmd[cmd.index("--save-dir") + 1] == str(runs / "teacher_control" / "student")
    _plan("run", "teacher_control", *common, "--max-update", 2, "--validate-every", 2)
    assert (runs / "default" / "kd-bin.done").exists()
    log = (runs / "teacher_control" / "train.log").read_text(encoding="utf-8")
    assert "loaded checkpoint" in log.lower() and "checkpoint.pt" in log
    rec = json.loads((rows / "teacher_control.json").read_text(encoding="utf-8"))
    assert rec["params"] == converged._count_checkpoint(os.path.join(TEACHER, "checkpoint.pt"))
    assert rec["updates"] == 2 and rec["budget"]["max_update"] == 2 and rec["kd"]
    assert rec["commands"][0].startswith("bash scripts/distill_data.sh DATA/bin")
    assert " --kd-distilled-data SAVE/default/kd-bin " in rec["commands"][1]
    assert str(tmp_path) not in json.dumps(rec)


def test_rows_not_started_here_train_side_by_side_on_the_device_and_come_back(corpus, tmp_path):
    """handoff.py with several rows: the subformer row (from scratch) and the control row (from
    the shipped teacher, with the default row's KD data carried as kd.tar.xz) are sent without
    a checkpoint, trained side by side by one `train`, each written to OUT/ROW when it ends,
    received, and scored here by `converged.py run` (no training left to do)."""
    runs, rows, carry, back = (tmp_path / n for n in ("runs", "rows", "carry", "back"))
    rows.mkdir()
    kd_bin = runs / "default" / "kd-bin"
    shutil.copytree(os.path.join(corpus, "bin"), kd_bin)  # (stands in for the teacher's output)
    train = (
        "fairseq-train DATA/bin --user-dir lightcompress --task translation_seqkd "
        "--kd-data-mode both --kd-distilled-data SAVE/default/kd-bin -s de -t en --arch "
        "lightformer --encoder-layers 3 --decoder-layers 1 --encoder-embed-dim 256 "
        "--decoder-embed-dim 256 --encoder-ffn-embed-dim 1024 --decoder-ffn-embed-dim 1024 "
        "--encoder-attention-heads 4 --decoder-attention-heads 4 --share-all-embeddings "
        "--lc-rank 8 --optimizer adam --lr 0.0015 --lr-scheduler inverse_sqrt "
        "--warmup-updates 700 --criterion label_smoothed_cross_entropy --max-tokens 4096 "
        "--max-update 7000 --save-dir SAVE/default/student --num-workers 0 --seed 1 "
        "--data-buffer-size 0 --cpu --patience 4"
    )
    (rows / "default.json").write_text(json.dumps({"commands": [train]}), encoding="utf-8")
    budget = [
        "--data-dir",
        corpus,
        "--save-root",
        runs,
        "--rows-dir",
        rows,
        "--cpu",
        "--max-update",
        2,
        "--validate-every",
        2,
    ]
    out = _handoff("send", "subformer", "teacher_control", "--carry", carry, *budget).stdout
    assert "subformer: update 0 (starts there)" in out and (carry / "kd.tar.xz").exists()
    doc = json.loads((carry / "state" / "teacher_control" / "row.json").read_text())
    args = doc["args"]
    assert doc["fresh"] and args[args.index("--kd-distilled-data") + 1] == "{KD}"
    assert args[args.index("--finetune-from-model") + 1] == (
        "{REPO}/examples/translation/results/teacher/checkpoint.pt"
    )
    with tarfile.open(carry / "bin.tar.xz", "w:xz") as t:
        t.add(os.path.join(corpus, "bin"), arcname="bin")
    _handoff(
        "train", "--carry", carry, "--secs", "600", "--work", tmp_path / "w", env={"OUT": str(back)}
    )
    for row in ("subformer", "teacher_control"):
        res = json.loads((back / row / "result.json").read_text(encoding="utf-8"))
        assert (res["from_update"], res["last_update"], res["ended"]) == (0, 2, True), res
        assert res["files"] == {"final": "checkpoint_best.pt"}
        _handoff("receive", row, back, *budget)
        assert (runs / row / "student" / "train.done").exists()
        # the state directory is now this row's training (a later lane resumes it here)
        assert (runs / row / "train.cmd").read_text(encoding="utf-8").startswith("fairseq-train ")
    proc = _plan("run", "subformer", "teacher_control", *budget)
    assert "Loaded checkpoint" not in (runs / "subformer" / "train.log").read_text()
    for row in ("subformer", "teacher_control"):
        rec = json.loads((rows / f"{row}.json").read_text(encoding="utf-8"))
        assert rec["updates"] == 2, proc.stderr
        log = (runs / row / "train.log").read_text(encoding="utf-8")
        assert log.startswith("[converged] updates 0 -> 2 ran on ") and "started there" in log


def test_a_state_directory_of_another_training_is_refused_before_fairseq_resumes_it(tmp_path):
    """fairseq-train goes on from SAVE/ROW/student's checkpoint whatever made it: a row whose
    state directory holds another training (another command, or checkpoints of an unrecorded
    one, e.g. the old "subformer" row now named subformer_bert_init) is refused; more budget
    for the same training is not."""
    opts = converged.get_parser().parse_args(
        ["run", "--save-root", str(tmp_path / "runs"), "--rows-dir", str(tmp_path / "rows")]
    )
    plan = converged.Plan(opts)
    save = tmp_path / "runs" / "subformer"
    save.mkdir(parents=True)
    train = ["fairseq-train", "DATA/bin", "--arch", "subformer", "--max-update", "30000"]
    plan.own_state("subformer", str(save), train)
    recorded = (save / "train.cmd").read_text(encoding="utf-8")
    assert recorded == "fairseq-train DATA/bin --arch subformer\n"
    (save / "student").mkdir()
    (save / "student" / "checkpoint_last.pt").write_bytes(b"x")
    more = [*train[:-1], "40000", "--patience", "12", "--validate-interval-updates", "9"]
    plan.own_state("subformer", str(save), more)  # (the same training, more budget)
    other = [*train, "--subformer-init", "bert"]
    with pytest.raises(converged.PlanError, match="holds another training than subformer's"):
        plan.own_state("subformer", str(save), other)
    (save / "train.cmd").unlink()
    with pytest.raises(converged.PlanError, match="command was not recorded"):
        plan.own_state("subformer", str(save), train)
    assert not (save / "train.cmd").exists()
