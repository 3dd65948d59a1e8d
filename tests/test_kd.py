"""Knowledge distillation: the sequence-level KD data pipeline (scripts/distill_data.py), the
``translation_seqkd`` task that trains on ground truth and distilled data together (Hypoformer,
Sec. 5.2), and the word-level ``word_kd`` criterion; and the atomic writes the pipeline's shards
rely on (``lightcompress.io``, the package's one temp-file-and-rename helper)."""

import os
import shutil
import subprocess
import sys

import harness
import pytest
import torch
import torch.nn.functional as F

N_TRAIN = 1000  # harness.make_parallel_corpus default
# keeps a poor teacher's outputs short (fast); no prefetch thread: see harness.NO_PREFETCH
GEN_LIMITS = "--max-len-a 1.2 --max-len-b 5 --data-buffer-size 0"


def _distill_args(data, ckpt, out, *extra):
    return [
        data,
        "--path",
        ckpt,
        "--out-dir",
        out,
        "--user-dir",
        harness.USER_DIR,
        "--cpu",
        "--beam",
        "1",
        "--num-shards",
        "2",
        "--max-tokens",
        "2000",
        "--generate-args",
        GEN_LIMITS,
        *extra,
    ]


@pytest.fixture(scope="module")
def distilled(tiny_data, tiny_transformer, tmp_path_factory):
    """The tiny corpus distilled by the tiny teacher through the command-line script."""
    out = str(tmp_path_factory.mktemp("kd") / "distilled")
    ckpt = os.path.join(tiny_transformer, "checkpoint_best.pt")
    script = os.path.join(harness.REPO_ROOT, "scripts", "distill_data.py")
    env = dict(os.environ, OMP_NUM_THREADS="1", PYTHONWARNINGS="ignore")
    proc = subprocess.run(
        [sys.executable, script, *_distill_args(tiny_data, ckpt, out)],
        check=False,
        capture_output=True,
        text=True,
        env=env,
        timeout=600,
    )
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    return out


def _indexed(prefix):
    from fairseq.data import data_utils

    return data_utils.load_indexed_dataset(prefix, None, None)


def _seqkd_task(data, mode, distilled=None, **kw):
    import lightcompress.plugin  # noqa: F401
    from lightcompress.tasks.translation_seqkd import TranslationSeqKDConfig, TranslationSeqKDTask

    cfg = TranslationSeqKDConfig(
        data=data,
        source_lang="de",
        target_lang="en",
        train_subset="train",
        dataset_impl=None,
        required_seq_len_multiple=1,
        kd_data_mode=mode,
        kd_distilled_data=distilled,
        **kw,
    )
    return TranslationSeqKDTask.setup_task(cfg)


# --------------------------------------------------------------------------- data pipeline


def test_distilled_data_is_the_teachers_translation_of_the_train_set_in_order(
    tiny_data, tiny_transformer, distilled
):
    src, tgt = _indexed(f"{distilled}/train.de-en.de"), _indexed(f"{distilled}/train.de-en.en")
    orig = _indexed(f"{tiny_data}/train.de-en.de")
    assert len(src) == len(tgt) == len(orig) == N_TRAIN
    assert all(src[i].equal(orig[i]) for i in range(N_TRAIN))  # original source, original order
    for lang in ("de", "en"):  # binarized with the teacher's dictionaries
        with open(f"{distilled}/dict.{lang}.txt") as a, open(f"{tiny_data}/dict.{lang}.txt") as b:
            assert a.read() == b.read()
    # line i holds the teacher's translation of source line i (lines from both shards)
    with open(f"{distilled}/distill-work/train.de") as f:
        sources = f.read().splitlines()
    with open(f"{distilled}/distill-work/train.en") as f:
        hyps = f.read().splitlines()
    lines = [0, 1, 499, 500, 999]
    ckpt = os.path.join(tiny_transformer, "checkpoint_best.pt")
    expected = harness.interactive(
        tiny_data, ckpt, [sources[i] for i in lines], beam=1, extra=GEN_LIMITS.split()
    )
    assert [hyps[i] for i in lines] == expected


