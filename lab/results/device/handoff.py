"""Hand converged-plan rows' trainings to a lent GPU (the device tool) and take them back.

Here, with each row's lane stopped right after a checkpoint (converged.py's options may follow)::

    python lab/results/device/handoff.py send ROW [ROW ...] [--carry .gpu]

writes each row's own fairseq-train arguments (its paths made relative, ``--cpu`` left out) and
its last checkpoint (pack.py: the model in float32, Adam's moments in bfloat16) to
``CARRY/state/ROW/``. A fairseq-train row not started here (``subformer``,
``teacher_control``, ``lightformer_random``: converged.py's SCRATCH rows) is sent without a
checkpoint and starts from update 0 there (its ``--finetune-from-model``, e.g. the shipped
teacher, read from the checkout); the KD data a row reads is packed once into
``CARRY/kd.tar.xz`` and the data-bin into ``CARRY/bin.tar.xz`` (where it is not there yet). The
carried folder also needs ``site.tar.xz`` (fairseq) as README.md here says. On the device machine (the tool runs in the repository
root; what is written under ``$OUT`` comes back)::

    python3 lab/results/device/handoff.py train [--carry .gpu] [--secs 450]

trains every sent row side by side (one fairseq-train each) until it stops by itself (patience,
``--max-update``) or after ``--secs`` more seconds of training (fairseq's
``--stop-time-hours``: it validates and saves), and writes ``$OUT/ROW/`` (``train.log``,
``result.json`` and the checkpoints the row needs next) as soon as that row's training ends:
rows that ended first (only the model the row reads next), then the others' states while the
tool's 64 MiB allow (a row without room says so in its result.json). Back here, each lane still
stopped::

    python lab/results/device/handoff.py receive ROW FILES_AT

puts them into the row's save directory (the CPU's last checkpoint kept next to them), appends
the device's log to the row's fairseq log after a ``[converged] device: NAME from update N``
line (converged.py counts each device's updates at its own speed) and, where the training
ended, marks its step done. Restarting the lane then scores the row, or trains on from there.

Bad input is one line on stderr and exit status 2.
"""

import argparse
import datetime
import glob
import json
import os
import shlex
import shutil
import subprocess
import sys
import tarfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(os.path.dirname(HERE)))
sys.path.insert(0, HERE)
import pack

LIMIT = 60 * 2**20  # what the checkpoints sent back may take (the tool returns at most 64 MiB)
CARRY_LIMIT = int(
    float(os.environ.get("HANDOFF_CARRY_MIB", "63")) * 2**20
)  # the tree + carried folder


class HandoffError(Exception):
    pass


def _load(path):
    import torch

    return torch.load(path, map_location="cpu", weights_only=False)


def _updates(path) -> int:
    return int(_load(path)["optimizer_history"][-1]["num_updates"])


# -- here: send -------------------------------------------------------------------------------
def _plan(rest, row):
    """converged.py's plan with its options ``rest``, for the row ``row`` (refused if unknown)."""
    sys.path.insert(0, os.path.dirname(HERE))
    import converged

    if row not in converged.ROWS:
        raise HandoffError(f"no row {row!r}: the rows are {', '.join(converged.ROWS)}")
    opts = converged.get_parser().parse_intermixed_args(["status", *rest])
    return converged, converged.Plan(opts)


def train_args(converged, plan, row: str) -> tuple[list[str], str]:
    """The row's fairseq-train arguments as its lane runs them, and the row's fairseq log."""
    save = plan.save(row)
    if row in converged.SCRATCH:
        return plan.scratch_train(row), os.path.join(save, "train.log")
    doc = os.path.join(save, "plan.json")
    if not os.path.exists(doc):
        raise HandoffError(f"{row}: no compress plan ({doc}): start the row here first")
    with open(doc, encoding="utf-8") as f:
        cmds = [shlex.split(c) for c in json.load(f)["commands"]]
    train = [c for c in cmds if any(a.endswith(("fairseq-train", "fairseq_cli.train")) for a in c)]
    if not train:
        raise HandoffError(f"{row}: its compress plan ({doc}) has no fairseq-train command")
    return train[0], converged.fine_tune_log(save)


