"""``lightcompress-shortlist``: build a vocabulary shortlist from a fairseq data-bin's parallel data.

::

    lightcompress-shortlist --data data-bin/demo [-s de -t en] [--k 100 --frequent 100] -o sl.txt
    lightcompress-translate ... --shortlist sl.txt            # the PyTorch fast path
    lightcompress-export-onnx ... --shortlist sl.txt -o model-onnx
    python model-onnx/translate.py model-onnx --shortlist      # the ONNX export

What it holds (as Marian's lexical shortlists, whose usual setting is ``100 100``, and
CTranslate2's vocabulary maps):

- per source token, its ``--k`` likeliest target tokens by ``p(t|s) = c(s, t) / c(s)``, with
  ``c(s, t)`` the number of training sentence pairs whose source holds ``s`` and whose target
  holds ``t`` and ``c(s)`` those whose source holds ``s`` (sentence-level co-occurrence: no
  word alignment is estimated). Tokens that are always included do not take a place in the
  list; ties go to the rarer target token (the more specific one), then to the lower id.
  Special symbols get no list;
- the ``--frequent`` most frequent target tokens of the training split (token counts), plus
  EOS and UNK: always included (PAD is not; the translators add every id up to the largest
  special symbol, PAD scored -inf as in fairseq).

The file is UTF-8 text, read by :class:`lightcompress_runtime.Shortlist`: a header
line (``#lightcompress-shortlist 2``, ``lines=N`` and ``sha256=...`` of the lines after it, so
that every reader refuses a truncated or edited copy, and how it was built), then ``<TAB>``
and the tokens always included, then one line per source token ``source<TAB>target target
...`` (the dictionaries' symbols, so ``grep`` reads it). Files of the first format (``#...
1``, no count) are refused with a line saying to rebuild them. Counting uses sparse matrices (scipy, which
scikit-learn brings): about a second per 100k sentence pairs.

Bad input (no data directory, no training split or dictionaries, data that do not fit the
dictionaries, a value out of range, an output that cannot be written) is one line and exit
status 2; the output is written atomically (a complete file or none).
"""

from __future__ import annotations

import argparse
import glob
import os
import sys
from collections.abc import Sequence

import numpy as np

from lightcompress import cli
from lightcompress.deploy.shortlist import ShortlistError
from lightcompress_runtime.shortlist import shortlist_text

__all__ = ["build_shortlist", "cli_main", "language_pair", "list_lines", "main", "write_shortlist"]

PROG = "lightcompress-shortlist"
_CHUNK = 20000  # sentence pairs per sparse product


def language_pair(data: str, split: str, source: str | None, target: str | None):
    """``(source, target, source prefix, target prefix)`` of the binarized ``split`` in
    ``data`` (fairseq's ``split.SRC-TGT.LANG`` files, either direction)."""
    if not os.path.isdir(data):
        raise ShortlistError(f"data directory not found: {data}")
    if source is None or target is None:
        pairs = sorted(
            {
                os.path.basename(p)[len(split) + 1 :].split(".")[0]
                for p in glob.glob(os.path.join(glob.escape(data), f"{split}.*-*.*.idx"))
            }
        )
        if len(pairs) != 1:
            found = "none" if not pairs else ", ".join(pairs)
            raise ShortlistError(
                f"{data}: give -s and -t (binarized {split} language pairs found: {found})"
            )
        first, _, second = pairs[0].partition("-")
        source, target = (
            source or (second if target == first else first),
            target or (first if source == second else second),
        )
    for pair in (f"{source}-{target}", f"{target}-{source}"):
        prefixes = [os.path.join(data, f"{split}.{pair}.{lang}") for lang in (source, target)]
        if all(os.path.isfile(p + ".idx") and os.path.isfile(p + ".bin") for p in prefixes):
            return source, target, prefixes[0], prefixes[1]
    raise ShortlistError(f"{data} has no binarized {split} split for {source}-{target}")


