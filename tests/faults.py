"""Test-only rank entry wrapping ``lightcompress/distributed.py``: fault injection and dumps.

torchrun runs it on every rank instead of the production entry when told to
(``LC_DIST_WORKER=tests/faults.py`` for ``scripts/train_distributed.sh``, ``launch --worker
tests/faults.py``, or ``torchrun ... tests/faults.py ARGS``): ``python tests/faults.py
FAIRSEQ_TRAIN_ARGS`` installs the hooks below on fairseq's ``Trainer`` and then calls the
production rank entry (``lightcompress.distributed.main``, which runs ``run_worker``). Hooks,
set by environment variables:

``LC_DIST_DUMP_DIR``
    at the end of training every rank writes ``DIR/rank{R}.pt``: ``{"model": state_dict,
    "num_updates": n}`` (fairseq saves checkpoints on rank 0 only), to check that all replicas
    end with the same parameters.
``LC_DIST_KILL_RANK`` / ``LC_DIST_KILL_AFTER_UPDATES``
    that rank sends itself SIGKILL after that many updates.
``LC_DIST_UPDATE_DELAY``
    every rank sleeps this many seconds after each update (a slow run, to act on it midway).
``LC_DIST_HOLD_AFTER_UPDATES``
    after that many updates (their log lines and checkpoints written) every rank waits, before
    its next update, until it is killed (at most 300 s): a run to kill at a known point, however
    slow the machine.

Like the production entry, the rank ends when torchrun dies
(``lightcompress.distributed.die_with_launcher``, set up before fairseq is imported).

It is run as a file, and loads ``distributed.py`` by path: the rank must not import the
``lightcompress`` package before fairseq imports it from ``--user-dir`` (a second copy would
clash).
"""

import importlib.util
import os
import signal
import sys
import time

PATH = os.path.abspath(__file__)
REPO_ROOT = os.path.dirname(os.path.dirname(PATH))
ENTRY = os.path.join(REPO_ROOT, "lightcompress", "distributed.py")


def _entry():
    spec = importlib.util.spec_from_file_location("_lc_distributed", ENTRY)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def install_hooks(env=os.environ) -> dict:
    """Patch fairseq's Trainer as the variables say; the returned dict gets the trainer."""
    from fairseq.trainer import Trainer

    seen: dict = {}
    kill_rank = env.get("LC_DIST_KILL_RANK")
    kill_after = int(env.get("LC_DIST_KILL_AFTER_UPDATES", "0") or 0)
    delay = float(env.get("LC_DIST_UPDATE_DELAY", "0") or 0)
    hold_after = int(env.get("LC_DIST_HOLD_AFTER_UPDATES", "0") or 0)
    original_init = Trainer.__init__
    original_step = Trainer.train_step

    def init(self, *args, **kwargs):
        original_init(self, *args, **kwargs)
        seen["trainer"] = self

    def train_step(self, *args, **kwargs):
        if hold_after and self.get_num_updates() >= hold_after:
            end = time.monotonic() + 300
            while time.monotonic() < end:
                time.sleep(0.1)
        result = original_step(self, *args, **kwargs)
        if delay:
            time.sleep(delay)
        if (
            kill_rank is not None
            and self.data_parallel_rank == int(kill_rank)
            and self.get_num_updates() >= kill_after
        ):
            print(
                f"LC_DIST_KILL_RANK: rank {kill_rank} kills itself after "
                f"{self.get_num_updates()} updates",
                flush=True,
            )
            os.kill(os.getpid(), signal.SIGKILL)
        return result

    Trainer.__init__ = init
    Trainer.train_step = train_step
    return seen


def dump_state(trainer, dump_dir: str) -> str:
    """Write the rank's model state and update count to ``DIR/rank{R}.pt``."""
    import torch

    os.makedirs(dump_dir, exist_ok=True)
    state = {k: v.detach().clone() for k, v in trainer.get_model().state_dict().items()}
    rank = os.environ["RANK"]  # torchrun's (the process group is gone by now)
    path = os.path.join(dump_dir, f"rank{rank}.pt")
    torch.save({"model": state, "num_updates": trainer.get_num_updates()}, path)
    return path


def main(argv) -> int:
    entry = _entry()  # the rank entry by path: imports neither fairseq nor the package
    entry.die_with_launcher()  # first: end with torchrun, as the production entry does
    # fairseq_cli.train sets up fairseq-train's log format when imported: before anything
    # else of fairseq configures logging (the tests parse that format)
    import fairseq_cli.train  # noqa: F401

    seen = install_hooks()
    code = entry.main(argv)
    dump_dir = os.environ.get("LC_DIST_DUMP_DIR")
    if code == 0 and dump_dir and "trainer" in seen:
        dump_state(seen["trainer"], dump_dir)
    return code


if __name__ == "__main__":
    # run as a file: tests/ must not shadow top-level modules of the rank
    if sys.path and os.path.abspath(sys.path[0]) == os.path.dirname(PATH):
        sys.path.pop(0)
    sys.exit(main(sys.argv[1:]))