def portable(
    cmd: list[str], data_bin: str, fresh: bool = False, kd: str | None = None
) -> list[str]:
    """``cmd``'s arguments after fairseq-train with placeholders for the machine's paths:
    ``{BIN}`` the data-bin, ``{SAVE}`` the save directory, ``{REPO}`` the checkout the command
    names (its --user-dir's parent), ``{KD}`` the KD data-bin ``kd`` (carried as kd.tar.xz);
    ``--cpu`` left out, and ``--finetune-from-model`` unless the row starts there (``fresh``):
    fairseq reads it only when the save directory has no checkpoint_last.pt, and a resumed row's
    has. Any other absolute path is refused."""
    at = next(
        (i for i, a in enumerate(cmd) if a.endswith(("fairseq-train", "fairseq_cli.train"))), None
    )
    if at is None:
        raise HandoffError(f"not a fairseq-train command: {shlex.join(cmd[:3])} ...")
    args = cmd[at + 1 :]
    if "--user-dir" not in args or "--save-dir" not in args:
        raise HandoffError("the fairseq-train command has no --user-dir or --save-dir")
    repo = os.path.dirname(os.path.normpath(args[args.index("--user-dir") + 1]))
    out, skip = [], False
    for i, a in enumerate(args):
        if skip:
            skip = False
            continue
        if a == "--cpu":
            continue
        if a == "--finetune-from-model" and not fresh:
            skip = True
            continue
        if a == "--save-dir":
            out += [a, "{SAVE}"]
            skip = True
        elif os.path.normpath(a) == os.path.normpath(data_bin):
            out.append("{BIN}")
        elif kd and os.path.normpath(a) == os.path.normpath(kd):
            out.append("{KD}")
        elif a.startswith(repo + os.sep):
            out.append("{REPO}/" + os.path.relpath(a, repo))
        elif os.path.isabs(a):
            raise HandoffError(f"argument {i + 1} ({a}) is a path the device machine lacks")
        else:
            out.append(a)
    return out


KD_FILES = ("dict.", "train.")  # what a KD data-bin needs there (not its distill-work/)


def _pack_kd(kd: str, carry: str) -> None:
    """``kd`` (a KD data-bin) as ``CARRY/kd.tar.xz`` (its folder ``kd``), once: another KD folder
    than the one packed is refused."""
    tar, mark = os.path.join(carry, "kd.tar.xz"), os.path.join(carry, "kd.from")
    if os.path.exists(tar) and os.path.exists(mark):
        with open(mark, encoding="utf-8") as f:
            if f.read().strip() == os.path.abspath(kd):
                return
    if any(
        os.path.exists(os.path.join(carry, "state", r, "row.json")) and _row_kd(carry, r)
        for r in _sent_rows(carry)
    ):
        raise HandoffError(
            f"{carry} carries another KD data-bin already: send the rows that read "
            f"{kd} in a carry of their own"
        )
    os.makedirs(carry, exist_ok=True)
    with tarfile.open(tar, "w:xz") as t:
        for name in sorted(os.listdir(kd)):
            if name.startswith(KD_FILES):
                t.add(os.path.join(kd, name), arcname=f"kd/{name}")
    with open(mark, "w", encoding="utf-8") as f:
        f.write(os.path.abspath(kd) + "\n")


def _sent_rows(carry: str) -> list[str]:
    state = os.path.join(carry, "state")
    if not os.path.isdir(state):
        return []
    return sorted(
        r for r in os.listdir(state) if os.path.exists(os.path.join(state, r, "row.json"))
    )


def _row_kd(carry: str, row: str) -> bool:
    with open(os.path.join(carry, "state", row, "row.json"), encoding="utf-8") as f:
        return "{KD}" in json.load(f)["args"]


def send(rows: list[str], carry: str, rest: list[str]) -> None:
    tar = os.path.join(carry, "bin.tar.xz")
    if not os.path.exists(tar):  # the data-bin the rows train on (folder bin/ there)
        _, plan = _plan(rest, rows[0])
        if not os.path.isdir(plan.bin):
            raise HandoffError(f"{plan.bin}: no data-bin to carry (converged.py's --data-dir)")
        os.makedirs(carry, exist_ok=True)
        with tarfile.open(tar + ".tmp", "w:xz") as t:
            t.add(plan.bin, arcname="bin")
        os.replace(tar + ".tmp", tar)
        print(f"{tar}: the data-bin ({os.path.getsize(tar) / 2**20:.1f} MiB)")
    for row in rows:
        send_one(row, carry, rest)


