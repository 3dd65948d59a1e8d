"""Faults and bad inputs of ``lightcompress-compress`` (issue 40's sweep, compress part): kill -9
in every step leaves no process and no temporary file behind; bad targets, unwritable or
foreign save directories and a full disk end in one line and a non-zero exit; a rerun with
an option that changes an output does not reuse the old outputs silently; DA-WID reaches its
target or fails.
"""

import json
import os
import re
import signal
import subprocess
import sys
from pathlib import Path

import harness
import pytest
from test_compress import CMD, _compress, _compress_here, _env, _one_line_error, _teacher

FAST = [
    "--max-update",
    "20",
    "--validate-every",
    "10",
    "--speed-runs",
    "1",
    "--speed-sentences",
    "3",
    "--cpu",
]

# A subreaper (Linux) for every step in turn: runs compress (`python -m lightcompress.compress
# ARGS`, forked from this process as the tests' fork server forks a command, forkserver._child;
# this process is itself forked from that server by harness.run: torch already imported), kills it with -9 once STEP's command runs (a process whose command line
# holds WANT), then waits up to 20 s for every descendant to end. An orphan is re-parented to
# this process, not to init, so it is found; it is listed and killed. One JSON line a step:
# what was killed and seen, what was left, compress's output and the temporary files in SAVE.
KILLER = r"""
import ctypes, json, os, re, signal, sys, time
from pathlib import Path
ctypes.CDLL(None).prctl(36, 1, 0, 0, 0)  # PR_SET_CHILD_SUBREAPER
save, steps, logs, tests, argv = sys.argv[1], json.loads(sys.argv[2]), *sys.argv[3:5], sys.argv[5:]
os.makedirs(logs, exist_ok=True)
sys.path.insert(0, tests)
import forkserver

def start(log):
    sys.stdout.flush()
    pid = os.fork()
    if pid == 0:  # (becomes `python -m lightcompress.compress ARGV`, stdout and stderr in LOG)
        forkserver._child({"argv": [sys.executable, "-m", "lightcompress.compress", *argv],
                           "entry": "python", "cwd": os.getcwd(), "env": dict(os.environ),
                           "stdin": os.devnull, "stdout": log, "stderr": log})
    return pid

def text(log):
    try:
        return Path(log).read_text(errors="replace")
    except OSError:
        return ""

def table():
    out = {}
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            stat = open(f"/proc/{pid}/stat").read().rpartition(")")[2].split()
            cmd = open(f"/proc/{pid}/cmdline", "rb").read().replace(b"\0", b" ").decode()
        except OSError:
            continue
        if stat[0] != "Z":
            out[int(pid)] = (int(stat[1]), cmd)
    return out

def below(root, procs):
    found, todo = {}, [root]
    while todo:
        p = todo.pop()
        for pid, (ppid, cmd) in procs.items():
            if ppid == p and pid not in found:
                found[pid] = cmd
                todo.append(pid)
    return found

for step, want in steps:
    log = os.path.join(logs, f"{step}.log")
    header = re.compile(r"^\[compress \d+/\d+ " + re.escape(step) + r" \+", re.M)
    pid = start(log)
    deadline, ready, ended = time.monotonic() + 600, False, False
    while not ended and time.monotonic() < deadline and not ready:
        time.sleep(0.05)
        if header.search(text(log)):
            ready = not want or any(want in c and "guard.py" not in c
                                    for c in below(pid, table()).values())
        ended = os.waitpid(pid, os.WNOHANG)[0] == pid
    killed = not ended
    seen = below(pid, table()) if killed else {}
    if killed:
        os.kill(pid, signal.SIGKILL)
        os.waitpid(pid, 0)
    left, end = {}, time.monotonic() + 20  # (the guard: SIGTERM, 10 s, SIGKILL)
    while time.monotonic() < end:
        try:
            while os.waitpid(-1, os.WNOHANG)[0]:
                pass
        except ChildProcessError:
            pass
        left = below(os.getpid(), table())
        if not left:
            break
        time.sleep(0.2)
    for p in left:
        try:
            os.kill(p, signal.SIGKILL)
        except OSError:
            pass
    tmp = sorted(str(p.relative_to(save)) for p in Path(save).rglob("*") if p.name.endswith(".tmp"))
    print(json.dumps({"step": step, "want": want, "killed": killed, "seen": seen, "left": left,
                      "out": text(log), "tmp": tmp}), flush=True)
    if not killed:
        break
"""

