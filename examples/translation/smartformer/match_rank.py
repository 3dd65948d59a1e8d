#!/usr/bin/env python3
"""The fixed CP rank whose model has the parameter count closest to a searched Smartformer's.

    python examples/translation/smartformer/match_rank.py --path SEARCHED/checkpoint_last.pt

Reads the searched checkpoint (its flags and the ranks its CP factors hold), counts its
parameters, and prints the one rank R for which the same architecture with every Q/K/V map at
``--sm-rank R`` comes closest (ties: the smaller R). The models are built on the meta device
(no memory, no data). ``--verbose`` adds the two counts on stderr. Bad input: one line on
stderr, exit status 2.
"""

from __future__ import annotations

import argparse
import copy
import sys


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--path", required=True, help="checkpoint of a rank search")
    p.add_argument("--verbose", action="store_true")
    args = p.parse_args(argv)

    import logging

    logging.disable(logging.WARNING)
    import torch

    import lightcompress.plugin  # noqa: F401  (registers the plugin)
    from lightcompress.build import build_model_without_data
    from lightcompress.checkpoint import model_config, read_checkpoint
    from lightcompress.errors import LightcompressError
    from lightcompress.measure.params import checkpoint_report
    from lightcompress.modules import count_unique_params
    from lightcompress.search import cp_rank_bound, find_search_layers

    try:
        target = checkpoint_report(args.path)["total"]
        state = read_checkpoint(args.path)
        margs = copy.deepcopy(model_config(state))
    except LightcompressError as exc:
        print(f"match_rank: error: {exc}", file=sys.stderr)
        return 2
    vocab = state["model"]["encoder.embed_tokens.weight"].shape[0]
    tgt = state["model"]["decoder.embed_tokens.weight"].shape[0]
    del state

    def count(rank: int):
        a = copy.deepcopy(margs)
        a.sm_rank = rank
        a.lc_spec = None
        with torch.device("meta"):
            model = build_model_without_data(a, vocab, tgt)
        return count_unique_params(model), model

    base, model = count(1)
    layers = find_search_layers(model)
    if not layers:
        print(f"match_rank: error: {args.path} has no CP attention projections", file=sys.stderr)
        return 2
    bound = min(cp_rank_bound(m) for layer in layers for _, m in layer.projections)
    per_rank = count(2)[0] - base  # the count is linear in the rank
    best = min(range(1, bound + 1), key=lambda r: (abs(base + (r - 1) * per_rank - target), r))
    if args.verbose:
        print(
            f"searched: {target:,} parameters; rank {best}: {base + (best - 1) * per_rank:,}",
            file=sys.stderr,
        )
    print(best)
    return 0


if __name__ == "__main__":
    sys.exit(main())