def send_one(row: str, carry: str, rest: list[str]) -> None:
    converged, plan = _plan(rest, row)
    save = plan.save(row)
    with converged._RowLock(save, row) as lock:
        if not lock.held:
            raise HandoffError(f"{row}: a lane is training it: stop it right after a checkpoint")
        cmd, log = train_args(converged, plan, row)
        last = os.path.join(args_value(cmd, "--save-dir"), "checkpoint_last.pt")
        fresh = not os.path.exists(last)
        if fresh and row not in converged.SCRATCH:
            raise HandoffError(
                f"{row}: no checkpoint to continue from ({last}); only a "
                "fairseq-train row starts there from update 0"
            )
        if os.path.exists(os.path.join(os.path.dirname(last), "train.done")):
            raise HandoffError(
                f"{row}: its training has ended ({os.path.dirname(last)}/train.done)"
            )
        kd = args_value(cmd, "--kd-distilled-data") if "--kd-distilled-data" in cmd else None
        if kd and not os.path.isdir(kd):
            raise HandoffError(
                f"{row}: its KD data ({kd}) is not here yet: make it first "
                f"(converged.py run {row} makes it, then stop the lane)"
            )
        args = portable(cmd, plan.bin, fresh=fresh, kd=kd)
        if kd:
            _pack_kd(kd, carry)
        state = os.path.join(carry, "state", row)
        shutil.rmtree(state, ignore_errors=True)
        os.makedirs(state)
        dropped = False
        if not fresh:
            pack.pack(last, os.path.join(state, "ckpt"))
        tree, budget = _tree_bytes(), CARRY_LIMIT
        if not fresh and tree + _folder_bytes(carry) > budget:  # Adam's first moment: zeros there
            dropped = True
            for p in glob.glob(os.path.join(state, "ckpt.part*")):
                os.remove(p)
            pack.pack(last, os.path.join(state, "ckpt"), exp_avg=False)
            print(
                f"{row}: Adam's first moment left out (the working tree, {tree / 2**20:.1f} "
                f"MiB, and {carry} would exceed {budget / 2**20:.0f} MiB)"
            )
        if tree + _folder_bytes(carry) > budget:
            shutil.rmtree(state)
            raise HandoffError(
                f"the working tree ({tree / 2**20:.1f} MiB) and {carry} "
                f"({_folder_bytes(carry) / 2**20:.1f} MiB) exceed the tool's "
                f"{budget / 2**20:.0f} MiB: empty large files the device does "
                "not need for the call (git checkout restores them)"
            )
        doc = {
            "row": row,
            "args": args,
            "from_update": 0 if fresh else _updates(last),
            "fresh": fresh,
            "final": "checkpoint_last.pt" if row == "dawid" else "checkpoint_best.pt",
            "log": os.path.relpath(log, save),
            "sent": _now(),
            "sent_without_exp_avg": dropped,
        }
        with open(os.path.join(state, "row.json"), "w", encoding="utf-8") as f:
            json.dump(doc, f, indent=1)
    print(
        f"{row}: update {doc['from_update']:,}"
        + (" (starts there)" if fresh else "")
        + f" and its arguments in {state}; {carry} holds "
        f"{_folder_bytes(carry) / 2**20:.1f} MiB, the working tree {_tree_bytes() / 2**20:.1f} "
        f"MiB (the tool takes {CARRY_LIMIT / 2**20:.0f} MiB in all)"
    )


def _folder_bytes(folder: str) -> int:
    return sum(
        os.path.getsize(p)
        for p in glob.glob(os.path.join(folder, "**"), recursive=True)
        if os.path.isfile(p)
    )


