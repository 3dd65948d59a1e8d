#!/usr/bin/env python3
"""How often CTranslate2's beam search picks another translation than fairseq's, and by how much
fairseq's own score of the two differs.

    python lab/bench/ct2_beam_agreement.py --path teacher.pt --data DATA_BIN [--subset test]
        [--num-sentences 200] [--beam 5] [--lenpen 1.0] [--max-len-a 1.2 --max-len-b 10]

The model is exported to CTranslate2 (float32, into a temporary directory, checked by the
exporter), both engines translate the same sentences with the same settings, and every
hypothesis CTranslate2 returns is scored by the fairseq model as fairseq scores hypotheses
(sum of token log-probabilities, EOS included, divided by the length with EOS to the power
``lenpen``). Prints (and with ``--json`` writes): sentences translated identically, sentences
where CTranslate2's pick scores lower in fairseq's terms (their count, the largest and the mean
gap), and where it scores higher (fairseq's beam search is not exact either). Bad input is one
line on stderr and exit status 2.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", ".."))


def _score(model, src, hyp, eos, lenpen) -> float:
    """fairseq's score of hypothesis ``hyp`` (ids without EOS) for source ``src``."""
    import torch

    src_tokens = src.unsqueeze(0)
    gold = torch.tensor([*hyp, eos])
    prev = torch.tensor([eos, *hyp]).unsqueeze(0)
    with torch.no_grad():
        out = model(src_tokens, torch.tensor([src_tokens.shape[1]]), prev)
        lprobs = model.get_normalized_probs(out, log_probs=True)[0].float()
    total = float(lprobs.gather(-1, gold.unsqueeze(-1)).sum())
    return total / (len(gold) ** lenpen)


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--path", required=True, help="a dense fairseq Transformer checkpoint")
    p.add_argument("--data", required=True, help="its data-bin directory")
    p.add_argument("--subset", default="test")
    p.add_argument("--num-sentences", type=int, default=200, help="first N of --subset")
    p.add_argument("--beam", type=int, default=5)
    p.add_argument("--lenpen", type=float, default=1.0)
    p.add_argument("--max-len-a", type=float, default=1.2)
    p.add_argument("--max-len-b", type=int, default=10)
    p.add_argument("--json", help="write the figures to this file")
    args = p.parse_args(argv)

    import logging
    import warnings

    logging.disable(logging.WARNING)
    warnings.filterwarnings("ignore")
    import torch
    from fairseq.sequence_generator import SequenceGenerator

    import lightcompress.plugin  # noqa: F401
    from lightcompress.checkpoint import load_checkpoint
    from lightcompress.deploy.ct2 import export_model
    from lightcompress.errors import LightcompressError
    from lightcompress.measure.engines import CT2Runner

    torch.set_num_threads(1)
    if args.num_sentences < 1 or args.beam < 1:
        print("ct2_beam_agreement: error: --num-sentences and --beam must be >= 1", file=sys.stderr)
        return 2
    try:
        model, task, model_args = load_checkpoint(args.path, args.data)
        task.load_dataset(args.subset)
    except (LightcompressError, FileNotFoundError) as exc:
        print(f"ct2_beam_agreement: error: {exc}", file=sys.stderr)
        return 2
    ds = task.dataset(args.subset)
    n = min(args.num_sentences, len(ds))
    sources = [ds[i]["source"] for i in range(n)]
    tgt = task.target_dictionary
    eos = tgt.eos()
    gen = argparse.Namespace(
        beam=args.beam,
        lenpen=args.lenpen,
        min_len=1,
        max_len_a=args.max_len_a,
        max_len_b=args.max_len_b,
    )
    fairseq = SequenceGenerator(
        [model],
        tgt,
        beam_size=args.beam,
        len_penalty=args.lenpen,
        max_len_a=args.max_len_a,
        max_len_b=args.max_len_b,
    )
    with tempfile.TemporaryDirectory() as tmp:
        out = os.path.join(tmp, "ct2")
        try:
            export_model(model, task, model_args, out)
        except LightcompressError as exc:
            print(f"ct2_beam_agreement: error: {exc}", file=sys.stderr)
            return 2
        runner = CT2Runner(
            out,
            "float32",
            1,
            task.source_dictionary,
            tgt,
            model.max_decoder_positions(),
            model.max_positions(),
        )
        ct2 = runner.translate(sources, gen, batch_size=16)
    same, lower, higher = 0, [], []
    for src, hyp in zip(sources, ct2):
        with torch.inference_mode():
            best = fairseq.generate(
                [model],
                {
                    "net_input": {
                        "src_tokens": src.unsqueeze(0),
                        "src_lengths": torch.tensor([src.numel()]),
                    }
                },
            )[0][0]
        ours = best["tokens"].tolist()[:-1]
        if hyp == ours:
            same += 1
            continue
        gap = float(best["score"]) - _score(model, src, hyp, eos, args.lenpen)
        (lower if gap > 0 else higher).append(abs(gap))
    result = {
        "checkpoint": args.path,
        "sentences": n,
        "beam": args.beam,
        "lenpen": args.lenpen,
        "identical": same,
        "ct2_lower": len(lower),
        "ct2_higher": len(higher),
        "largest_gap_lower": max(lower, default=0.0),
        "mean_gap_lower": sum(lower) / len(lower) if lower else 0.0,
        "largest_gap_higher": max(higher, default=0.0),
    }
    print(
        f"{n} sentences, beam {args.beam}, lenpen {args.lenpen}: {same} identical; "
        f"CTranslate2's pick scores lower in fairseq's terms on {len(lower)} (largest gap "
        f"{result['largest_gap_lower']:.3f}, mean {result['mean_gap_lower']:.3f}), higher on "
        f"{len(higher)} (largest {result['largest_gap_higher']:.3f})"
    )
    if args.json:
        with open(args.json, "w", encoding="utf-8") as f:
            json.dump(result, f, indent=2)
    return 0


if __name__ == "__main__":
    sys.exit(main())