def test_a_missing_hypothesis_is_refused_naming_the_line(
    distilled, tiny_data, tiny_transformer, tmp_path
):
    from lightcompress.kd.distill import DistillError, main

    work = tmp_path / "work"
    shutil.copytree(f"{distilled}/distill-work", work)
    shard = work / "shard1.gen"  # lines 501-1000; drop the hypothesis of sentence 7 (line 508)
    kept = [ln for ln in shard.read_text().splitlines(True) if not ln.startswith("H-7\t")]
    shard.write_text("".join(kept))
    ckpt = os.path.join(tiny_transformer, "checkpoint_best.pt")
    args = _distill_args(tiny_data, ckpt, str(tmp_path / "out"), "--work-dir", str(work))
    with pytest.raises(DistillError, match=r"no hypothesis for 1 of 500 .*line numbers: 508\b"):
        main(args)
    assert not os.path.exists(tmp_path / "out" / "train.de-en.en.bin")


def test_an_empty_hypothesis_is_refused(tmp_path):
    from lightcompress.kd.distill import DistillError, check_shard

    gen = tmp_path / "shard.gen"
    gen.write_text("S-0\ta b\nH-0\t-0.1\tx y\nS-1\tc\nH-1\t-0.2\t\n")
    with pytest.raises(DistillError, match=r"empty hypotheses for 1 source lines.*: 12\b"):
        check_shard(str(gen), offset=10, size=2)
    assert check_shard(str(gen), offset=10, size=2, allow_empty=True)[1] == ["x y", ""]


def test_the_binarization_in_this_process_leaves_its_logging_as_it_was(
    tiny_data, tmp_path, monkeypatch
):
    """The merged pairs are binarized by fairseq-preprocess's main in distill's own process: a
    failure is a DistillError naming it; its log file gets its lines whatever the logging was
    (here: as a worker that ran other tests may have it, all disabled, its logger too), and the
    root logger's handlers, levels and switches are left as they were."""
    import logging
    from types import SimpleNamespace

    from lightcompress.kd.distill import DistillError, _binarize

    root, own = logging.getLogger(), logging.getLogger("fairseq_cli.preprocess")
    monkeypatch.setattr(logging.root.manager, "disable", logging.CRITICAL)
    monkeypatch.setattr(own, "disabled", True)

    def state():
        return [(h, h.level) for h in root.handlers], root.level, root.manager.disable, own.disabled

    before = state()
    args = SimpleNamespace(out_dir=str(tmp_path / "out"), workers=1, data=tiny_data)
    with pytest.raises(DistillError, match=r"^fairseq-preprocess failed: FileNotFoundError: "):
        _binarize(str(tmp_path / "no-such-text"), args, "de", "en")
    assert state() == before
    # the pairs binarized: the same ids as fairseq-preprocess gives the original text
    raw = os.path.join(os.path.dirname(tiny_data), "raw", "train")
    _binarize(raw, args, "de", "en")
    assert state() == before
    from fairseq.data import data_utils

    for lang in ("de", "en"):
        ours = data_utils.load_indexed_dataset(f"{args.out_dir}/train.de-en.{lang}", None)
        theirs = data_utils.load_indexed_dataset(f"{tiny_data}/train.de-en.{lang}", None)
        assert len(ours) == len(theirs) > 0
        assert all(torch.equal(ours[i], theirs[i]) for i in range(len(ours)))
    assert "sents" in (tmp_path / "out" / "preprocess.log").read_text()


def test_rerun_resumes_keeping_finished_shards(distilled, tiny_data, tiny_transformer, tmp_path):
    from lightcompress.kd.distill import DistillError, main

    work = tmp_path / "work"
    shutil.copytree(f"{distilled}/distill-work", work)
    os.remove(work / "shard1.gen")  # as if interrupted while translating shard 1
    mtime0 = os.stat(work / "shard0.gen").st_mtime_ns
    ckpt = os.path.join(tiny_transformer, "checkpoint_best.pt")
    out = str(tmp_path / "out")
    assert main(_distill_args(tiny_data, ckpt, out, "--work-dir", str(work))) == 0
    assert os.stat(work / "shard0.gen").st_mtime_ns == mtime0  # not translated again
    with open(f"{distilled}/distill-work/train.en") as f:
        assert (work / "train.en").read_text() == f.read()
    assert len(_indexed(f"{out}/train.de-en.en")) == N_TRAIN
    # shards made with other settings are not mixed with new ones
    with pytest.raises(DistillError, match="other settings.*beam"):
        main(_distill_args(tiny_data, ckpt, out, "--work-dir", str(work), "--beam", "3"))