KD_STEPS = [
    ("transfer", ""),
    ("kd-data", "lightcompress.kd.onnx_generate"),
    ("fine-tune", "fairseq-train"),
    ("shortlist", ""),
    ("export", ""),
    ("int8", ""),
    ("ct2", ""),
    ("test-teacher", ""),
    ("test-student", ""),
    ("speed", ""),
    ("speed-b32", ""),
    ("report", ""),
]
# (transfer, shortlist, the exports, the test translations and speed run in compress's own
# process: their commands' main called as a function, no child to wait for)


def _temp_files(save):
    return sorted(
        str(p.relative_to(save)) for p in Path(save).rglob("*") if p.name.endswith(".tmp")
    )


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="Linux's subreaper")
def test_kill_9_in_every_step_leaves_no_process_and_the_rerun_finishes(
    tiny_data, tiny_transformer, tmp_path
):
    save = tmp_path / "kd"
    args = [
        *CMD,
        _teacher(tiny_transformer),
        "--data",
        tiny_data,
        "-o",
        str(save),
        "--kd",
        "--rank",
        "8",
        "--max-update",
        "1000",
        "--validate-every",
        "250",
        "--patience",
        "0",
        *FAST,
    ]
    run = harness.run(
        [
            sys.executable,
            "-c",
            KILLER,
            save,
            json.dumps(KD_STEPS),
            tmp_path / "logs",
            os.path.dirname(os.path.abspath(__file__)),
            *args[len(CMD) :],
        ],
        env=_env(),
        text=True,
        timeout=1800,
    )
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]
    killed = []
    for line in run.stdout.splitlines():
        res = json.loads(line)
        step, want = res["step"], res["want"]
        assert res["left"] == {}, (step, res["left"], res["out"][-3000:])
        if not res["killed"]:  # (finished before it could be killed: nothing left to do)
            assert "done:" in res["out"], res["out"][-3000:]
            break
        killed.append(step)
        if want:
            assert any(want in c for c in res["seen"].values()), (step, res["seen"])
        # only compress's own temporary files (a kill -9 runs no clean-up) may remain
        own = [p for p in res["tmp"] if p.startswith("eval/") or "/" not in p]
        assert res["tmp"] == own, (step, res["tmp"])
    assert {"kd-data", "fine-tune", "test-teacher"} <= set(killed), killed
    proc = _compress(args[len(CMD) :])
    assert "done:" in proc.stdout and (save / "report.md").exists()
    assert _temp_files(save) == []
    # item 3: a rerun with another --ref redoes the report (the references it names change)
    raw = Path(tiny_data).parent / "raw"
    again = _compress([*args[len(CMD) :], "--ref", raw / "test.en"])
    assert "the report is redone" in again.stdout
    doc = json.loads((save / "report.json").read_text())
    assert doc["protocol"]["references"] == str(raw / "test.en")
    assert doc["plan"]["report_options"]["ref"] == str(raw / "test.en")
    # ... and a rerun whose commands differ (--beam) is refused, the outputs kept
    err = _one_line_error(_compress_here([*args[len(CMD) :], "--beam", "4"]))
    assert "holds a run with other settings" in err and (save / "report.md").exists()
    assert "now ... " in err and "--beam 4" in err and "--beam 5" in err, err  # (where)


