"""Does a translation model read its source? Three measurements of one checkpoint.

- ``pooled_cosine``: the mean cosine similarity between the mean-pooled encoder outputs of the
  first ``n`` test sources, over all pairs (1.0: the encoder gives every source the same vector,
  so the decoder cannot tell sources apart);
- ``own_bits`` / ``other_bits``: the teacher-forced cost of the same ``n`` test targets, in bits
  a target token, given their own sources and given another sentence's (target ``i`` with source
  ``i + n // 2``, mod ``n``: far apart in the file, so not a neighbour of the same talk). A model
  that ignores its source costs the same either way; a model that reads it costs more with the
  wrong one (the shipped teacher: about 7 bits more). It is read from a checkpoint during
  training too, long before the model translates;
- ``distinct_translations``: how many different sentences a fairseq-generate output holds (one:
  the same translation whatever the source).

Used by ``converged.py source-check ROW``; also a command of its own::

    python source_check.py CHECKPOINT DATA_BIN [--generate generate-test.txt] [-n 100]
"""

from __future__ import annotations

import argparse
import json
import math
import os
import sys


class CheckError(Exception):
    """A checkpoint or data-bin this check cannot read (one line)."""


SOURCES = 100  # test sources measured by default
BATCH = 25  # sentences a forward pass


def measure(checkpoint: str, data_bin: str, n: int = SOURCES, subset: str = "test") -> dict:
    """``{"sources", "pooled_cosine", "own_bits", "other_bits", "updates"}`` of one checkpoint
    (``updates``: the training updates its checkpoint records, None when stripped)."""
    import torch
    from fairseq import checkpoint_utils

    import lightcompress.plugin  # noqa: F401  (the plugin's models and checkpoint allow-list)

    if not os.path.exists(checkpoint):
        raise CheckError(f"{checkpoint}: no such checkpoint")
    try:
        overrides = {"data": data_bin}
        # (fairseq applies arg_overrides when it reads the file, not to a state it is given)
        state = checkpoint_utils.load_checkpoint_to_cpu(checkpoint, overrides)
        models, _, task = checkpoint_utils.load_model_ensemble_and_task(
            [checkpoint], arg_overrides=overrides, state=state
        )
        task.load_dataset(subset)
    except (OSError, KeyError, RuntimeError) as exc:
        raise CheckError(f"{checkpoint}: cannot load it with {data_bin}: {exc}") from None
    history = state.get("optimizer_history") or [{}]
    updates = history[-1].get("num_updates")
    model = models[0].eval().cpu()
    ds = task.dataset(subset)
    n = min(n, len(ds))
    if n < 2:
        raise CheckError(f"{data_bin}: fewer than two {subset} sentences")
    with torch.no_grad():
        pooled = []
        for i in range(n):
            src = ds[i]["source"][None]  # 1 x T
            out = model.encoder(src, src_lengths=torch.tensor([src.size(1)]))
            pooled.append(out["encoder_out"][0][:, 0].mean(0))  # T x 1 x d -> d
        v = torch.nn.functional.normalize(torch.stack(pooled), dim=1)
        gram = v @ v.T
        cosine = ((gram.sum() - gram.diagonal().sum()) / (n * (n - 1))).item()
        own = _target_bits(model, ds, task.target_dictionary.pad(), [(i, i) for i in range(n)])
        other = _target_bits(
            model, ds, task.target_dictionary.pad(), [(i, (i + n // 2) % n) for i in range(n)]
        )
    return {
        "sources": n,
        "pooled_cosine": round(cosine, 4),
        "own_bits": round(own, 3),
        "other_bits": round(other, 3),
        "updates": updates,
    }


def _target_bits(model, ds, pad: int, pairs: list[tuple[int, int]]) -> float:
    """Teacher-forced cost, in bits a target token (end of sentence included), of the targets
    of ``pairs`` (target sentence, source sentence), each given the source named with it."""

    total, tokens = 0.0, 0
    for at in range(0, len(pairs), BATCH):
        samples = []
        for k, (t, s) in enumerate(pairs[at : at + BATCH]):
            sample = dict(ds[t])
            sample["id"], sample["source"] = k, ds[s]["source"]
            samples.append(sample)
        batch = ds.collater(samples)  # sorts by source length; each target stays with its pair
        out = model(**batch["net_input"])
        lprobs = model.get_normalized_probs(out, log_probs=True)
        target = batch["target"]
        keep = target.ne(pad)
        nll = -lprobs.gather(-1, target.unsqueeze(-1)).squeeze(-1)
        total += nll[keep].double().sum().item()
        tokens += int(keep.sum())
    return total / tokens / math.log(2)


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
        "-n", type=int, default=SOURCES, help=f"test sentences to measure (default {SOURCES})"
    )
    a = p.parse_args(argv)
    try:
        out = measure(a.checkpoint, a.data_bin, a.n)
        if a.generate:
            out["distinct_translations"], out["translations"] = distinct_translations(a.generate)
    except CheckError as exc:
        print(f"source_check.py: {exc}", file=sys.stderr)
        return 1
    print(json.dumps(out))
    return 0


if __name__ == "__main__":
    sys.exit(main())