def test_the_onnx_engine_gives_fairseq_generates_translations(
    distilled, tiny_data, tiny_transformer, tmp_path, capsys
):
    from lightcompress.kd.distill import DistillError, main

    ckpt = os.path.join(tiny_transformer, "checkpoint_best.pt")
    out = tmp_path / "out"
    args = _distill_args(tiny_data, ckpt, str(out), "--engine", "onnx", "--threads", "1")
    args[args.index("--generate-args") + 1] = "--max-len-a 1.2 --max-len-b 5"
    assert main(args) == 0
    work = out / "distill-work"
    # the same hypotheses, line for line, as fairseq-generate's (the module's fixture)
    with open(f"{distilled}/distill-work/train.en") as f:
        assert (work / "train.en").read_text() == f.read()
    src, orig = _indexed(f"{out}/train.de-en.de"), _indexed(f"{tiny_data}/train.de-en.de")
    assert len(src) == len(_indexed(f"{out}/train.de-en.en")) == N_TRAIN
    assert all(src[i].equal(orig[i]) for i in range(N_TRAIN))
    assert (work / "teacher-onnx" / "MANIFEST.sha256").exists()
    assert "lightcompress.kd.onnx_generate" in capsys.readouterr().out
    # a rerun keeps shards and export; another engine does not mix with them
    os.remove(work / "shard1.gen")
    mtime = os.stat(work / "teacher-onnx" / "MANIFEST.sha256").st_mtime_ns
    assert main(args) == 0
    assert os.stat(work / "teacher-onnx" / "MANIFEST.sha256").st_mtime_ns == mtime
    with open(f"{distilled}/distill-work/train.en") as f:
        assert (work / "train.en").read_text() == f.read()
    fairseq = [a for a in args if a not in ("--engine", "onnx")]
    with pytest.raises(DistillError, match=r"other settings \(engine: 'onnx' -> None\)"):
        main(fairseq)


def test_engine_auto_takes_the_work_directorys_engine_else_onnx_where_it_can(
    tiny_data, tmp_path, monkeypatch, capsys
):
    import json

    from lightcompress.kd import distill

    def resolved(*extra, config=None, export_fails=False):
        work = tmp_path / f"w{len(list(tmp_path.iterdir()))}"
        work.mkdir()
        if config is not None:
            (work / "config.json").write_text(json.dumps(config))
        args = distill.build_parser().parse_args(
            [
                tiny_data,
                "--path",
                "t.pt",
                "--out-dir",
                "o",
                "--work-dir",
                str(work),
                "--cpu",
                "--engine",
                "auto",
                *extra,
            ]
        )

        def export(a):
            if export_fails:
                raise distill.DistillError("the teacher's ONNX Runtime export failed: no such arch")
            exported.append(a.engine)

        exported = []
        monkeypatch.setattr(distill, "_export_teacher", export)
        distill._resolve_engine(args)
        return args.engine, exported, capsys.readouterr().err

    # a work directory keeps the engine it was made with (one made before --engine: fairseq)
    assert resolved(config={"engine": "onnx"}) == ("onnx", [], "")
    assert resolved(config={"beam": 5}) == ("fairseq", [], "")
    # a new one on the CPU: the ONNX engine, its export made
    assert resolved() == ("onnx", ["onnx"], "")
    # settings it cannot honour, or a teacher that does not export: fairseq-generate, saying why
    engine, exported, err = resolved("--generate-args", "--nbest 2")
    assert (engine, exported) == ("fairseq", [])
    assert err == (
        "[distill] translating with fairseq-generate (--generate-args --nbest: "
        "--engine onnx takes only --max-len-a, --max-len-b, --min-len, --unkpen "
        "(--engine fairseq takes any fairseq-generate flag))\n"
    )
    engine, _, err = resolved(export_fails=True)
    assert engine == "fairseq"
    assert err == (
        "[distill] translating with fairseq-generate (the teacher's ONNX Runtime "
        "export failed: no such arch)\n"
    )


