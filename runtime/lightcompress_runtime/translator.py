"""Translate with a model exported by ``lightcompress-export-onnx``: numpy + ONNX Runtime, no torch.

The export carries this package as ``runtime/`` beside a short ``translate.py`` that runs it;
it imports only numpy, onnxruntime and, for raw text, sentencepiece (an export made with
``--spm``) or sacremoses and subword-nmt (``--bpe-codes``: :mod:`.tokenizers`), so a deployment
needs neither torch nor fairseq nor lightcompress::

    python model-onnx/translate.py model-onnx --beam 5 < test.de > test.en
    python model-onnx/translate.py model-onnx --tokenized < test.bpe.de > test.bpe.en
    python -m lightcompress_runtime model-onnx < test.de > test.en     # pip install ./runtime

    from lightcompress_runtime import OnnxTranslator
    t = OnnxTranslator("model-onnx", beam=5, threads=1)
    t.translate(["Die Datei konnte nicht gelesen werden.", ""])   # -> ["...", ""]

An export without a tokenizer translates the data's subword tokens only (``--tokenized``,
``tokenized=True``) and refuses raw text with one line. The search is :class:`.OnnxGenerator`.
"""

from __future__ import annotations

import argparse
import contextlib
import math
import os
import sys
from collections.abc import Iterable, Sequence

import numpy as np

from .files import OnnxError, config_path, ort_errors, read_symbols
from .onnx_step import OnnxGenerator
from .tokenizers import MosesBPE, TextError, load_sentencepiece

__all__ = [
    "OnnxTranslator",
    "add_search_arguments",
    "left_pad_batches",
    "main",
    "split_lines",
    "translate_lines",
]


def split_lines(text: str) -> list[str]:
    """One item per input line, as fairseq reads text (lightcompress.io.split_lines: split at
    ``\\n`` only, a trailing ``\\r`` removed, nothing after a final ``\\n``)."""
    if not text:
        return []
    lines = text.split("\n")
    if lines[-1] == "":
        lines.pop()
    return [line.removesuffix("\r") for line in lines]


def add_search_arguments(p: argparse.ArgumentParser) -> None:
    """The search options of both translators (this one and ``lightcompress-translate``):
    beam, length penalty and limits as fairseq's, batch size, threads."""
    p.add_argument("--beam", type=int, default=5)
    p.add_argument("--lenpen", type=float, default=1.0)
    p.add_argument("--max-len-a", type=float, default=0.0, help="as fairseq's (default 0)")
    p.add_argument("--max-len-b", type=int, default=200, help="as fairseq's (default 200)")
    p.add_argument("--batch-size", type=int, default=32, help="sentences per batch (default 32)")
    p.add_argument("--threads", type=int, default=1, help="CPU threads (default 1)")


def left_pad_batches(sentences: Sequence[np.ndarray], batch_size: int, pad: int):
    """Batches of at most ``batch_size`` sentences of similar length (longest first),
    left-padded as fairseq pads sources: ``(indices, src_tokens [B x S], src_lengths [B])``."""
    order = sorted(range(len(sentences)), key=lambda i: (-len(sentences[i]), i))
    for start in range(0, len(order), batch_size):
        idx = order[start : start + batch_size]
        length = max(len(sentences[i]) for i in idx)
        src = np.full((len(idx), length), pad, dtype=np.int64)
        for row, i in enumerate(idx):
            s = sentences[i]
            src[row, length - len(s) :] = s
        yield idx, src, np.array([len(sentences[i]) for i in idx], dtype=np.int64)


