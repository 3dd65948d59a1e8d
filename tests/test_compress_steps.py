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
