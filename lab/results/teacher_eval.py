#!/usr/bin/env python
"""teacher.sh's helpers: which configuration is the teacher, and its test scores.

    python teacher_eval.py choose SAVE_ROOT NAME [NAME ...]
        prints the NAME whose train.log has the lowest validation loss (label-smoothed, base 2)
    python teacher_eval.py score SAVE_DIR REF
        SAVE_DIR/generate-test.txt against REF (raw references, one per line): sacreBLEU and
        chrF with signatures, the training's updates, best update and validation loss, and the
        validation curve, into SAVE_DIR/test.json

Bad input is one line on stderr and exit status 2.
"""

from __future__ import annotations

import json
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

from collect import CollectError, _training, model_record, read_refs
from plot_curves import LogError, parse_log


def choose(save_root: str, names: list[str]) -> str:
    best = {}
    for name in names:
        info = _training(os.path.join(save_root, name))
        if info["best_valid_loss"] is None:
            raise CollectError(f"{save_root}/{name}/train.log: no validation loss")
        best[name] = info["best_valid_loss"]
    return min(best, key=best.get)


def score(save_dir: str, ref: str) -> dict:
    rec = model_record(
        save_dir, "teacher", "transformer", "trained from scratch", read_refs(ref), ref
    )
    try:
        rec["valid_curve"] = parse_log(os.path.join(save_dir, "train.log"))["valid"]
    except LogError as exc:
        raise CollectError(str(exc)) from None
    done = os.path.join(save_dir, "train.done")
    rec["stopped"] = None
    if os.path.exists(done):
        with open(done, encoding="utf-8") as f:
            rec["stopped"] = f.read().strip()
    tmp = os.path.join(save_dir, "test.json.tmp")
    with open(tmp, "w", encoding="utf-8") as f:
        json.dump(rec, f, indent=1)
        f.write("\n")
    os.replace(tmp, os.path.join(save_dir, "test.json"))
    return rec


def main(argv: list[str]) -> int:
    try:
        if len(argv) >= 3 and argv[0] == "choose":
            print(choose(argv[1], argv[2:]))
        elif len(argv) == 3 and argv[0] == "score":
            rec = score(argv[1], argv[2])
            print(
                f"BLEU {rec['bleu']:.2f} chrF {rec['chrf']:.2f} best valid loss "
                f"{rec['best_valid_loss']} at update {rec['best_update']}",
                file=sys.stderr,
            )
        else:
            print(
                "usage: teacher_eval.py choose SAVE_ROOT NAME [NAME ...] | score SAVE_DIR REF",
                file=sys.stderr,
            )
            return 2
    except (CollectError, OSError) as exc:
        print(f"teacher_eval.py: {exc}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