def _fake_generate(monkeypatch, script):
    """Make the pipeline run ``python -c SCRIPT`` instead of fairseq-generate."""
    from lightcompress.kd import distill

    monkeypatch.setattr(
        distill, "_generate_command", lambda args, d: [sys.executable, "-c", script]
    )


def _leftovers(work):
    return sorted(n for n in os.listdir(work) if n.startswith(".") or ".tmp" in n)


@pytest.mark.parametrize(
    "script, message",
    [
        ("import sys; print('S-0\\ta'); sys.exit(3)", "fairseq-generate failed on shard 1"),
        ("print('S-0\\ta'); print('H-0\\t-0.1\\tx')", "no hypothesis for 499 of 500"),
    ],
)
def test_a_failed_shard_leaves_no_shard_file_and_no_temporary_files(
    distilled, tiny_data, tiny_transformer, tmp_path, monkeypatch, script, message
):
    """Interrupted or incomplete output never becomes shardK.gen (which a rerun would keep)."""
    from lightcompress.kd.distill import DistillError, main

    work = tmp_path / "work"
    shutil.copytree(f"{distilled}/distill-work", work)
    os.remove(work / "shard1.gen")
    _fake_generate(monkeypatch, script)
    ckpt = os.path.join(tiny_transformer, "checkpoint_best.pt")
    args = _distill_args(tiny_data, ckpt, str(tmp_path / "out"), "--work-dir", str(work))
    with pytest.raises(DistillError, match=message):
        main(args)
    assert not (work / "shard1.gen").exists()
    assert _leftovers(work) == []
    assert (work / "shard0.gen").exists()  # the finished shard is kept


def test_shard_files_get_the_umask_permissions(
    distilled, tiny_data, tiny_transformer, tmp_path, monkeypatch
):
    from lightcompress.kd.distill import main

    work = tmp_path / "work"
    shutil.copytree(f"{distilled}/distill-work", work)
    os.remove(work / "shard1.gen")
    original = os.path.join(distilled, "distill-work", "shard1.gen")
    _fake_generate(monkeypatch, f"import sys; sys.stdout.write(open({original!r}).read())")
    ckpt = os.path.join(tiny_transformer, "checkpoint_best.pt")
    old = os.umask(0o027)
    try:
        main(_distill_args(tiny_data, ckpt, str(tmp_path / "out"), "--work-dir", str(work)))
    finally:
        os.umask(old)
    for name in ("shard1.gen", "train.de", "train.en"):
        assert (work / name).stat().st_mode & 0o777 == 0o640, name
    with open(original) as f:
        assert (work / "shard1.gen").read_text() == f.read()
    assert _leftovers(work) == []


_SLOW_GENERATE = """
import sys, time
for batch in range(5):
    for i in range(batch * 100, (batch + 1) * 100):
        print(f"S-{i}\\ts{i % 7}")
        print(f"H-{i}\\t-0.1\\tt{i % 7}")
    sys.stdout.flush()
    time.sleep(0.4)
"""


def test_distillation_prints_progress_to_stderr(tiny_data, tmp_path, monkeypatch, capsys):
    """Shard i/N, sentences done, elapsed time, while a shard is translated (no teacher: a
    stand-in for fairseq-generate writes 500 hypotheses in 5 batches, 0.4 s apart)."""
    from lightcompress.kd.distill import main

    _fake_generate(monkeypatch, _SLOW_GENERATE)
    teacher = tmp_path / "teacher.pt"
    teacher.write_bytes(b"unused by the stand-in")
    out = tmp_path / "out"
    args = _distill_args(
        tiny_data,
        str(teacher),
        str(out),
        "--progress-interval",
        "0.3",
        "--post-process",
        "sentencepiece",
    )
    assert main(args) == 0
    err = capsys.readouterr().err
    lines = [ln for ln in err.splitlines() if ln.startswith("[distill] shard 1 (2/2): ")]
    assert lines[0].endswith("translating train lines 501-1000 (500 sentences)"), err
    done = [int(ln.split(": ")[1].split("/")[0]) for ln in lines[1:]]
    assert done[-1] == 500 and "500/500 sentences (100%)" in lines[-1]
    assert any(0 < d < 500 for d in done), err  # reported while the shard was running
    assert done == sorted(done)
    assert all(" elapsed" in ln and "run: " in ln for ln in lines[1:])
    assert "about " in next(ln for ln in lines[1:] if "/500 sentences (" in ln and "100%" not in ln)
    assert "[distill] 1,000 train pairs in 2 shards; 0 done before, 2 to translate" in err
    # progress 0: only start and end lines
    shutil.rmtree(out)
    assert main(args[:-4] + ["--progress-interval", "0", "--post-process", "sentencepiece"]) == 0
    lines = [ln for ln in capsys.readouterr().err.splitlines() if "shard 1 (2/2)" in ln]
    assert len(lines) == 2 and "500/500" in lines[1]