def _tree_bytes() -> int:
    """What the device tool copies of this checkout: tracked and untracked, not ignored, files."""
    r = subprocess.run(
        ["git", "-C", REPO, "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
        capture_output=True,
        check=True,
    )
    paths = [os.path.join(REPO, p) for p in r.stdout.decode().split("\0") if p]
    return sum(os.path.getsize(p) for p in paths if os.path.isfile(p))


def args_value(cmd: list[str], flag: str) -> str:
    return cmd[cmd.index(flag) + 1]


def _now() -> str:
    return datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%d %H:%M UTC")


# -- the device machine: train ----------------------------------------------------------------
def _device_name() -> str:
    import torch

    if not torch.cuda.is_available():
        return "this machine"
    n = torch.cuda.device_count()
    return f"{'one' if n == 1 else n} {torch.cuda.get_device_name(0)}"


def _extract(tar: str, into: str) -> None:
    with tarfile.open(tar) as t:
        t.extractall(into, filter="data")


def train(carry: str, secs: float, work: str, out: str, poll: float = 2.0) -> list[dict]:
    """Every row sent to ``carry`` trained side by side; each row's results under ``OUT/ROW``
    as soon as its training ends (see the module docstring). Returns their result.json."""
    rows = _sent_rows(carry)
    if not rows:
        raise HandoffError(f"{carry}/state holds no sent row (handoff.py send ROW first)")
    os.makedirs(work, exist_ok=True)
    os.makedirs(out, exist_ok=True)
    env = dict(os.environ, PYTHONUNBUFFERED="1")
    if os.path.exists(os.path.join(carry, "site.tar.xz")):
        _extract(os.path.join(carry, "site.tar.xz"), os.path.join(work, "site"))
        env["PYTHONPATH"] = os.pathsep.join(
            p for p in (os.path.join(work, "site"), env.get("PYTHONPATH")) if p
        )
    _extract(os.path.join(carry, "bin.tar.xz"), work)
    if os.path.exists(os.path.join(carry, "kd.tar.xz")):
        _extract(os.path.join(carry, "kd.tar.xz"), work)
    runs = {row: _start(row, carry, secs, work, out, env) for row in rows}
    results, later = {}, []
    while len(results) + len(later) < len(runs):  # each row as it ends
        for row, run in runs.items():
            if row in results or row in later or run["proc"].poll() is None:
                continue
            run["log"].close()
            res = _result(run)
            if res["ended"] or res["exit"]:
                results[row] = _send_back(run, res, out)
            else:
                later.append(row)  # (its state: once every row has ended, while there is room)
        time.sleep(poll)
    for row in later:
        results[row] = _send_back(runs[row], _result(runs[row]), out)
    return [results[row] for row in rows]


def _start(row: str, carry: str, secs: float, work: str, out: str, env: dict) -> dict:
    """Start ``row``'s fairseq-train (its own save directory under ``work``, its log in
    ``OUT/ROW/train.log``) for at most ``secs`` more seconds of training."""
    state = os.path.join(carry, "state", row)
    with open(os.path.join(state, "row.json"), encoding="utf-8") as f:
        doc = json.load(f)
    save = os.path.join(work, row, "save")
    os.makedirs(save, exist_ok=True)
    last = os.path.join(save, "checkpoint_last.pt")
    before = 0.0
    if not doc.get("fresh"):
        pack.unpack(os.path.join(state, "ckpt"), last)
        before = _load(last)["extra_state"]["previous_training_time"]
    subs = {
        "{BIN}": os.path.join(work, "bin"),
        "{SAVE}": save,
        "{REPO}": REPO,
        "{KD}": os.path.join(work, "kd"),
    }
    args = []
    for a in doc["args"]:
        for k, v in subs.items():
            a = a.replace(k, v)
        args.append(a)
    cmd = [
        sys.executable,
        "-m",
        "fairseq_cli.train",
        *args,
        "--stop-time-hours",
        f"{(before + secs) / 3600:.6f}",
    ]
    os.makedirs(os.path.join(out, row), exist_ok=True)
    log = open(os.path.join(out, row, "train.log"), "w", encoding="utf-8")  # noqa: SIM115
    proc = subprocess.Popen(cmd, env=env, stdout=log, stderr=subprocess.STDOUT, text=True)
    print(
        f"[handoff] {row}: from update {doc['from_update']:,}, at most {secs:.0f} s more",
        flush=True,
    )
    return {
        "row": row,
        "doc": doc,
        "proc": proc,
        "log": log,
        "save": save,
        "args": args,
        "t0": time.monotonic(),
    }


def _result(run: dict) -> dict:
    doc, save = run["doc"], run["save"]
    rc = run["proc"].wait()
    with open(run["log"].name, encoding="utf-8", errors="replace") as f:
        text = f.read()
    last, best = (os.path.join(save, n) for n in ("checkpoint_last.pt", "checkpoint_best.pt"))
    at = _updates(last) if os.path.exists(last) else None
    ended = "early stop" in text or (
        "done training" in text
        and at is not None
        and at >= int(args_value(run["args"], "--max-update"))
    )
    res = {
        "row": doc["row"],
        "device": _device_name(),
        "exit": rc,
        "from_update": doc["from_update"],
        "fresh": bool(doc.get("fresh")),
        "last_update": at,
        "best_update": _updates(best) if os.path.exists(best) else None,
        "ended": ended,
        "seconds": round(time.monotonic() - run["t0"], 1),
        "final": doc["final"],
        "sent_without_exp_avg": doc.get("sent_without_exp_avg", False),
        "files": {},
    }
    if rc != 0:
        res["error"] = (text.strip().splitlines() or ["(no output)"])[-1][-300:]
    valid = [ln for ln in text.splitlines() if "| valid |" in ln]
    print(
        f"[handoff] {doc['row']}: exit {rc}, update {at}, "
        + ("ended" if ended else "stopped by --secs")
        + (f"; {valid[-1][-160:]}" if valid else ""),
        flush=True,
    )
    return res


def _send_back(run: dict, res: dict, out: str) -> dict:
    """The row's checkpoints under ``OUT/ROW`` while all of ``OUT`` stays within the tool's
    limit: an ended row only the model the row reads next; another its last state (Adam's first
    moment left out where that fits and the whole does not) and a better best model."""
    save, mine = run["save"], os.path.join(out, res["row"])
    last = os.path.join(save, "checkpoint_last.pt")

    def fits():
        return _size(out) <= LIMIT

    def drop(key):
        for p in glob.glob(os.path.join(mine, f"{key}.part*")):
            os.remove(p)

    if res["exit"] != 0 or res["last_update"] is None:
        pass
    elif res["ended"]:  # only the checkpoint the row reads next, model only
        final = os.path.join(save, res["final"])
        if os.path.exists(final):
            pack.model_only(final, os.path.join(mine, "final"))
            if fits():
                res["files"]["final"] = res["final"]
            else:
                drop("final")
                res["no_room"] = True
    else:  # the last with its optimizer (to train on), and a new best, model only
        pack.pack(last, os.path.join(mine, "last"))
        if not fits():  # Adam's first moment restarts from zeros (pack.py unpack)
            drop("last")
            pack.pack(last, os.path.join(mine, "last"), exp_avg=False)
            res["no_exp_avg"] = True
        if fits():
            res["files"]["last"] = "checkpoint_last.pt"
            best = os.path.join(save, "checkpoint_best.pt")
            if res["best_update"] is not None and res["best_update"] != res["last_update"]:
                pack.model_only(best, os.path.join(mine, "best"))
                if fits():
                    res["files"]["best"] = "checkpoint_best.pt"
                else:
                    drop("best")
        else:
            drop("last")
            res["no_room"] = True
    with open(os.path.join(mine, "result.json"), "w", encoding="utf-8") as f:
        json.dump(res, f, indent=1)
    print(json.dumps({k: v for k, v in res.items() if k != "files"}), flush=True)
    return res


def _size(folder: str) -> int:
    return sum(os.path.getsize(p) for p in glob.glob(os.path.join(folder, "*")))


# -- here: receive ----------------------------------------------------------------------------
def receive(row: str, back: str, rest: list[str]) -> None:
    converged, plan = _plan(rest, row)
    if os.path.exists(os.path.join(back, row, "result.json")):  # (FILES_AT: a folder per row)
        back = os.path.join(back, row)
    try:
        with open(os.path.join(back, "result.json"), encoding="utf-8") as f:
            res = json.load(f)
    except (OSError, ValueError) as exc:
        raise HandoffError(f"{back}: no readable result.json ({exc})") from None
    if res.get("row") != row:
        raise HandoffError(f"{back} holds the row {res.get('row')!r}, not {row!r}")
    if res.get("exit"):
        raise HandoffError(f"fairseq-train failed on the device: {res.get('error')}")
    if res.get("no_room"):
        raise HandoffError(
            f"{row}: its checkpoints did not fit in what the tool sends back: "
            f"nothing taken (its log: {back}/train.log)"
        )
    save = plan.save(row)
    with converged._RowLock(save, row) as lock:
        if not lock.held:
            raise HandoffError(f"{row}: a lane is training it: stop it before receiving")
        cmd, log = train_args(converged, plan, row)
        ckpts = args_value(cmd, "--save-dir")
        if row in converged.SCRATCH:  # (the state directory is this training's: train.cmd)
            try:
                plan.own_state(row, save, cmd)
            except converged.PlanError as exc:
                raise HandoffError(f"{exc}: nothing taken") from None
        os.makedirs(ckpts, exist_ok=True)
        mine = os.path.join(ckpts, "checkpoint_last.pt")
        here = _updates(mine) if os.path.exists(mine) else 0
        if here != res["from_update"]:
            raise HandoffError(
                f"{row}: its checkpoint here is at update {here:,}, the device "
                f"went on from {res['from_update']:,}: nothing taken"
            )
        for key, name in res["files"].items():
            if not glob.glob(os.path.join(back, f"{key}.part*")):
                raise HandoffError(f"{back}: {key}.part* did not come back: nothing taken")
        for key, name in res["files"].items():  # this machine's copy kept as NAME.cpu-N.pt
            target = os.path.join(ckpts, name)
            if os.path.exists(target):
                os.replace(target, f"{target[: -len('.pt')]}.cpu-{here}.pt")
            pack.unpack(os.path.join(back, key), target)
        with open(os.path.join(back, "train.log"), encoding="utf-8", errors="replace") as f:
            device_log = f.read()
        stopped = (
            "stopped by itself"
            if res["ended"]
            else f"stopped by --stop-time-hours after {res['seconds']:.0f} s"
        )
        os.makedirs(os.path.dirname(log), exist_ok=True)
        with open(log, "a", encoding="utf-8") as f:
            f.write(
                f"[converged] updates {res['from_update']:,} -> {res['last_update']:,} ran on "
                f"{res['device']} (lab/results/device/handoff.py, received "
                f"{_now()}): the row's fairseq-train arguments without --cpu, "
                + ("started there" if res.get("fresh") else "resumed from its checkpoint_last.pt")
                + (
                    " (sent without Adam's first moment: the size limit; it restarted from zeros)"
                    if res.get("sent_without_exp_avg")
                    else ""
                )
                + f", {stopped}; came back: {', '.join(res['files'].values()) or 'nothing new'}"
                + (
                    " (without Adam's first moment: the size limit)"
                    if res.get("no_exp_avg")
                    else ""
                )
                + ".\n"
            )
            f.write(f"[converged] device: {res['device']} from update {res['from_update']}\n")
            f.write(device_log if device_log.endswith("\n") else device_log + "\n")
            if not res["ended"]:  # the lines a lane appends next are this machine's again
                f.write(f"[converged] device: this machine from update {res['last_update']}\n")
        if res["ended"]:  # the marker converged.py (scratch rows) or compress writes after it
            with open(os.path.join(ckpts, "train.done"), "w", encoding="utf-8") as f:
                f.write(
                    "fairseq-train ended\n"
                    if row in converged.SCRATCH
                    else time.strftime("%Y-%m-%d %H:%M:%S\n")
                )
    print(
        f"{row}: update {res['last_update']:,} from {res['device']} in {ckpts}"
        + (
            "; its training ended: restart the lane to score it"
            if res["ended"]
            else "; restart the lane to train on"
        )
    )


def main(argv=None) -> int:
    p = argparse.ArgumentParser(prog="handoff.py", description=__doc__.split("\n\n")[0])
    sub = p.add_subparsers(dest="cmd", required=True)
    s = sub.add_parser("send", help="here: pack stopped rows' states into the carried folder")
    s.add_argument("rows", nargs="+", metavar="ROW")
    t = sub.add_parser(
        "train",
        help="on the device machine: train every sent row side by side, results under $OUT/ROW",
    )
    t.add_argument(
        "--secs",
        type=float,
        default=450,
        help="at most this many more seconds of training (default 450)",
    )
    t.add_argument("--work", default="/tmp/lc-handoff", help="unpacked state (default %(default)s)")
    r = sub.add_parser("receive", help="here: take the device's results back into the row")
    r.add_argument("row")
    r.add_argument(
        "back",
        help="the folder the tool put the files from $OUT in (files_at; its ROW/ folder is read)",
    )
    for q in (s, t, r):
        q.add_argument("--carry", default=".gpu", help="the carried folder (default .gpu)")
    a, rest = p.parse_known_args(argv)
    try:
        if a.cmd == "train":
            if rest:
                raise HandoffError(f"unknown arguments: {' '.join(rest)}")
            out = os.environ.get("OUT")
            if not out:
                raise HandoffError("train runs on the device machine: $OUT is not set")
            res = train(a.carry, a.secs, a.work, out)
            return 1 if any(r["exit"] for r in res) else 0
        if a.cmd == "send":
            send(a.rows, a.carry, rest)
        else:
            receive(a.row, a.back, rest)
    except (HandoffError, OSError) as exc:
        print(f"handoff.py: error: {exc}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