class OnnxTranslator:
    """Raw text in, raw text out, with an export's tokenizer (its ``spm.model``, or Moses +
    its ``bpe.codes``). ``tokenized=True``: lines are the data's space-separated subword units
    and so are the translations (the only way to use an export without a tokenizer: raw text is
    refused with :class:`OnnxError`).

    Parameters are :class:`OnnxGenerator`'s, plus ``batch_size`` (sentences per batch);
    ``shortlist`` defaults to None: the export's vocabulary shortlist when it ships one
    (``False`` scores every token, fairseq's translations).
    """

    def __init__(
        self,
        model_dir: str,
        beam: int = 5,
        lenpen: float = 1.0,
        max_len_a: float = 0.0,
        max_len_b: int = 200,
        min_len: int = 1,
        batch_size: int = 32,
        threads: int = 1,
        unk_penalty: float = 0.0,
        shortlist: bool | None = None,
        tokenized: bool = False,
    ):
        for name, value in (
            ("beam", beam),
            ("batch_size", batch_size),
            ("threads", threads),
            ("min_len", min_len),
            ("max_len_b", max_len_b),
        ):
            if value < 1:
                raise OnnxError(f"{name} must be >= 1, got {value}")
        for name, value in (("lenpen", lenpen), ("max_len_a", max_len_a)):
            if not math.isfinite(value):
                raise OnnxError(f"{name} must be a finite number, got {value}")
        if max_len_a < 0:
            raise OnnxError("max_len_a must be >= 0")
        if max_len_a == 0 and min_len > max_len_b:
            raise OnnxError(f"min_len {min_len} is larger than max_len_b {max_len_b}")
        # (lengths past 2^31: the model's maximum length all the same, without an overflow)
        max_len_a, max_len_b = min(max_len_a, 2.0**31), min(max_len_b, 2**31)
        self.generator = OnnxGenerator(
            model_dir,
            beam_size=beam,
            len_penalty=lenpen,
            min_len=min_len,
            max_len_a=max_len_a,
            max_len_b=max_len_b,
            unk_penalty=unk_penalty,
            threads=threads,
            shortlist=shortlist,
        )
        config = self.generator.config
        self.batch_size = batch_size
        self.src_symbols = read_symbols(os.path.join(model_dir, "dict.src.txt"))
        self.tgt_symbols = read_symbols(os.path.join(model_dir, "dict.tgt.txt"))
        if (
            len(self.src_symbols) != config["src_vocab_size"]
            or len(self.tgt_symbols) != config["vocab_size"]
        ):
            raise OnnxError(f"the dictionaries in {model_dir} do not fit its config.json")
        self.src_index = {s: i for i, s in enumerate(self.src_symbols)}
        self.src_eos, self.src_unk, self.src_pad = (
            config[f"src_{k}"] for k in ("eos", "unk", "pad")
        )
        self.spm = None
        if config.get("spm"):
            try:
                self.spm = load_sentencepiece(config_path(model_dir, config, "spm"))
            except TextError as exc:
                raise OnnxError(str(exc)) from None
        self.bpe = None  # (Moses + BPE: loaded for raw text only)
        if config.get("bpe") and not tokenized:
            try:
                self.bpe = MosesBPE.from_export(model_dir, config["bpe"])
            except TextError as exc:
                raise OnnxError(str(exc)) from None
        self.tokenized = tokenized
        self.text_error = None  # (why raw text is refused: an export without a tokenizer)
        if not tokenized and self.spm is None and self.bpe is None:
            self.text_error = (
                f"{model_dir} has no tokenizer (exported without --spm or --bpe-codes): it takes "
                "the data's subword tokens, not raw text; give them space-separated with "
                "--tokenized (tokenized=True), or export again with the data's tokenizer"
            )

    def encode(self, line: str) -> np.ndarray:
        """Source ids (ending with EOS) of one raw line (``tokenized``: of its tokens)."""
        if self.tokenized:
            pieces = line.split()
        elif self.spm is not None:
            pieces = self.spm.encode(line, out_type=str)
        elif self.bpe is not None:
            pieces = self.bpe.encode(line)
        else:
            raise OnnxError(self.text_error)
        ids = [self.src_index.get(p, self.src_unk) for p in pieces]
        return np.array(ids + [self.src_eos], dtype=np.int64)

    def decode(self, ids: Sequence[int]) -> str:
        """Raw text of target ids (EOS excluded; ``tokenized``: their tokens)."""
        tokens = [self.tgt_symbols[i] for i in ids]
        if self.tokenized:
            return " ".join(tokens)
        if self.bpe is not None:  # the @@ marks removed, the Moses detokenizer
            return self.bpe.decode(tokens)
        text = " ".join(tokens)
        if self.spm is not None:  # fairseq's sentencepiece post-processing
            text = text.replace(" ", "").replace("\u2581", " ").strip()
        return text

    def translate_ids(self, sentences: Sequence[np.ndarray]) -> list[list[int]]:
        """Best hypothesis (target ids, no EOS) of every source id array."""
        out: list[list[int]] = [[] for _ in sentences]
        eos = self.generator.eos
        for idx, src, lengths in left_pad_batches(sentences, self.batch_size, self.src_pad):
            try:
                batch = self.generator.generate(src, lengths)
            except ort_errors() as exc:  # (graphs that do not fit config.json, checks passed)
                detail = " ".join(str(exc).split())[:200]
                raise OnnxError(
                    f"the export's graphs do not run with its config.json "
                    f"({detail}): export the model again"
                ) from None
            for i, hyps in zip(idx, batch):
                out[i] = [int(t) for t in hyps[0]["tokens"] if t != eos]
        return out

    def translate(self, lines: Iterable[str]) -> list[str]:
        """Translations of ``lines`` in order; an empty or blank line gives ``""``."""
        limit = self.generator.config.get("max_source_positions")
        return translate_lines(lines, self.encode, self.translate_ids, self.decode, limit)