@pytest.mark.parametrize(
    "change, message",
    [
        ({0: "/nowhere/data-bin"}, "data directory /nowhere/data-bin not found"),
        ({2: "/nowhere/teacher.pt"}, "--path: teacher checkpoint /nowhere/teacher.pt not found"),
        ({"add": ["--shard-id", "5"]}, "--shard-id 5: there are 2 shards (0 to 1)"),
        ({"add": ["--beam", "0"]}, "--beam must be >= 1, got 0"),
        (
            {"add": ["--engine", "onnx"]},
            (
                "--generate-args --data-buffer-size: --engine onnx "
                "takes only --max-len-a, --max-len-b, --min-len, --unkpen (--engine fairseq takes any "
                "fairseq-generate flag)"
            ),
        ),
        (
            {"add": ["--engine", "onnx", "--generate-args", "", "--post-process", "sentencepiece"]},
            "--post-process needs --engine fairseq (the ONNX engine writes subwords)",
        ),
    ],
)
def test_distill_data_sh_refuses_bad_arguments_with_one_line(tiny_data, tmp_path, change, message):
    teacher = tmp_path / "teacher.pt"
    teacher.write_bytes(b"x")
    args = _distill_args(tiny_data, str(teacher), str(tmp_path / "out"))
    for i, value in change.items():
        if i == "add":
            args += value
        else:
            args[i] = value
    script = os.path.join(harness.REPO_ROOT, "scripts", "distill_data.sh")
    env = dict(os.environ, PYTHON=sys.executable, PYTHONWARNINGS="ignore")
    proc = subprocess.run(
        ["bash", script, *args], check=False, capture_output=True, text=True, env=env, timeout=120
    )
    assert proc.returncode == 2, proc.stderr
    # (importing fairseq logs "INFO:...: Please install tensorboardX" where it is missing)
    lines = [ln for ln in proc.stderr.splitlines() if ln.strip() and not ln.startswith("INFO:")]
    assert lines == [f"distill_data: error: {message}"], proc.stderr
    assert "Traceback" not in proc.stderr
    assert not os.path.exists(tmp_path / "out")  # nothing written


# --------------------------------------------------------------------------- atomic writes


@pytest.fixture
def umask_027():
    old = os.umask(0o027)
    yield
    os.umask(old)


def test_atomic_writes_follow_the_umask(tmp_path, umask_027):
    from lightcompress.io import atomic_directory, atomic_path, atomic_write, current_umask

    assert current_umask() == 0o027
    with atomic_write(tmp_path / "a.txt") as f:
        f.write("text")
    with atomic_write(tmp_path / "b.pt", "wb") as f:
        torch.save({"x": torch.ones(2)}, f)
    with atomic_path(tmp_path / "c.pt") as tmp:
        torch.save({"x": torch.ones(2)}, tmp)
    with atomic_directory(tmp_path / "d") as tmp, open(os.path.join(tmp, "inside"), "w") as f:
        f.write("x")
    for name in ("a.txt", "b.pt", "c.pt"):
        assert (tmp_path / name).stat().st_mode & 0o777 == 0o640, name
    assert (tmp_path / "d").stat().st_mode & 0o777 == 0o750
    assert (tmp_path / "a.txt").read_text() == "text"
    assert torch.load(tmp_path / "b.pt")["x"].sum() == 2 == torch.load(tmp_path / "c.pt")["x"].sum()
    assert (tmp_path / "d" / "inside").read_text() == "x"
    assert sorted(os.listdir(tmp_path)) == ["a.txt", "b.pt", "c.pt", "d"]


