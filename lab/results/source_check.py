"""Does a translation model read its source? Two measurements of one checkpoint.

- ``pooled_cosine``: the mean cosine similarity between the mean-pooled encoder outputs of the
  first ``n`` test sources, over all pairs (1.0: the encoder gives every source the same vector,
  so the decoder cannot tell sources apart);
- ``distinct_translations``: how many different sentences a fairseq-generate output holds (one:
  the same translation whatever the source).

Used by ``converged.py source-check ROW``; also a command of its own::

    python source_check.py CHECKPOINT DATA_BIN [--generate generate-test.txt] [-n 100]
"""

from __future__ import annotations

import argparse
import json
import os
import sys


class CheckError(Exception):
    """A checkpoint or data-bin this check cannot read (one line)."""


SOURCES = 100  # test sources pooled by default


def pooled_cosine(checkpoint: str, data_bin: str, n: int = SOURCES, subset: str = "test") -> float:
    """The mean pairwise cosine of the mean-pooled encoder outputs of ``n`` sources."""
    import torch
    from fairseq import checkpoint_utils

    import lightcompress.plugin  # noqa: F401  (the plugin's models and checkpoint allow-list)

    if not os.path.exists(checkpoint):
        raise CheckError(f"{checkpoint}: no such checkpoint")
    try:
        models, _, task = checkpoint_utils.load_model_ensemble_and_task(
            [checkpoint], arg_overrides={"data": data_bin}
        )
        task.load_dataset(subset)
    except (OSError, KeyError, RuntimeError) as exc:
        raise CheckError(f"{checkpoint}: cannot load it with {data_bin}: {exc}") from None
    model = models[0].eval().cpu()
    ds = task.dataset(subset)
    pooled = []
    with torch.no_grad():
        for i in range(min(n, len(ds))):
            src = ds[i]["source"][None]  # 1 x T
            out = model.encoder(src, src_lengths=torch.tensor([src.size(1)]))
            pooled.append(out["encoder_out"][0][:, 0].mean(0))  # T x 1 x d -> d
    if len(pooled) < 2:
        raise CheckError(f"{data_bin}: fewer than two {subset} sentences")
    v = torch.nn.functional.normalize(torch.stack(pooled), dim=1)
    gram = v @ v.T
    k = len(pooled)
    return round(((gram.sum() - gram.diagonal().sum()) / (k * (k - 1))).item(), 4)


def distinct_translations(generate_out: str) -> tuple[int, int]:
    """(distinct hypotheses, hypotheses) of a fairseq-generate output (its ``D-`` lines)."""
    from collect import read_generate

    hyps = read_generate(generate_out)
    return len(set(hyps.values())), len(hyps)


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("checkpoint")
    p.add_argument("data_bin")
    p.add_argument("--generate", help="a fairseq-generate output of this checkpoint")
    p.add_argument(
        "-n", type=int, default=SOURCES, help=f"test sources to pool (default {SOURCES})"
    )
    a = p.parse_args(argv)
    try:
        out = {"sources": a.n, "pooled_cosine": pooled_cosine(a.checkpoint, a.data_bin, a.n)}
        if a.generate:
            out["distinct_translations"], out["translations"] = distinct_translations(a.generate)
    except CheckError as exc:
        print(f"source_check.py: {exc}", file=sys.stderr)
        return 1
    print(json.dumps(out))
    return 0


if __name__ == "__main__":
    sys.exit(main())
