"""The text processing of an export: sentencepiece (:func:`load_sentencepiece`), or Moses +
subword-nmt BPE as fairseq's IWSLT'14 / WMT recipes prepare data (:class:`MosesBPE`).

Raw text -> the Moses tokenizer (sacremoses, ``tokenizer.perl``'s rules; XML escaping on,
aggressive dash splits off unless the data used ``-a``) -> lowercasing when the data was
lowercased (the IWSLT'14 recipe: ``lowercase.perl`` after tokenizing) -> subword-nmt
``apply-bpe`` with ``@@`` marks -> the model's subword tokens. Back: the ``@@ `` marks removed,
then the Moses detokenizer of the target language (a lowercased model's output stays lowercase).

numpy-free and torch-free (sacremoses and subword-nmt are pure Python): an export made with
``--bpe-codes`` ships the codes as ``bpe.codes`` and the settings in ``config.json``'s
``"bpe"``; ``lightcompress-translate --bpe-codes`` uses the same class, so both give the same
text. The commands' options for it (:func:`add_arguments`) are at the end.
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Sequence

__all__ = [
    "BPE_CODES",
    "MosesBPE",
    "TextError",
    "add_arguments",
    "check_arguments",
    "check_codes",
    "load_sentencepiece",
    "looks_lowercased",
    "settings_of",
]

BPE_CODES = "bpe.codes"  # (the codes' name inside an export)


class TextError(ValueError):
    """BPE codes or settings that cannot be used (one line)."""


def check_codes(path: str) -> None:
    """Refuse a file that is not subword-nmt BPE codes (subword-nmt itself exits the process
    on a bad line)."""
    if not os.path.isfile(path):
        raise TextError(f"BPE codes not found: {path}")
    try:
        with open(path, encoding="utf-8") as f:
            lines = f.read().rstrip("\n").split("\n")
    except UnicodeDecodeError:
        raise TextError(
            f"{path} is not subword-nmt BPE codes (not UTF-8 text: a sentencepiece "
            "model? give that with --spm)"
        ) from None
    except OSError as exc:
        raise TextError(f"cannot read the BPE codes {path}: {exc}") from None
    if not lines[lines[0].startswith("#version:") :] or lines == [""]:  # (subword-nmt exits)
        raise TextError(
            f"{path} holds no BPE merges (an empty codes file): give the codes file "
            "of subword-nmt learn-bpe"
        )
    for n, line in enumerate(lines, 1):
        if n == 1 and line.startswith("#version:"):
            continue
        if len(line.strip("\r\n ").split(" ")) != 2:
            raise TextError(
                f"{path} is not subword-nmt BPE codes (line {n} is not two subword units: "
                "give the codes file of subword-nmt learn-bpe)"
            )


def load_sentencepiece(path: str):
    """The sentencepiece processor of the model ``path`` (:class:`TextError` if it does not
    load)."""
    try:
        import sentencepiece
    except ImportError:
        raise TextError("raw text needs sentencepiece (pip install sentencepiece)") from None
    try:
        return sentencepiece.SentencePieceProcessor(model_file=path)
    except (RuntimeError, OSError) as exc:
        detail = " ".join(str(exc).split())[:200]
        raise TextError(f"cannot load the sentencepiece model {path}: {detail}") from None


def looks_lowercased(symbols: Iterable[str]) -> bool:
    """Whether a dictionary's symbols were lowercased: some have letters with case, none is
    upper-case (fairseq's special symbols such as ``<unk>`` aside)."""
    cased = False
    for s in symbols:
        if s.startswith("<") and s.endswith(">"):
            continue
        if s != s.lower():
            return False
        cased = cased or s != s.upper()
    return cased


class MosesBPE:
    """Raw text <-> a Moses-tokenized, subword-nmt BPE model's tokens (see the module notes).

    Parameters
    ----------
    codes : str
        subword-nmt BPE codes (``learn-bpe``'s output).
    source_lang, target_lang : str
        The Moses tokenizer's and detokenizer's languages (``tokenizer.perl -l``).
    moses : bool
        Moses tokenization and detokenization (False: BPE on the text as it is).
    lowercase : bool
        Lowercase the tokenized source (the data was lowercased).
    aggressive_dash_splits : bool
        ``tokenizer.perl -a`` (fairseq's WMT recipes; not its IWSLT'14 one).
    escape : bool
        Moses' XML escaping of ``& | < > ' " [ ]`` (``tokenizer.perl``'s default).
    separator : str
        The BPE continuation mark.
    """

    def __init__(
        self,
        codes: str,
        source_lang: str | None = None,
        target_lang: str | None = None,
        moses: bool = True,
        lowercase: bool = False,
        aggressive_dash_splits: bool = False,
        escape: bool = True,
        separator: str = "@@",
    ):
        check_codes(codes)
        if moses and not (source_lang and target_lang):
            raise TextError("the Moses tokenizer needs the source and target languages")
        try:
            from subword_nmt.apply_bpe import BPE
        except ImportError:
            raise TextError("BPE needs subword-nmt (pip install subword-nmt)") from None
        try:
            with open(codes, encoding="utf-8") as f:
                self.bpe = BPE(f, separator=separator)
        except (OSError, ValueError, SystemExit) as exc:
            raise TextError(f"cannot load the BPE codes {codes}: {exc}") from None
        self.tokenizer = self.detokenizer = None
        if moses:
            try:
                from sacremoses import MosesDetokenizer, MosesTokenizer
            except ImportError:
                raise TextError("Moses needs sacremoses (pip install sacremoses)") from None
            self.tokenizer = MosesTokenizer(lang=source_lang)
            self.detokenizer = MosesDetokenizer(lang=target_lang)
        self.source_lang, self.target_lang = source_lang, target_lang
        self.lowercase, self.aggressive_dash_splits = lowercase, aggressive_dash_splits
        self.escape, self.separator = escape, separator

    def settings(self, codes: str = BPE_CODES) -> dict:
        """The settings as an export's ``config.json`` records them (``"bpe"``)."""
        return {
            "codes": codes,
            "separator": self.separator,
            "tokenizer": "moses" if self.tokenizer is not None else None,
            "source_lang": self.source_lang,
            "target_lang": self.target_lang,
            "lowercase": self.lowercase,
            "aggressive_dash_splits": self.aggressive_dash_splits,
            "escape": self.escape,
        }

    @classmethod
    def from_export(cls, model_dir: str, settings: dict) -> MosesBPE:
        """The text processing an export's ``config.json`` records (``"bpe"``)."""
        if not isinstance(settings, dict) or not isinstance(settings.get("codes"), str):
            raise TextError(f"{model_dir}/config.json: 'bpe' is not a settings object")
        name = settings["codes"]
        if os.path.basename(name) != name or name in ("", ".", ".."):
            raise TextError(
                f"{model_dir}/config.json: the BPE codes {name!r} are not a file of the export"
            )
        path = os.path.join(model_dir, name)
        if not os.path.isfile(path):
            raise TextError(f"{model_dir} lacks {name} (an incomplete export)")
        return cls(
            path,
            settings.get("source_lang"),
            settings.get("target_lang"),
            moses=settings.get("tokenizer") == "moses",
            lowercase=bool(settings.get("lowercase")),
            aggressive_dash_splits=bool(settings.get("aggressive_dash_splits")),
            escape=settings.get("escape", True) is not False,
            separator=settings.get("separator") or "@@",
        )

    def encode(self, line: str) -> list[str]:
        """The model's subword tokens of one raw line."""
        line = line.replace("\ufeff", "")  # (a file's byte-order mark: no part of its text)
        if self.tokenizer is not None:
            line = self.tokenizer.tokenize(
                line,
                aggressive_dash_splits=self.aggressive_dash_splits,
                return_str=True,
                escape=self.escape,
            )
        if self.lowercase:
            line = line.lower()
        return self.bpe.process_line(line.strip()).split()

    def decode(self, tokens: Sequence[str]) -> str:
        """Raw text of target subword tokens (fairseq's ``subword_nmt`` post-processing, then
        the Moses detokenizer)."""
        text = (" ".join(tokens) + " ").replace(self.separator + " ", "").rstrip()
        if self.detokenizer is not None:
            text = self.detokenizer.detokenize(text.split(), return_str=True, unescape=self.escape)
        return text


# --------------------------------------------------------------------------------------------
# the commands' options (lightcompress-export-onnx, lightcompress-translate)
# --------------------------------------------------------------------------------------------


def add_arguments(p) -> None:
    """``--bpe-codes`` and the Moses options of an ``argparse`` parser."""
    import argparse

    p.add_argument(
        "--bpe-codes",
        metavar="FILE",
        help="subword-nmt BPE codes of the data (learn-bpe's output): raw text is "
        "Moses-tokenized and BPE-encoded, translations are detokenized",
    )
    p.add_argument(
        "--tokenizer",
        choices=["moses", "none"],
        help="with --bpe-codes: the data's tokenizer (default: moses, as fairseq's recipes)",
    )
    p.add_argument(
        "--moses-source-lang",
        metavar="LANG",
        help="the Moses tokenizer's language (default: the source language)",
    )
    p.add_argument(
        "--moses-target-lang",
        metavar="LANG",
        help="the Moses detokenizer's language (default: the target language)",
    )
    p.add_argument(
        "--lowercase",
        action=argparse.BooleanOptionalAction,
        help="lowercase the tokenized source, as the IWSLT'14 recipe lowercases its "
        "data (default: when the source dictionary has no upper-case symbol)",
    )
    p.add_argument(
        "--moses-aggressive-dash-splits",
        action="store_true",
        help="tokenizer.perl -a (fairseq's WMT recipes; not its IWSLT'14 one)",
    )


def settings_of(args, source_lang: str | None, target_lang: str | None, src_symbols) -> dict:
    """:class:`MosesBPE`'s keyword arguments from the options of :func:`add_arguments` (the
    languages and the source dictionary's symbols give the defaults)."""
    lowercase = args.lowercase
    if lowercase is None:
        lowercase = looks_lowercased(src_symbols)
    return {
        "codes": args.bpe_codes,
        "moses": args.tokenizer != "none",
        "source_lang": args.moses_source_lang or source_lang,
        "target_lang": args.moses_target_lang or target_lang,
        "lowercase": lowercase,
        "aggressive_dash_splits": args.moses_aggressive_dash_splits,
    }


def check_arguments(args) -> None:
    """The Moses options need ``--bpe-codes`` (a sentencepiece model carries its own rules)."""
    if args.bpe_codes is None:
        given = [
            f
            for f, v in (
                ("--tokenizer", args.tokenizer),
                ("--moses-source-lang", args.moses_source_lang),
                ("--moses-target-lang", args.moses_target_lang),
                ("--lowercase", args.lowercase),
                ("--moses-aggressive-dash-splits", args.moses_aggressive_dash_splits),
            )
            if v
        ]
        if given:
            raise TextError(f"{given[0]} goes with --bpe-codes FILE (Moses + subword-nmt BPE)")
    elif getattr(args, "spm", None) is not None:
        raise TextError("give a sentencepiece model (--spm) or BPE codes (--bpe-codes), not both")
    else:
        check_codes(args.bpe_codes)