@pytest.mark.parametrize("error", [RuntimeError, KeyboardInterrupt])
def test_a_failed_atomic_write_leaves_no_temporary_file_and_no_half_written_target(tmp_path, error):
    from lightcompress.io import atomic_directory, atomic_path, atomic_write

    with pytest.raises(error), atomic_write(tmp_path / "new.txt") as f:
        f.write("half")
        f.flush()
        assert os.path.dirname(f.name) == str(tmp_path)  # the temporary file, beside it
        raise error
    with pytest.raises(error), atomic_path(tmp_path / "new.pt") as tmp:
        torch.save({"x": 1}, tmp)
        raise error
    with pytest.raises(error), atomic_directory(tmp_path / "newdir") as tmp:
        open(os.path.join(tmp, "part"), "w").close()
        raise error
    assert os.listdir(tmp_path) == []


def test_an_existing_target_survives_a_failed_atomic_write(tmp_path):
    from lightcompress.io import atomic_directory, atomic_write

    target = tmp_path / "profile.json"
    target.write_text("old")
    with pytest.raises(ValueError), atomic_write(target) as f:
        f.write("new and half")
        raise ValueError("disk full")
    assert target.read_text() == "old"
    (tmp_path / "shard").mkdir()
    (tmp_path / "shard" / "a").write_text("old")
    with pytest.raises(ValueError), atomic_directory(tmp_path / "shard") as tmp:
        (tmp_path / os.path.basename(tmp) / "a").write_text("new")
        raise ValueError
    assert (
        os.listdir(tmp_path / "shard") == ["a"] and (tmp_path / "shard" / "a").read_text() == "old"
    )
    assert sorted(os.listdir(tmp_path)) == ["profile.json", "shard"]
    # and a successful write replaces both
    with atomic_write(target) as f:
        f.write("new")
    with atomic_directory(tmp_path / "shard") as tmp:
        (tmp_path / os.path.basename(tmp) / "b").write_text("new")
    assert target.read_text() == "new" and os.listdir(tmp_path / "shard") == ["b"]
    assert sorted(os.listdir(tmp_path)) == ["profile.json", "shard"]


def test_atomic_write_refuses_modes_it_cannot_make_atomic(tmp_path):
    from lightcompress.io import atomic_write

    with pytest.raises(ValueError, match="mode"), atomic_write(tmp_path / "x", "a"):
        pass
    assert os.listdir(tmp_path) == []


# --------------------------------------------------------------------------- task


@pytest.mark.parametrize("mode,factor", [("gt", 1), ("distilled", 1), ("both", 2)])
def test_task_trains_on_ground_truth_and_or_distilled_data(tiny_data, distilled, mode, factor):
    task = _seqkd_task(tiny_data, mode, distilled)
    task.load_dataset("train")
    train = task.dataset("train")
    assert len(train) == factor * N_TRAIN
    gt_tgt, kd_tgt = (
        _indexed(f"{tiny_data}/train.de-en.en"),
        _indexed(f"{distilled}/train.de-en.en"),
    )
    first = kd_tgt if mode == "distilled" else gt_tgt
    assert train[0]["target"].equal(first[0])
    if mode == "both":
        assert train[N_TRAIN + 3]["target"].equal(kd_tgt[3])
    # validation stays on the real references
    task.load_dataset("valid")
    valid, ref = task.dataset("valid"), _indexed(f"{tiny_data}/valid.de-en.en")
    assert len(valid) == len(ref)
    assert all(valid[i]["target"].equal(ref[i]) for i in range(len(ref)))


def test_task_upsampling_ratios_and_split_names(tiny_data, distilled, tmp_path):
    task = _seqkd_task(tiny_data, "both", distilled, kd_gt_upsample=2)
    task.load_dataset("train")
    assert len(task.dataset("train")) == 3 * N_TRAIN
    # a distilled copy given as a split of the ground-truth directory
    data = tmp_path / "bin"
    shutil.copytree(tiny_data, data)
    for ext in ("de.bin", "de.idx", "en.bin", "en.idx"):
        shutil.copy(f"{distilled}/train.de-en.{ext}", data / f"train_kd.de-en.{ext}")
    task = _seqkd_task(str(data), "both", "train_kd", kd_distilled_upsample=2)
    task.load_dataset("train")
    assert len(task.dataset("train")) == 3 * N_TRAIN