def _dictionary(data: str, lang: str):
    from fairseq.data import Dictionary

    path = os.path.join(data, f"dict.{lang}.txt")
    if not os.path.isfile(path):
        raise ShortlistError(f"{data} has no dictionary dict.{lang}.txt")
    try:
        return Dictionary.load(path)
    except (ValueError, RuntimeError, OSError) as exc:
        raise ShortlistError(f"cannot read {path}: {_line(exc)}") from None


def _line(exc: BaseException) -> str:
    return " ".join(str(exc).split())[:200]


def _sentences(prefix: str, dictionary) -> list[np.ndarray]:
    from fairseq.data import data_utils

    try:
        ds = data_utils.load_indexed_dataset(prefix, dictionary)
        sentences = [] if ds is None else [ds[i].numpy() for i in range(len(ds))]
    except (ValueError, RuntimeError, OSError, IndexError) as exc:
        raise ShortlistError(f"cannot read {prefix}.bin: {_line(exc)}") from None
    if ds is None:
        raise ShortlistError(f"cannot read {prefix}.idx / .bin")
    top = max((int(s.max()) for s in sentences if s.size), default=-1)
    if top >= len(dictionary):
        raise ShortlistError(
            f"{prefix}.bin holds id {top}, more than its dictionary's {len(dictionary)} "
            "entries: the data and the dictionaries do not fit"
        )
    return sentences


def _occurrence(sentences: list[np.ndarray], size: int, low: int):
    """Sparse ``[pairs x size]`` 0/1 matrix: which tokens (ids >= ``low``) each sentence holds."""
    from scipy import sparse

    rows = np.repeat(np.arange(len(sentences)), [len(s) for s in sentences])
    cols = np.concatenate(sentences) if sentences else np.zeros(0, dtype=np.int64)
    keep = cols >= low
    m = sparse.csr_matrix(
        (np.ones(int(keep.sum()), dtype=np.int32), (rows[keep], cols[keep])),
        shape=(len(sentences), size),
    )
    m.sum_duplicates()
    m.data[:] = 1
    return m


def build_shortlist(
    data: str,
    source: str | None = None,
    target: str | None = None,
    split: str = "train",
    k: int = 100,
    frequent: int = 100,
):
    """Build the shortlist of ``data``'s ``split`` (see the module notes). Returns ``(src_dict,
    tgt_dict, always, lists, info)``: the always-included target ids, per source id its target
    ids best first (empty: no list), and ``info`` (languages, pairs)."""
    if k < 0 or frequent < 0:
        raise ShortlistError(f"--k and --frequent must be >= 0, got {k} and {frequent}")
    source, target, src_prefix, tgt_prefix = language_pair(data, split, source, target)
    src_dict, tgt_dict = _dictionary(data, source), _dictionary(data, target)
    src, tgt = _sentences(src_prefix, src_dict), _sentences(tgt_prefix, tgt_dict)
    if len(src) != len(tgt):
        raise ShortlistError(f"{src_prefix} has {len(src)} sentences, {tgt_prefix} {len(tgt)}")
    if not src:
        raise ShortlistError(f"the {split} split of {data} holds no sentence pairs")
    vs, vt = len(src_dict), len(tgt_dict)
    low_s, low_t = src_dict.nspecial, tgt_dict.nspecial
    counts = np.bincount(np.concatenate(tgt), minlength=vt)  # target token frequencies
    order = sorted(range(low_t, vt), key=lambda t: (-counts[t], t))
    top = [t for t in order[:frequent] if counts[t] > 0]
    always = np.array(sorted({tgt_dict.eos(), tgt_dict.unk(), *top}), dtype=np.int64)
    from scipy import sparse

    co = sparse.csr_matrix((vs, vt), dtype=np.int64)  # c(s, t) over sentence pairs
    for start in range(0, len(src), _CHUNK):
        s = _occurrence(src[start : start + _CHUNK], vs, low_s)
        t = _occurrence(tgt[start : start + _CHUNK], vt, low_t)
        co = co + (s.T @ t).astype(np.int64)
    co = co.tocsr()
    co.sort_indices()
    excluded = np.zeros(vt, dtype=bool)
    excluded[always] = True
    lists: list[np.ndarray] = [np.zeros(0, dtype=np.int64)] * vs
    for s in range(low_s, vs):
        lo, hi = co.indptr[s], co.indptr[s + 1]
        ids, c = co.indices[lo:hi].astype(np.int64), co.data[lo:hi]
        keep = ~excluded[ids]
        ids, c = ids[keep], c[keep]
        if ids.size:  # c(s, t) descending (p(t|s) = c(s, t) / c(s)), rarer t, lower id
            best = np.lexsort((ids, counts[ids], -c))[:k]
            lists[s] = ids[best]
    info = {"source": source, "target": target, "pairs": len(src), "k": k, "frequent": frequent}
    return src_dict, tgt_dict, always, lists, info


