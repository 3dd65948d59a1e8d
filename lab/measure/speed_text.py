"""Tokenization inside the timed path (the lab's ``measure_speed --text SPM``), as the WNGT / WMT
efficiency tasks time a system: raw text in, raw text out.

:class:`TextRunner` wraps an engine's runner (:mod:`lightcompress.measure.engines`, the fast
path's :mod:`speed_fast`) and times,
per batch, what a deployment does with a line of text:

- ONNX Runtime and the fast path: the sentencepiece model's encoding, the dictionary lookup
  (pieces -> ids, EOS appended), left padding, the translation, and the decoding (ids ->
  pieces -> text, fairseq's ``sentencepiece`` post-processing): the steps of
  :class:`lightcompress_runtime.OnnxTranslator`'s ``encode`` / ``decode``, done
  here once for every engine (a runner holds no translator);
- CTranslate2: the encoding to pieces, ``translate_batch`` on the pieces (CTranslate2 looks
  its vocabulary up itself) and the decoding of the output pieces.

The text of a timing sentence is what sentencepiece decodes from its binarized pieces (the
test split as the model reads it); its translation is scored (``--bleu``) through the same
text path, re-encoded, so a round trip that changes a sentence shows in the BLEU column.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch

from lightcompress.measure.candidates import SpeedError

__all__ = ["TextError", "TextRunner", "check_args", "load_spm", "with_text"]

_WORD = "\u2581"  # sentencepiece's word boundary


class TextError(SpeedError):
    """A sentencepiece model that cannot be used (one line)."""


def check_args(args) -> None:
    """``measure_speed``'s checks of ``--text`` (before any model is loaded)."""
    if args.text is not None:
        if not (args.fast or args.onnx or args.ct2):
            raise TextError("--text needs --fast, --onnx or --ct2")
        load_spm(args.text)


def load_spm(path: str):
    """A ``SentencePieceProcessor`` of ``path`` (:class:`TextError` when it cannot load)."""
    import os

    import sentencepiece

    if not os.path.isfile(path):
        raise TextError(f"--text {path}: file not found")
    try:
        return sentencepiece.SentencePieceProcessor(model_file=path)
    except (RuntimeError, OSError) as exc:
        detail = " ".join(str(exc).split())[:200]
        raise TextError(f"--text {path}: not a sentencepiece model ({detail})") from None


def detokenize(pieces: Sequence[str]) -> str:
    """fairseq's ``sentencepiece`` post-processing of pieces."""
    return "".join(pieces).replace(_WORD, " ").strip()


class TextRunner:
    """``inner`` (an :class:`~lightcompress.measure.engines.OnnxRunner`, ``FastRunner`` or
    ``CT2Runner``) from raw text to raw text, with the sentencepiece model ``spm`` and the
    model's dictionaries. Same interface as the runners: ``prepare``, ``run_one`` (tokens of
    the best hypotheses, EOS excluded), ``translate`` (target ids, for BLEU)."""

    def __init__(self, inner, spm, src_dict, tgt_dict):
        self.inner, self.spm = inner, spm
        self.engine = inner.engine
        self.model_max_positions = inner.model_max_positions
        self.src_dict, self.tgt_dict = src_dict, tgt_dict
        self.src_index = {src_dict[i]: i for i in range(len(src_dict))}
        self.src_eos, self.src_unk = src_dict.eos(), src_dict.unk()
        self.tgt_symbols = [tgt_dict[i] for i in range(len(tgt_dict))]

    def text_of(self, sentence: torch.Tensor) -> str:
        """The raw text of a binarized source sentence (its pieces, decoded)."""
        ids = sentence.tolist()
        if ids and ids[-1] == self.src_eos:
            ids = ids[:-1]
        return self.spm.decode_pieces([self.src_dict[i] for i in ids])

    def prepare(self, sentences: Sequence[torch.Tensor], gen, batch_size: int = 1) -> list:
        """Batches of ``batch_size`` consecutive sentences' raw text (the data's pieces decoded:
        not timed, as reading a file is not)."""
        lines = [self.text_of(s) for s in sentences]
        return [(gen, lines[i : i + batch_size]) for i in range(0, len(lines), batch_size)]

    def _encode(self, line: str) -> list[int]:
        pieces = self.spm.encode(line, out_type=str)
        return [self.src_index.get(p, self.src_unk) for p in pieces] + [self.src_eos]

    def _pieces(self, lines: Sequence[str], gen, each: bool = False) -> list[list[str]]:
        """The output pieces of each line (the whole path but the final detokenization).
        CTranslate2's maximum length is fairseq's for the batch's longest source, or with
        ``each`` for each line's own (as :meth:`CT2Runner.translate` sets it)."""
        from lightcompress.measure.engines import CT2Runner, fairseq_max_len

        inner = self.inner
        if isinstance(inner, CT2Runner):
            pieces = [self.spm.encode(line, out_type=str) for line in lines]
            # fairseq's maximum length from the source length, counted with its EOS
            limits = [fairseq_max_len(len(p) + 1, gen, inner.max_positions) for p in pieces]
            groups: dict[int, list[int]] = {}
            for i, limit in enumerate(limits):
                groups.setdefault(limit if each else max(limits), []).append(i)
            out: list = [None] * len(pieces)
            for limit, idx in groups.items():
                results = inner.translator.translate_batch(
                    [pieces[i] for i in idx], max_batch_size=len(idx), **inner._options(gen, limit)
                )
                for i, r in zip(idx, results):
                    out[i] = r.hypotheses[0]
            return out
        ids = [torch.tensor(self._encode(line), dtype=torch.long) for line in lines]
        out = inner.translate(ids, gen, len(ids))
        symbols = self.tgt_symbols
        return [[symbols[i] for i in hyp] for hyp in out]

    def run_one(self, prepared) -> int:
        gen, lines = prepared
        pieces = self._pieces(lines, gen)
        self.last_output = [detokenize(p) for p in pieces]
        return sum(len(p) for p in pieces)

    def translate(self, sentences: Sequence[torch.Tensor], gen, batch_size: int) -> list[list[int]]:
        """Target ids of every sentence, translated from its raw text (for BLEU)."""
        out: list[list[int]] = []
        for _gen, lines in self.prepare(sentences, gen, batch_size):
            for pieces in self._pieces(lines, gen, each=True):
                out.append([self._index(p) for p in pieces])
        return out

    def _index(self, piece: str) -> int:
        return self.tgt_dict.pad() if piece == "<blank>" else self.tgt_dict.index(piece)


TEXT_ENGINES = ("onnxruntime", "ctranslate2", "lightcompress")


def with_text(candidates: Sequence, spm_path: str) -> list:
    """After each ONNX Runtime, CTranslate2 and fast-path candidate, the same from raw text to
    raw text (:class:`TextRunner`, ``text=True``)."""
    import dataclasses

    spm = load_spm(spm_path)
    out = []
    for c in candidates:
        out.append(c)
        if c.engine in TEXT_ENGINES and c.runner is not None:
            src, tgt = c.task.source_dictionary, c.task.target_dictionary
            out.append(
                dataclasses.replace(c, runner=TextRunner(c.runner, spm, src, tgt), text=True)
            )
    return out
