"""The LightFormer rank whose model is as large as a fused DA-WID model (for a same-size
comparison): prints the ``--lc-rank`` of ``--arch`` (default lightformer_iwslt_de_en, its other
settings at the preset's values) whose total parameter count is closest to the fused model's.

    python lightformer_rank.py --shapes fused.pt.shapes.json --vocab-size 10152
"""

import argparse
import json
import logging
import os
import sys


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument(
        "--shapes", required=True, help="OUTPUT.shapes.json of lightcompress-convert dawid-fuse"
    )
    p.add_argument("--vocab-size", type=int, required=True, help="joined dictionary size")
    p.add_argument("--arch", default="lightformer_iwslt_de_en")
    p.add_argument("--max-rank", type=int, default=512)
    args = p.parse_args(argv)
    if not os.path.isfile(args.shapes):
        print(f"lightformer_rank: error: {args.shapes} not found", file=sys.stderr)
        return 2
    logging.disable(logging.WARNING)
    from lightcompress.measure.params import report
    from lightcompress.measure.specs import ParamsError

    with open(args.shapes) as f:
        shapes = json.load(f)
    try:
        target = report("dawid_fused", args.vocab_size, ["--dawid-shapes", json.dumps(shapes)])[
            "total"
        ]

        def total(rank):
            return report(args.arch, args.vocab_size, ["--lc-rank", str(rank)])["total"]

        lo, hi = 1, args.max_rank  # the count grows with the rank: bisect
        while lo < hi:
            mid = (lo + hi) // 2
            if total(mid) < target:
                lo = mid + 1
            else:
                hi = mid
        best = min((r for r in (lo - 1, lo) if r >= 1), key=lambda r: abs(total(r) - target))
    except ParamsError as exc:
        print(f"lightformer_rank: error: {exc}", file=sys.stderr)
        return 2
    print(best)
    print(
        f"{args.arch} --lc-rank {best}: {total(best):,} parameters, DA-WID fused: {target:,}",
        file=sys.stderr,
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
