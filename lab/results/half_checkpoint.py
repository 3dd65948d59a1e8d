#!/usr/bin/env python
"""Pack fairseq checkpoints for a trip between machines, and unpack them: no optimizer state,
float32 weights stored as float16 (a GPU lease brings back at most a few files of 16 MiB; the
results plan's teacher is 30 MB in float32 without its optimizer state).

    python half_checkpoint.py pack SAVE_ROOT OUT NAME [NAME ...]
        SAVE_ROOT/NAME/checkpoint_best.pt -> OUT/NAME.pt
    python half_checkpoint.py unpack OUT SAVE_ROOT
        OUT/NAME.pt -> SAVE_ROOT/NAME/checkpoint_best.pt (float32 again; OUT/logs.tgz, if there,
        extracted into SAVE_ROOT)

The unpacked checkpoint is an ordinary fairseq checkpoint whose weights are the packed ones
rounded to float16 (then exactly representable in float32): every figure taken from it is of
the rounded model. The entry ``lightcompress_half`` lists the weights that were rounded; a
checkpoint with it is refused by ``pack`` (it is a packed one already). Every file is written
atomically; bad input is one line on stderr and exit status 2.
"""

from __future__ import annotations

import argparse
import os
import sys
import tarfile

import torch

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.abspath(os.path.join(HERE, "..", "..")))

from lightcompress.checkpoint import read_checkpoint  # allow-lists fairseq's types
from lightcompress.errors import CheckpointError
from lightcompress.io import atomic_path

MARK = "lightcompress_half"


def _summary(state: dict) -> str:
    history = state.get("optimizer_history") or [{}]
    updates = history[-1].get("num_updates", "?")
    best = (state.get("extra_state") or {}).get("best")
    best = f"{best:.3f}" if isinstance(best, float) else "?"
    return f"{updates} updates, best validation loss {best}"


def _cast(weights: dict, src: torch.dtype, dst: torch.dtype, only: set | None = None):
    """``weights`` with every ``src`` tensor (of ``only``, if given) cast to ``dst``, and the
    names cast. Equal tensors of one shape (a tied table, shared layers) are stored once: on
    a GPU fairseq copies each weight to the CPU for its checkpoint, so that tied weights
    arrive as separate, equal tensors (the teacher's table three times)."""
    seen: dict[tuple, list] = {}  # (shape, stride) -> [(source tensor, cast tensor)]
    names, out = [], {}
    for k, v in weights.items():
        if torch.is_tensor(v) and v.dtype == src and (only is None or k in only):
            same = seen.setdefault((tuple(v.shape), tuple(v.stride())), [])
            for source, cast in same:
                if source is v or torch.equal(source, v):
                    out[k] = cast
                    break
            else:
                out[k] = v.to(dst)
                same.append((v, out[k]))
            names.append(k)
        else:
            out[k] = v
    return out, names


def pack(save_root: str, out: str, names: list[str]) -> None:
    for name in names:
        if not name or "/" in name or name.startswith("."):
            raise ValueError(f"{name!r} is not a model name (a folder of {save_root})")
    os.makedirs(out, exist_ok=True)
    for name in names:
        path = os.path.join(save_root, name, "checkpoint_best.pt")
        state = read_checkpoint(path)
        if MARK in state:
            raise ValueError(f"{path} is packed already (it has the entry {MARK!r})")
        if not isinstance(state.get("model"), dict):
            raise CheckpointError(f"{path} has no model weights")
        state["model"], half = _cast(state["model"], torch.float32, torch.float16)
        state[MARK] = half
        state["last_optimizer_state"] = None
        dst = os.path.join(out, name + ".pt")
        with atomic_path(dst) as tmp:
            torch.save(state, tmp)
        print(
            f"{name}: {_summary(state)}; {len(half)} weights in float16 -> {dst} ({os.path.getsize(dst) / 2**20:.1f} MiB)"
        )


def unpack(out: str, save_root: str) -> None:
    packed = sorted(f for f in os.listdir(out) if f.endswith(".pt"))
    if not packed:
        raise ValueError(f"{out} holds no packed checkpoint (NAME.pt)")
    states = {}
    for f in packed:  # every file checked before anything is written
        path = os.path.join(out, f)
        state = read_checkpoint(path)
        if MARK not in state:
            raise ValueError(
                f"{path} is not a packed checkpoint (no entry {MARK!r}: half_checkpoint.py pack makes them)"
            )
        states[f[: -len(".pt")]] = state
    for name, state in states.items():
        half = set(state.pop(MARK))
        state["model"], _ = _cast(state["model"], torch.float16, torch.float32, only=half)
        os.makedirs(os.path.join(save_root, name), exist_ok=True)
        dst = os.path.join(save_root, name, "checkpoint_best.pt")
        with atomic_path(dst) as tmp:
            torch.save(state, tmp)
        print(f"{name}: {_summary(state)} -> {dst}")
    logs = os.path.join(out, "logs.tgz")
    if os.path.exists(logs):
        with tarfile.open(logs) as tar:
            tar.extractall(save_root, filter="data")
        print(f"logs: {logs} -> {save_root}")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = parser.add_subparsers(dest="command", required=True)
    p = sub.add_parser(
        "pack",
        help="SAVE_ROOT/NAME/checkpoint_best.pt -> OUT/NAME.pt (float16, no optimizer state)",
    )
    p.add_argument("save_root", help="folder of the runs (NAME/checkpoint_best.pt)")
    p.add_argument("out", help="folder for the packed checkpoints")
    p.add_argument("names", nargs="+", help="the runs to pack")
    u = sub.add_parser("unpack", help="OUT/NAME.pt -> SAVE_ROOT/NAME/checkpoint_best.pt (float32)")
    u.add_argument("out", help="folder of packed checkpoints (and logs.tgz)")
    u.add_argument("save_root", help="folder to write NAME/checkpoint_best.pt into")
    args = parser.parse_args(argv)
    try:
        if args.command == "pack":
            pack(args.save_root, args.out, args.names)
        else:
            if not os.path.isdir(args.out):
                raise ValueError(f"{args.out} is not a folder")
            unpack(args.out, args.save_root)
    except (CheckpointError, ValueError, OSError, tarfile.TarError) as exc:
        print(f"half_checkpoint.py: {exc}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