# one case per bad input: (arguments after the teacher, data and save dir; what the line says)
BAD = {
    "ratio-nan-dry-run": (["--ratio", "nan", "--dry-run"], "--ratio must be a finite number"),
    "ratio-inf": (["--ratio", "inf"], "--ratio must be a finite number"),
    "ratio-below-1": (["--ratio", "0.5"], "the student would be as large as the teacher or larger"),
    "energy-nan": (["--energy", "nan"], "--energy must be a finite number"),
    "lr-nan": (["--lr", "nan"], "--lr must be a finite number"),
    "embed-rank-huge": (
        ["--embed-rank", "100000", "--dry-run"],
        "is not below the teacher's embedding dimension",
    ),
    "params-above-teacher": (["--params", "10M"], "is not below the teacher's"),
    "save-dir-after-dash-dash": (
        ["--dry-run", "--", "--save-dir", "elsewhere"],
        "the save directory is compress's own",
    ),
    "max-update-after-dash-dash": (["--", "--max-update=5"], "give compress's --max-update"),
}


@pytest.mark.parametrize("case", sorted(BAD))
def test_a_bad_input_is_refused_in_one_line_before_anything_is_written(
    case, tiny_data, tiny_transformer, tmp_path, capsys
):
    from lightcompress.compress.cli import main

    args, want = BAD[case]
    save = tmp_path / "out"
    try:  # (in this process: the checks run before anything is written or started)
        status = main([_teacher(tiny_transformer), "--data", tiny_data, "-o", str(save), *args])
    except SystemExit as exc:  # argparse's refusals
        status = exc.code
    err = capsys.readouterr().err.strip()
    assert status == 2 and err.startswith("lightcompress-compress: error: "), err
    assert "\n" not in err and want in err, err
    assert not save.exists()


def _read_only_dir(tmp_path):
    ro = tmp_path / "ro"
    ro.mkdir()
    ro.chmod(0o555)
    if not os.access(ro, os.W_OK):
        return ro / "out"
    try:  # root: a read-only file system (containers mount /sys read-only)
        os.mkdir("/sys/lightcompress-test")
    except OSError:
        return Path("/sys/lightcompress-test/out")
    os.rmdir("/sys/lightcompress-test")
    pytest.skip("no read-only directory to try")


def test_an_unwritable_save_dir_or_a_full_disk_is_one_line(tiny_data, tiny_transformer, tmp_path):
    base = [_teacher(tiny_transformer), "--data", tiny_data, "--rank", "8", *FAST]
    proc = _compress([*base, "-o", _read_only_dir(tmp_path)], check=False)
    assert proc.returncode != 0 and "Traceback" not in proc.stderr, proc.stderr
    err = proc.stderr.strip()
    assert err.startswith("lightcompress-compress: error: ") and "\n" not in err, err
    # a full disk (the log of the first step is /dev/full): one line, exit 1
    save = tmp_path / "full"
    (save / "logs").mkdir(parents=True)
    (save / "logs" / "01-transfer.log").symlink_to("/dev/full")
    proc = _compress([*base, "-o", save], check=False)
    err = proc.stderr.strip()
    assert proc.returncode == 1 and "\n" not in err and "No space left on device" in err, err


def test_a_log_write_error_in_the_reader_thread_is_the_step_error(tmp_path, monkeypatch):
    import threading

    from lightcompress.compress import steps
    from lightcompress.compress.cli import _os_error

    class Full:  # the first write (the command line) fits, the command's output does not
        def __init__(self, *a, **k):
            self.writes = 0

        def write(self, text):
            self.writes += 1
            if self.writes > 1:
                raise OSError(28, "No space left on device")

        def flush(self):
            pass

        def __enter__(self):
            return self

        def __exit__(self, *exc):
            return False

    real_open = open
    monkeypatch.setattr(
        steps,
        "open",
        lambda path, *a, **k: Full() if str(path).endswith(".log") else real_open(path, *a, **k),
        raising=False,
    )
    errors = []
    monkeypatch.setattr(threading, "excepthook", errors.append)
    out = tmp_path / "out.txt"
    step = steps.Step(
        "s",
        "a step",
        [[sys.executable, "-c", "print('x\\n' * 1000)"]],
        outputs=[str(out)],
        stdout_to=[None],
    )
    runner = steps.Runner([step], str(tmp_path / "logs"), out=open(os.devnull, "w"))  # noqa: SIM115
    with pytest.raises(OSError) as info:
        runner.run()
    assert errors == [] and info.value.errno == 28
    assert _os_error(info.value).startswith(str(tmp_path / "logs" / "01-s.log"))