def test_task_refuses_distilled_data_with_other_dictionaries(tiny_data, distilled, tmp_path):
    other = tmp_path / "other"
    shutil.copytree(distilled, other, ignore=shutil.ignore_patterns("distill-work"))
    lines = (other / "dict.en.txt").read_text().splitlines(True)
    lines[0], lines[1] = lines[1], lines[0]
    (other / "dict.en.txt").write_text("".join(lines))
    from lightcompress.errors import ConfigError

    # refused when the task is set up (before fairseq-train builds the model), as a ConfigError:
    # fairseq-train then prints one line, "fairseq-train: error: ...", and exits with status 2
    with pytest.raises(ConfigError, match=r"dict.en.txt differs from the task's \(index 4 is"):
        _seqkd_task(tiny_data, "both", str(other))
    with pytest.raises(ConfigError, match="needs --kd-distilled-data"):
        _seqkd_task(tiny_data, "both", None)


# --------------------------------------------------------------------------- criterion


class _FixedLogits(torch.nn.Module):
    """A stand-in for a fairseq model whose decoder outputs fixed logits [B x T x V]."""

    def __init__(self, logits):
        super().__init__()
        self.logits = torch.nn.Parameter(logits.clone())

    def forward(self, src_tokens, src_lengths, prev_output_tokens):
        return self.logits, {"attn": [None]}

    def get_normalized_probs(self, net_output, log_probs, sample=None):
        fn = F.log_softmax if log_probs else F.softmax
        return fn(net_output[0].float(), dim=-1)

    def get_targets(self, sample, net_output):
        return sample["target"]


def _Task():
    from lightcompress.build import NoDataTask, dictionary_of_size

    return NoDataTask(dictionary_of_size(4))  # the specials only: pad = 1


def test_word_kd_loss_equals_the_hand_computed_value():
    import lightcompress.plugin  # noqa: F401
    from lightcompress.criterions.word_kd import WordKDCriterion

    torch.manual_seed(0)
    bsz, tlen, vocab, pad = 2, 3, 6, 1
    s_logits, t_logits = torch.randn(bsz, tlen, vocab), torch.randn(bsz, tlen, vocab)
    target = torch.tensor([[4, 5, 2], [3, 2, pad]])
    sample = {
        "net_input": {"src_tokens": None, "src_lengths": None, "prev_output_tokens": None},
        "target": target,
        "ntokens": 5,
    }
    eps, alpha, temp = 0.1, 0.3, 2.0
    crit = WordKDCriterion(_Task(), False, eps, kd_alpha=alpha, kd_temperature=temp)
    crit.set_teacher(_FixedLogits(t_logits))
    student = _FixedLogits(s_logits)
    loss, sample_size, log = crit(student, sample)

    ls = nll = kd = 0.0
    for b in range(bsz):
        for t in range(tlen):
            y = target[b, t].item()
            if y == pad:
                continue
            lp = torch.log_softmax(s_logits[b, t], -1)
            nll += -lp[y]
            eps_i = eps / (vocab - 1)  # fairseq's label smoothing
            ls += (1 - eps - eps_i) * -lp[y] + eps_i * -lp.sum()
            p_teacher = torch.softmax(t_logits[b, t] / temp, -1)
            kd += temp**2 * -(p_teacher * torch.log_softmax(s_logits[b, t] / temp, -1)).sum()
    expected = (1 - alpha) * ls + alpha * kd
    assert sample_size == 5
    torch.testing.assert_close(loss, expected)
    torch.testing.assert_close(log["nll_loss"], nll)
    torch.testing.assert_close(log["kd_loss"], kd)
    loss.backward()  # gradients reach the student only
    assert student.logits.grad is not None and crit.teacher.logits.grad is None


