"""ROUGE-1/2/L F1 (x100, corpus mean) of one hypothesis file against one reference file.

Line i of --hyp is scored against line i of --ref with Google's rouge-score (the reimplementation
of ROUGE-1.5.5; Porter stemming on, as ``ROUGE-1.5.5 -m``), as the LightFormer GigaWord table
reports F1 of ROUGE-1, ROUGE-2 and ROUGE-L. ``--lsum`` adds summary-level ROUGE-L (rouge-score's
``rougeLsum``, what CNN-DM papers report as ROUGE-L): each line is split into sentences after
``.``, ``!`` or ``?`` followed by a space (or at an explicit ``<q>`` marker) before scoring.

    python score_rouge.py --hyp generate-test.txt.hyp --ref data-bin/gigaword/refs/test.title
"""

import argparse
import re
import sys

from rouge_score import rouge_scorer

__all__ = ["rouge_f1"]


_SENTENCE_END = re.compile(r"(?<=[.!?])\s+|\s*<q>\s*")


def split_sentences(text):
    """One line -> its sentences joined by newlines (the input format of ``rougeLsum``)."""
    return "\n".join(s for s in _SENTENCE_END.split(text.strip()) if s)


def rouge_f1(hyps, refs, stem=True, lsum=False):
    """Mean F1 x 100 of ROUGE-1, ROUGE-2 and ROUGE-L (and ``rougeLsum`` with ``lsum``) over
    aligned lists of strings."""
    if len(hyps) != len(refs):
        raise ValueError(f"{len(hyps)} hypotheses but {len(refs)} references")
    names = ("rouge1", "rouge2", "rougeL") + (("rougeLsum",) if lsum else ())
    scorer = rouge_scorer.RougeScorer(list(names), use_stemmer=stem)
    totals = dict.fromkeys(names, 0.0)
    for hyp, ref in zip(hyps, refs):
        if lsum:
            hyp, ref = split_sentences(hyp), split_sentences(ref)
        scores = scorer.score(ref, hyp)  # score(target, prediction)
        for n in names:
            totals[n] += scores[n].fmeasure
    return {n: 100.0 * totals[n] / max(len(hyps), 1) for n in names}


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--hyp", required=True, help="system output, one summary per line")
    parser.add_argument("--ref", required=True, help="references, one per line")
    parser.add_argument("--no-stem", action="store_true", help="turn Porter stemming off")
    parser.add_argument(
        "--lsum",
        action="store_true",
        help="also report summary-level ROUGE-L (rougeLsum, sentence-split), as CNN-DM papers do",
    )
    args = parser.parse_args(argv)
    with open(args.hyp, encoding="utf-8") as f:
        hyps = [line.rstrip("\n") for line in f]
    with open(args.ref, encoding="utf-8") as f:
        refs = [line.rstrip("\n") for line in f]
    r = rouge_f1(hyps, refs, stem=not args.no_stem, lsum=args.lsum)
    line = (
        f"ROUGE F1 ({len(hyps)} lines): R-1 {r['rouge1']:.2f}  R-2 {r['rouge2']:.2f}  "
        f"R-L {r['rougeL']:.2f}"
    )
    if args.lsum:
        line += f"  R-Lsum {r['rougeLsum']:.2f}"
    print(line)


if __name__ == "__main__":
    sys.exit(main())