def test_dawid_reaches_its_target_in_a_short_run(tiny_data, tiny_transformer, tmp_path):
    """Issue 39 item 6: at 100 updates the gates' scale is raised so that the fused student
    meets the 4x target (before: a student larger than the teacher, and "done"); its training
    goes on with --continue-from (same schedule, a larger --max-update)."""
    save = tmp_path / "dawid"
    proc = _compress(
        [
            _teacher(tiny_transformer),
            "--data",
            tiny_data,
            "-o",
            save,
            "--method",
            "dawid",
            "--max-update",
            "100",
            "--validate-every",
            "50",
            *FAST[4:],
        ]
    )
    assert "the fused student against the target" in proc.stdout
    rows = json.loads((save / "report.json").read_text())["models"]
    t, s = rows["teacher"]["params"], rows["student"]["params"]
    assert s <= t / 4 * 1.02, (s, t)

    # --continue-from: its training goes on from update 100 to 120 in another directory, with
    # the schedule of the first run (--schedule-updates 100), and ends with its own report
    last = save / "student" / "checkpoint_last.pt"
    more = tmp_path / "dawid-more"
    base = [
        _teacher(tiny_transformer),
        "--data",
        tiny_data,
        "--method",
        "dawid",
        "--validate-every",
        "10",
        *FAST[4:],
    ]
    # (stopped once its size step has passed: the steps after it are the first run's, tested)
    cmd = [
        *CMD,
        *map(
            str,
            [
                *base,
                "-o",
                more,
                "--max-update",
                "120",
                "--schedule-updates",
                "100",
                "--continue-from",
                last,
            ],
        ),
    ]
    proc = subprocess.Popen(
        cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=_env()
    )
    header = re.compile(r"^\[compress \d+/\d+ (\S+) ")
    out = ""
    for line in proc.stdout:
        out += line
        step = header.match(line)
        if step and step.group(1) not in ("fine-tune", "fuse", "size"):
            proc.send_signal(signal.SIGTERM)
            break
    rest, err = proc.communicate(timeout=120)
    out += rest
    assert proc.returncode in (0, 128 + signal.SIGTERM), out + err
    assert f"continuing {last} up to 120 updates" in out
    log = (more / "logs" / "01-fine-tune.log").read_text()
    assert f"--continue-once {last}" in log and "--dawid-sparsity-warmup 36 " in log
    assert re.search(r"Loaded checkpoint \S+ \(epoch \d+ @ 100 updates\)", log), log[-3000:]
    assert "num_updates 120" in log
    from lightcompress.compress.checks import count_checkpoint

    assert count_checkpoint(str(more / "student.pt"))["total"] <= t / 4 * 1.02

    # refused in one line, before anything is written: another schedule than the checkpoint's
    # (the command), a budget it has reached, a checkpoint of another model or without
    # optimizer state (the check itself, with the student's flags)
    bad = tmp_path / "refused"
    err = _one_line_error(
        _compress_here([*base, "-o", bad, "--max-update", "120", "--continue-from", last])
    )
    assert err.endswith(
        "was trained with --dawid-distill-updates 7; this command gives 8 (its "
        "schedule: give the first run's --max-update as --schedule-updates)"
    ), err
    assert not bad.exists()
    import torch

    from lightcompress.compress.checks import check_continue_from
    from lightcompress.compress.teacher import CompressError

    state = torch.load(last, map_location="cpu")
    del state["last_optimizer_state"]
    stripped = tmp_path / "stripped.pt"
    torch.save(state, stripped)
    for path, updates, want in (
        (last, 100, "has trained 100 updates already: give a --max-update above 100"),
        (
            _teacher(tiny_transformer),
            120,
            "is a 'transformer' model; this command trains a 'dawid' student",
        ),
        (stripped, 120, "holds no optimizer state: give a training checkpoint"),
    ):
        with pytest.raises(CompressError, match=re.escape(want)):
            check_continue_from(
                str(path), updates, ["--arch", "dawid", "--dawid-distill-updates", "7"]
            )