def test_word_kd_teacher_is_frozen_and_not_saved(tiny_data, tiny_transformer):
    """The teacher comes from its checkpoint, stays in eval mode without gradients, and is no part
    of the criterion's parameters or state; a student equal to the teacher has KD cross-entropy
    equal to the teacher's entropy (KL zero)."""
    from fairseq import checkpoint_utils
    from fairseq.tasks.translation import TranslationConfig, TranslationTask

    import lightcompress.plugin  # noqa: F401
    from lightcompress.criterions.word_kd import WordKDCriterion

    ckpt = os.path.join(tiny_transformer, "checkpoint_best.pt")
    cfg = TranslationConfig(
        data=tiny_data, train_subset="train", dataset_impl=None, required_seq_len_multiple=1
    )
    task = TranslationTask.setup_task(cfg)
    crit = WordKDCriterion(task, False, 0.1, kd_teacher_path=ckpt, kd_alpha=1.0)
    teacher = crit.teacher
    assert list(crit.parameters()) == [] and crit.state_dict() == {}
    crit.train()
    assert not teacher.training and not any(p.requires_grad for p in teacher.parameters())

    (student,), _ = checkpoint_utils.load_model_ensemble([ckpt], task=task)
    student.train(False)
    task.load_dataset("valid")
    ds = task.dataset("valid")
    sample = ds.collater([ds[i] for i in range(4)])
    _, _, log = crit(student, sample)
    probs = student.get_normalized_probs(student(**sample["net_input"]), log_probs=False)
    mask = sample["target"].ne(task.target_dictionary.pad())
    entropy = -(probs * probs.log()).sum(-1)[mask].sum()
    torch.testing.assert_close(log["kd_loss"], entropy.detach())


@pytest.mark.parametrize(
    "teacher, flags, message",
    [
        (None, [], "--kd-teacher-path: teacher checkpoint {teacher} not found"),
        ("text", [], "--kd-teacher-path: cannot load the teacher {teacher}: "),
        ("text", ["--kd-alpha", "1.5"], "--kd-alpha must be in [0, 1], got 1.5"),
        ("text", ["--kd-temperature", "0"], "--kd-temperature must be > 0, got 0.0"),
    ],
    ids=["missing", "damaged", "alpha", "temperature"],
)
def test_word_kd_bad_settings_end_fairseq_train_with_one_line(
    tiny_data, tmp_path, teacher, flags, message
):
    path = tmp_path / "teacher.pt"
    if teacher == "text":
        path.write_text("not a checkpoint\n")
    save = tmp_path / "student"
    proc = harness.train(
        tiny_data,
        str(save),
        harness.tiny_arch_args("transformer", layers=(1, 1), dim=16, ffn=16),
        extra=["--criterion", "word_kd", "--kd-teacher-path", str(path), *flags],
        max_update=2,
        check=False,
    )
    assert proc.returncode == 2, proc.stdout[-3000:] + proc.stderr[-3000:]
    lines = [ln for ln in proc.stderr.splitlines() if ln.strip()]
    assert lines[-1].startswith("fairseq-train: error: " + message.format(teacher=path))
    assert len([ln for ln in lines if "error" in ln.lower()]) == 1, proc.stderr[-3000:]
    assert "Traceback" not in proc.stderr + proc.stdout
    assert not list(save.glob("*.pt"))  # refused before training: no checkpoint


def test_train_seqkd_task_and_word_kd_end_to_end(tiny_data, tiny_transformer, distilled, tmp_path):
    """fairseq-train --task translation_seqkd --kd-data-mode both --criterion word_kd, 1 epoch."""
    ckpt = os.path.join(tiny_transformer, "checkpoint_best.pt")
    save = str(tmp_path / "student")
    proc = harness.train(
        tiny_data,
        save,
        harness.tiny_arch_args("transformer", layers=(1, 1)),
        extra=[
            "--task",
            "translation_seqkd",
            "--kd-data-mode",
            "both",
            "--kd-distilled-data",
            distilled,
            "--criterion",
            "word_kd",
            "--kd-teacher-path",
            ckpt,
            "--kd-alpha",
            "0.5",
        ],
    )
    log = proc.stdout + proc.stderr
    assert f"{2 * N_TRAIN} pairs" in log and "kd_loss" in log
    state = torch.load(os.path.join(save, "checkpoint_last.pt"), weights_only=False)
    assert state["cfg"]["task"]["_name"] == "translation_seqkd"
    # the student's checkpoint holds the 1-1 student only, no teacher weights
    assert not any(k.startswith("encoder.layers.1.") for k in state["model"])
