"""Whether a tokenizer fits a model's dictionary: BPE codes or a sentencepiece model of another
corpus would turn raw text into units the model does not have (``<unk>``) without a word, and a
data-bin's dictionary says which tokenizer made it.

- :func:`dictionary_kind`: ``"bpe"`` for a dictionary of subword-nmt units (``@@`` marks),
  ``"sentencepiece"`` for one of sentencepiece pieces (``▁``), else ``None``;
- :func:`check_codes_fit`: every subword unit of the dictionary is one subword-nmt can make
  with the codes (a single character, or the result of one of their merges);
- :func:`check_spm_fit`: every unit of the dictionary is a piece of the sentencepiece model.

Used by ``lightcompress-export-onnx``, ``lightcompress-translate`` and ``lightcompress-compress``
(dry run included) before anything is loaded or written. Standard library only (sentencepiece
for :func:`check_spm_fit`).
"""

from __future__ import annotations

import re
from collections.abc import Iterable

__all__ = [
    "MAX_MISSING",
    "TextFitError",
    "check_codes_fit",
    "check_spm_fit",
    "check_tokenizer_fits",
    "dictionary_kind",
    "read_symbols",
    "task_dictionaries",
]

# the share of a dictionary's units that a tokenizer may fail to make before it is refused: the
# codes a data-bin was made with make every unit of its dictionary (0 missing); codes of another
# corpus miss most of them
MAX_MISSING = 0.1
BPE_MARK = "@@"
SPM_SPACE = "\u2581"
_SPECIAL = re.compile(r"^(<[^<>\s]*>|madeupword\d+)$")  # fairseq's specials and its padding


class TextFitError(ValueError):
    """A tokenizer that does not fit the model's dictionary (one line)."""


def read_symbols(path: str) -> list[str]:
    """The symbols of a fairseq ``dict.<lang>.txt`` (its first field on every line)."""
    with open(path, encoding="utf-8") as f:
        return [line.split(" ", 1)[0].rstrip("\n") for line in f if line.strip()]


def _units(symbols: Iterable[str]) -> list[str]:
    return [s for s in symbols if s and not _SPECIAL.match(s)]


def dictionary_kind(symbols: Iterable[str]) -> str | None:
    """``"bpe"`` when at least a tenth of the units end in ``@@`` (subword-nmt's continuation
    mark), ``"sentencepiece"`` when a fifth start with ``▁``, else ``None`` (words, or a
    tokenizer this cannot tell)."""
    units = _units(symbols)
    if not units:
        return None
    if sum(u.endswith(BPE_MARK) and len(u) > len(BPE_MARK) for u in units) >= 0.1 * len(units):
        return "bpe"
    if sum(u.startswith(SPM_SPACE) for u in units) >= 0.2 * len(units):
        return "sentencepiece"
    return None


def _hint(kind: str | None, given: str) -> str:
    if kind == "sentencepiece" and given != "spm":
        return " (its units are sentencepiece pieces: give the model's --spm)"
    if kind == "bpe" and given != "bpe":
        return " (its units are subword-nmt BPE units, ending in @@: give the model's --bpe-codes)"
    if kind is None:
        return " (its units have no @@ or \u2581 marks: no subword tokenizer made them)"
    return ""


def _refuse(what: str, missing: list[str], total: int, where: str, kind, given: str) -> None:
    examples = ", ".join(repr(u) for u in missing[:3])
    raise TextFitError(
        f"{what} {where}: {len(missing):,} of its {total:,} subword units cannot be made with "
        f"{'them' if given == 'bpe' else 'it'} (e.g. {examples}){_hint(kind, given)}; give the "
        f"{'codes' if given == 'bpe' else 'sentencepiece model'} the model's data was made with"
    )


def check_codes_fit(
    codes: str,
    symbols: Iterable[str],
    where: str = "the model's dictionary",
    separator: str = BPE_MARK,
) -> None:
    """Refuse subword-nmt BPE ``codes`` that cannot make more than :data:`MAX_MISSING` of the
    units of a dictionary (``symbols``; ``where`` names it): a unit ``abc@@`` needs the merge
    result ``abc``, a word-final ``abc`` the result ``abc</w>`` (version 0.1 codes: ``abc`` as
    well); single characters are always made. The codes are assumed readable
    (:func:`lightcompress_runtime.tokenizers.check_codes`)."""
    symbols = list(symbols)
    made, v01 = set(), True
    with open(codes, encoding="utf-8") as f:
        for n, line in enumerate(f):
            if n == 0 and line.startswith("#version:"):
                v01 = line.split()[-1].startswith("0.1")
                continue
            pair = line.strip("\r\n ").split(" ")
            if len(pair) == 2:
                made.add(pair[0] + pair[1])
    units = [u for u in _units(symbols) if len(u.removesuffix(separator)) > 1]
    missing = []
    for unit in units:
        if unit.endswith(separator):
            ok = unit[: -len(separator)] in made
        else:
            ok = unit + "</w>" in made or (v01 and unit in made)
        if not ok:
            missing.append(unit)
    if units and len(missing) > MAX_MISSING * len(units):
        what = f"the BPE codes {codes} do not fit"
        _refuse(what, missing, len(units), where, dictionary_kind(symbols), "bpe")


def check_spm_fit(spm: str, symbols: Iterable[str], where: str = "the model's dictionary") -> None:
    """Refuse a sentencepiece model whose pieces are not more than :data:`MAX_MISSING` short
    of the units of a dictionary (``symbols``; ``where`` names it). The model is assumed to
    load."""
    import sentencepiece

    symbols = list(symbols)
    sp = sentencepiece.SentencePieceProcessor(model_file=spm)
    pieces = {sp.id_to_piece(i) for i in range(sp.get_piece_size())}
    units = _units(symbols)
    missing = [u for u in units if u not in pieces]
    if units and len(missing) > MAX_MISSING * len(units):
        what = f"the sentencepiece model {spm} does not fit"
        _refuse(what, missing, len(units), where, dictionary_kind(symbols), "spm")


def check_tokenizer_fits(
    sides: Iterable[tuple[str, Iterable[str]]], spm: str | None = None, codes: str | None = None
) -> None:
    """:func:`check_spm_fit` / :func:`check_codes_fit` on every ``(where, symbols)`` of
    ``sides`` (the source and target dictionaries, named as the message should name them)."""
    for where, symbols in sides:
        if codes is not None:
            check_codes_fit(codes, symbols, where)
        if spm is not None:
            check_spm_fit(spm, symbols, where)


def task_dictionaries(task, data: str) -> list[tuple[str, list[str]]]:
    """A fairseq task's source and target dictionaries as :func:`check_tokenizer_fits` takes
    them, named by their files in ``data`` (one, if joined)."""
    import os

    cfg = getattr(task, "cfg", None) or getattr(task, "args", None)
    out: list[tuple[str, list[str]]] = []
    for side, lang, d in (
        ("source", getattr(cfg, "source_lang", None), task.source_dictionary),
        ("target", getattr(cfg, "target_lang", None), task.target_dictionary),
    ):
        if out and d.symbols == out[0][1]:
            break
        name = os.path.join(data, f"dict.{lang}.txt") if lang else data
        out.append((f"the model's {side} dictionary ({name})", list(d.symbols)))
    return out