def list_lines(sym_s, sym_t, always, lists) -> list[str]:
    """The file's lines after its header: ``<TAB>`` + the tokens always included, then
    ``source<TAB>targets`` per source id with a list (CTranslate2's vocabulary map has the
    same layout, :func:`lightcompress.deploy.ct2.write_vmap`)."""
    lines = ["\t" + " ".join(sym_t[t] for t in always)]
    lines += [
        sym_s[s] + "\t" + " ".join(sym_t[t] for t in ids) for s, ids in enumerate(lists) if len(ids)
    ]
    return lines


def write_shortlist(path: str, src_dict, tgt_dict, always, lists, info: dict) -> None:
    """Write the shortlist file (atomically)."""
    from lightcompress.io import atomic_write

    sym_s, sym_t = src_dict.symbols, tgt_dict.symbols
    about = (
        f"source={info['source']} target={info['target']} pairs={info['pairs']} "
        f"k={info['k']} frequent={info['frequent']} "
        "estimator=p(t|s)=c(s,t)/c(s) over sentence pairs"
    )
    with atomic_write(path) as f:
        f.write(shortlist_text(list_lines(sym_s, sym_t, always, lists), about))


def _arg_parser() -> argparse.ArgumentParser:
    p = cli.OneLineParser(
        prog=PROG,
        description="Build a vocabulary shortlist (per source token, its likeliest target "
        "tokens; the most frequent target tokens always) from a fairseq data-bin's training "
        "split, for lightcompress-translate / lightcompress-export-onnx --shortlist.",
    )
    p.add_argument("--data", required=True, help="fairseq data-bin (binarized, dictionaries)")
    p.add_argument("-s", "--source-lang", help="source language (default: the data's pair)")
    p.add_argument("-t", "--target-lang", help="target language")
    p.add_argument("--split", default="train", help="split to count (default train)")
    p.add_argument("--k", type=int, default=100, help="target tokens per source token (100)")
    p.add_argument(
        "--frequent", type=int, default=100, help="most frequent target tokens, always (100)"
    )
    p.add_argument("-o", "--output", required=True, help="shortlist file (written atomically)")
    return p


def main(argv: Sequence[str] | None = None) -> int:
    """``lightcompress-shortlist``: the exit status (errors as one line, status 2)."""
    import lightcompress.plugin  # noqa: F401  (plugin architectures; fairseq checkpoints load)

    return cli.run(_main, argv, PROG)


def _main(argv: Sequence[str] | None) -> int:
    args = _arg_parser().parse_args(argv)
    from lightcompress.io import output_error

    message = output_error(args.output, "--output")
    if message:
        raise ShortlistError(message)
    built = build_shortlist(
        args.data, args.source_lang, args.target_lang, args.split, args.k, args.frequent
    )
    try:
        write_shortlist(args.output, *built)
    except OSError as exc:  # a full disk, a read-only file system (atomic: nothing left)
        raise ShortlistError(f"cannot write {args.output}: {exc.strerror or exc}") from None
    _src, _tgt, always, lists, info = built
    listed = sum(1 for ids in lists if len(ids))
    print(
        f"{PROG}: wrote {args.output} ({info['source']}-{info['target']}, {info['pairs']} "
        f"pairs: {listed} source tokens with lists, {len(always)} always)",
        file=sys.stderr,
    )
    return 0


cli_main = cli.entry_point(main, quiet=True)
