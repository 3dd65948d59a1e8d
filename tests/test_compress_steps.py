"""lightcompress.compress.steps.Runner: a step called in compress's own process writes its output,
logging records included, to its log and not to the console."""

import io
import logging
import sys

from lightcompress.compress.steps import Runner, Step, StepFailed


def test_an_in_process_step_logs_to_its_log_not_the_console(tmp_path, capfd):
    # a handler on the real standard error, as logging.basicConfig makes before the step runs
    root = logging.getLogger()
    before = root.handlers[:], root.level, logging.root.manager.disable
    console = logging.StreamHandler(sys.__stderr__)
    root.handlers, root.level = [console], logging.INFO
    logging.disable(logging.NOTSET)  # (another test of this process may have silenced INFO)

    def call(argv):
        logging.getLogger("fairseq.tasks.translation").info("[de] dictionary: 8080 types")
        print("printed", argv)
        print("to stderr", file=sys.stderr)
        return 0

    out = io.StringIO()
    step = Step(
        "int8",
        "the int8 step",
        commands=[["python", "-m", "lightcompress.x", "--a"]],
        outputs=[str(tmp_path / "done")],
        call=call,
    )
    try:
        Runner([step], str(tmp_path / "logs"), out=out)._call(
            1, step, step.commands[0], str(tmp_path / "int8.log")
        )
        # the console handler is back afterwards, the step's handler gone
        assert root.handlers == [console] and root.level == logging.INFO
    finally:
        root.handlers, root.level = before[:2]
        logging.disable(before[2])
    console_out, console_err = capfd.readouterr()
    assert "dictionary" not in console_err + console_out and "printed" not in console_out
    log = (tmp_path / "int8.log").read_text()
    assert log.splitlines() == [
        "$ python -m lightcompress.x --a",
        "INFO:fairseq.tasks.translation:[de] dictionary: 8080 types",
        "printed ['--a']",
        "to stderr",
    ]
    assert "(in this process; log: " in out.getvalue()


def test_a_failing_in_process_step_names_its_last_logged_line(tmp_path):
    def call(argv):
        logging.getLogger("lightcompress").error("the probe batch moved by 40 %")
        return 3

    step = Step("int8", "the int8 step", commands=[["python", "-m", "lightcompress.x"]], call=call)
    runner = Runner([step], str(tmp_path / "logs"), out=io.StringIO())
    try:
        runner._call(1, step, step.commands[0], str(tmp_path / "int8.log"))
    except StepFailed as exc:
        msg = str(exc)
    else:
        raise AssertionError("no StepFailed")
    assert (
        "int8: lightcompress.x failed (exit 3): ERROR:lightcompress:the probe batch moved by 40 %"
        in msg
    )


def test_a_console_script_step_is_called_with_its_arguments_and_named_by_its_script(tmp_path):
    got = []

    def call(argv):
        got.append(argv)
        print("lightcompress-shortlist: error: no train split", file=sys.stderr)
        return 2

    cmd = ["/venv/bin/lightcompress-shortlist", "--data", "bin", "-o", "s.txt"]
    step = Step("shortlist", "the shortlist", commands=[cmd], call=call)
    runner = Runner([step], str(tmp_path / "logs"), out=io.StringIO())
    try:
        runner._call(4, step, cmd, str(tmp_path / "04-shortlist.log"))
    except StepFailed as exc:
        msg = str(exc)
    else:
        raise AssertionError("no StepFailed")
    assert got == [["--data", "bin", "-o", "s.txt"]]
    assert msg.startswith(
        "shortlist: lightcompress-shortlist failed (exit 2): lightcompress-shortlist: error: "
        "no train split; see "
    ), msg


def test_a_signal_during_an_in_process_step_stops_the_run_and_the_step_state_is_put_back(
    tmp_path,
):
    """Ctrl-C / SIGTERM during a called step is the run's Interrupted (not a failed step), also
    where the step catches it and returns an error status; the process's torch settings and
    working directory the step changed are put back."""
    import os

    import pytest
    import torch

    from lightcompress.compress.steps import Interrupted

    runner = Runner([], str(tmp_path / "logs"), out=io.StringIO())
    threads, cwd = torch.get_num_threads(), os.getcwd()

    def call(argv):
        torch.set_num_threads(threads + 1)
        torch.set_grad_enabled(False)
        os.chdir(tmp_path)
        try:
            runner.stop(15)  # (what the SIGTERM handler calls)
        except BaseException:  # noqa: BLE001  (a step's own catch-all error handling)
            return 2
        return 0

    step = Step("export", "the export", commands=[["lightcompress-export-onnx"]], call=call)
    with pytest.raises(Interrupted) as info:
        runner._call(5, step, step.commands[0], str(tmp_path / "05-export.log"))
    assert info.value.signum == 15
    assert torch.get_num_threads() == threads and torch.is_grad_enabled()
    assert os.getcwd() == cwd


def test_a_rerun_removes_what_a_killed_in_process_step_left(tmp_path):
    from lightcompress.compress.steps import remove_stale_temp

    (tmp_path / "plan.json").write_text("{}")
    left = [
        tmp_path / ".student_init.pt.x1.tmp",  # (atomic_write's temporary file)
        tmp_path / ".student-ct2.x2.tmp",  # (atomic_directory's)
        tmp_path / ".onnx-export-x3",  # (the ONNX exporter's working folder)
    ]
    left[0].write_bytes(b"")
    for folder in left[1:]:
        folder.mkdir()
        (folder / "model.onnx").write_bytes(b"")
    (tmp_path / "student-onnx").mkdir()
    (tmp_path / "student-onnx" / "MANIFEST.sha256").write_text("")
    assert sorted(remove_stale_temp(str(tmp_path))) == sorted(map(str, left))
    assert sorted(p.name for p in tmp_path.iterdir()) == ["plan.json", "student-onnx"]


def test_an_in_process_step_shows_its_last_line_every_heartbeat(tmp_path):
    """As a command's step does: ``running: LINE`` with the step's last informative line."""
    import time

    def call(argv):
        print("[distill] shard 0 (1/1): 500/1,000 sentences (50%)")
        time.sleep(0.5)
        return 0

    out = io.StringIO()
    step = Step("kd", "the KD data", commands=[["python", "-m", "lightcompress.x"]], call=call)
    log = tmp_path / "02-kd.log"
    log.write_text("$ python -m lightcompress.x\nan earlier run's last line\n")
    runner = Runner([step], str(tmp_path / "logs"), out=out, heartbeat=0.1)
    runner._call(2, step, step.commands[0], str(log))
    beats = [ln for ln in out.getvalue().splitlines() if "] running: " in ln]
    assert beats and all(
        ln.endswith("running: [distill] shard 0 (1/1): 500/1,000 sentences (50%)") for ln in beats
    ), out.getvalue()