def test_a_fused_student_above_its_target_is_an_error_with_its_size(tiny_transformer):
    from lightcompress.compress.checks import check_fused_size, dawid_gate_scale
    from lightcompress.compress.teacher import CompressError

    teacher = _teacher(tiny_transformer)  # (a "student" as large as its teacher)
    with pytest.raises(CompressError) as info:
        check_fused_size(teacher, 10_000, 10**9, "4x fewer parameters than the teacher", 20)
    msg = str(info.value)
    assert "fused student has" in msg and "at most 10,000" in msg and "20 updates" in msg
    assert "a larger --max-update, --schedule-updates 20 and --continue-from " in msg
    assert msg.split("--continue-from ")[1].startswith(
        os.path.join(tiny_transformer, "student", "checkpoint_last.pt")
    )
    with pytest.raises(CompressError, match="in 30 updates.*--schedule-updates 20 and"):
        check_fused_size(teacher, 10_000, 10**9, "4x", 30, schedule=20)  # (a continued run)
    with pytest.raises(CompressError, match="more than the teacher's"):
        check_fused_size(teacher, 10**9, 1_000, "at most 1G", 20)
    # short runs get a larger step for the gates; long ones keep the results plan's 150
    scales = [dawid_gate_scale(u, u * 11 // 150, 2e-4, 100) for u in (20, 100, 1000, 20000)]
    assert scales[0] > scales[1] > scales[2] >= scales[3] == 150


def test_continue_from_compares_every_student_flag_the_checkpoint_holds(tmp_path):
    """Switches (no value) and valued flags alike: the same student passes, another rank or a
    switch the checkpoint was trained without is refused."""
    import argparse

    import torch

    from lightcompress.compress.checks import check_continue_from
    from lightcompress.compress.teacher import CompressError

    args = argparse.Namespace(
        arch="lightformer", lc_rank=8, share_all_embeddings=True, encoder_normalize_before=False
    )
    path = tmp_path / "checkpoint_last.pt"
    torch.save(
        {
            "model": {},
            "args": args,
            "optimizer_history": [{"num_updates": 5}],
            "last_optimizer_state": {"state": {}},
        },
        path,
    )
    same = ["--arch", "lightformer", "--share-all-embeddings", "--lc-rank", "8"]
    assert check_continue_from(str(path), 10, same) == str(path)
    for flags, want in (
        (
            ["--arch", "lightformer", "--share-all-embeddings", "--lc-rank", "16"],
            "was trained with --lc-rank 8; this command gives 16",
        ),
        (
            ["--arch", "lightformer", "--encoder-normalize-before", "--lc-rank", "8"],
            "was trained with --encoder-normalize-before False; this command gives True",
        ),
    ):
        with pytest.raises(CompressError, match=re.escape(want)):
            check_continue_from(str(path), 10, flags)


def test_the_speed_report_takes_the_best_run_and_warns_of_a_wide_spread():
    from lightcompress.compress.report import best_rate, spread_warnings

    steady = {"runs": [{"tokens_per_s": r} for r in (100.0, 104.0, 98.0)], "tokens_per_s": 100.7}
    wide = {"runs": [{"tokens_per_s": r} for r in (209.0, 1392.0, 1502.0)], "tokens_per_s": 1034}
    assert best_rate(steady) == 104.0 and best_rate(wide) == 1502.0
    speed = {("teacher", "fairseq", "float32"): steady, ("teacher", "ctranslate2", "int8"): wide}
    (warning,) = spread_warnings(speed)
    assert "teacher [ctranslate2 int8]" in warning and "209.0 to 1502.0" in warning


def test_a_plan_that_wrote_nothing_is_replaced_by_the_corrected_command(
    tiny_data, tiny_transformer, tmp_path, capsys
):
    """A run that failed before its first step wrote anything (its plan.json only) does not
    block the corrected command; one whose steps wrote outputs does."""
    from lightcompress.compress.cli import main

    save = tmp_path / "out"
    save.mkdir()
    (save / "plan.json").write_text(
        json.dumps({"commands": ["lightcompress-convert --energy nan"]})
    )
    args = [_teacher(tiny_transformer), "--data", tiny_data, "-o", str(save), "--rank", "8"]
    assert main([*args, "--dry-run"]) == 0, capsys.readouterr().err
    (save / "student_init.pt").write_bytes(b"")  # (the transfer step's output)
    assert main([*args, "--dry-run"]) == 2
    assert "holds a run with other settings" in capsys.readouterr().err


# distill_data.py with fairseq-generate replaced by a sleeper that prints its pid
DISTILL_SLEEPER = r"""
import sys
from lightcompress.kd import distill
distill._generate_command = lambda args, d: [sys.executable, "-c",
    "import os, sys, time; print(os.getpid(), file=sys.stderr, flush=True); time.sleep(300)"]
sys.exit(distill.cli_main())
"""


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="Linux's parent-death signal")
@pytest.mark.parametrize("sig", ["TERM", "KILL"])
def test_a_stopped_distill_data_leaves_no_translation_running(sig, tiny_data, tmp_path):
    """Issue 40 item 1: SIGTERM (what the step guard sends) ends distill_data's fairseq-generate
    and removes the half-written shard; a SIGKILL ends the generate too (its parent-death
    signal), and the shard compress's next run removes (remove_stale_temp)."""
    import signal
    import time

    teacher = tmp_path / "teacher.pt"
    teacher.write_bytes(b"")  # (not loaded: the sleeper stands in for fairseq-generate)
    work = tmp_path / "kd" / "distill-work"
    proc = subprocess.Popen(
        [
            sys.executable,
            "-c",
            DISTILL_SLEEPER,
            tiny_data,
            "--path",
            str(teacher),
            "--out-dir",
            str(tmp_path / "kd"),
            "--cpu",
        ],
        env=_env(),
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )
    log, deadline = work / "shard0.log", time.monotonic() + 120
    while time.monotonic() < deadline and not (log.exists() and log.read_text().strip()):
        time.sleep(0.05)
    child = int(log.read_text().split()[0])
    assert list(work.glob(".shard0.gen.*.tmp")), sorted(os.listdir(work))
    proc.send_signal(getattr(signal, f"SIG{sig}"))
    proc.wait(timeout=60)
    deadline, status = time.monotonic() + 20, ""
    while time.monotonic() < deadline and os.path.exists(f"/proc/{child}"):
        status = Path(f"/proc/{child}/stat").read_text().rpartition(")")[2].split()[0]
        if status == "Z":  # (ended; its parent, init or a subreaper, reaps it)
            break
        time.sleep(0.05)
    alive = os.path.exists(f"/proc/{child}") and status != "Z"
    if alive:
        os.kill(child, signal.SIGKILL)
    assert not alive, "fairseq-generate outlived distill_data"
    if sig == "TERM":
        assert proc.returncode == 128 + signal.SIGTERM
        assert not list(work.glob(".*.tmp")), sorted(os.listdir(work))