def translate_lines(
    lines: Iterable[str],
    encode,
    translate_ids,
    decode,
    limit: int | None,
    error: type[Exception] = OnnxError,
) -> list[str]:
    """The text loop of both translators (this one and ``lightcompress-translate``'s): every
    non-blank line of ``lines`` encoded (refused with ``error`` when it has more than ``limit``
    source tokens, as fairseq-interactive refuses it), their best hypotheses
    (``translate_ids``) decoded; a blank line gives ``""``."""
    lines = [line.rstrip("\n") for line in lines]
    todo = [i for i, line in enumerate(lines) if line.strip()]
    encoded = [encode(lines[i]) for i in todo]
    for i, src in zip(todo, encoded):
        if limit and len(src) > limit:
            raise error(
                f"input line {i + 1} has {len(src)} tokens, more than the model's "
                f"{limit} source positions: split it"
            )
    out = [""] * len(lines)
    for i, hyp in zip(todo, translate_ids(encoded)):
        out[i] = decode(hyp)
    return out


def _arg_parser(prog: str | None = None) -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog=prog,
        description="Translate raw text (one sentence per line) with a lightcompress ONNX "
        "export and its tokenizer (numpy + onnxruntime; fairseq's beam search).",
    )
    p.add_argument("model_dir", help="the export's directory")
    add_search_arguments(p)
    p.add_argument(
        "--shortlist",
        action=argparse.BooleanOptionalAction,
        default=None,
        help="score only the candidates of the export's vocabulary shortlist (the "
        "default when the export ships one; --no-shortlist scores every token, "
        "as fairseq does)",
    )
    p.add_argument(
        "--tokenized",
        action="store_true",
        help="the input is the data's subword tokens (space-separated), and so is the "
        "output: no tokenizer (an export without one takes only this)",
    )
    p.add_argument("-i", "--input", help="input file (default: standard input)")
    p.add_argument("-o", "--output", help="output file, written atomically (default: stdout)")
    return p


def main(argv: Sequence[str] | None = None, prog: str | None = None) -> int:
    """The export's ``translate.py`` (and ``python -m lightcompress_runtime``): the exit status
    (errors as one line, status 2)."""
    prog = prog or os.path.basename(sys.argv[0]) or "translate.py"
    args = _arg_parser(prog).parse_args(argv)
    try:
        if args.output is not None:
            parent = os.path.dirname(os.path.abspath(args.output))
            if os.path.isdir(args.output):
                raise OnnxError(f"--output {args.output} is a directory")
            if not os.path.isdir(parent) or not os.access(parent, os.W_OK):
                raise OnnxError(f"--output {args.output}: {parent} is not a writable directory")
        if args.input is not None and not os.path.isfile(args.input):
            raise OnnxError(f"input file not found: {args.input}")
        if args.input is None and sys.stdin is None:  # (started with stdin closed)
            raise OnnxError("standard input is closed: give the text with -i FILE")
        if args.output is None and sys.stdout is None:
            raise OnnxError("standard output is closed: give a file with -o FILE")
        settings = {
            k: getattr(args, k)
            for k in (
                "beam",
                "lenpen",
                "max_len_a",
                "max_len_b",
                "batch_size",
                "threads",
                "shortlist",
                "tokenized",
            )
        }
        translator = OnnxTranslator(args.model_dir, **settings)
        if translator.text_error:  # (before reading the input)
            raise OnnxError(translator.text_error)
        try:
            if args.input is None:
                data = sys.stdin.buffer.read()
            else:
                with open(args.input, "rb") as f:
                    data = f.read()
            lines = split_lines(data.decode("utf-8"))
        except UnicodeDecodeError as exc:
            raise OnnxError(f"the input is not UTF-8 text ({exc.reason})") from None
        out = translator.translate(lines)
    except OnnxError as exc:
        print(f"{prog}: error: {exc}", file=sys.stderr)
        return 2
    text = "".join(line + "\n" for line in out)
    if args.output is None:
        sys.stdout.write(text)
    else:
        folder, name = os.path.split(os.path.abspath(args.output))
        tmp = os.path.join(folder, f".{name}.tmp{os.getpid()}")
        try:
            with open(tmp, "w", encoding="utf-8") as f:
                f.write(text)
            os.replace(tmp, args.output)
        except OSError as exc:  # a full disk, a file system turned read-only
            with contextlib.suppress(OSError):
                os.remove(tmp)
            print(f"{prog}: error: cannot write {args.output}: {exc.strerror}", file=sys.stderr)
            return 2
    return 0
