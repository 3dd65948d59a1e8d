"""Translating raw text with a PyTorch checkpoint on the fast path: a Python API and
``lightcompress-translate`` (an ONNX export translates with :mod:`lightcompress_runtime`).

::

    from lightcompress.deploy import Translator

    t = Translator("ckpt/checkpoint_best.pt", data="data-bin/demo",
                   spm="data/demo/spm/spm.model", beam=5, batch_size=32, threads=2)
    t.translate(["Die Datei konnte nicht gelesen werden.", ""])   # -> ["...", ""]

    lightcompress-translate --path ckpt.pt --data data-bin/demo --spm spm.model < in.de > out.en
    lightcompress-translate --path ckpt.pt --data data-bin/iwslt14 --bpe-codes code < in > out

Text goes through the data's tokenizer: sentencepiece (``--spm``, fairseq's own encoder as in
``fairseq-interactive`` and the hub interface), or Moses + subword-nmt BPE (``--bpe-codes``:
:class:`~lightcompress_runtime.tokenizers.MosesBPE`, as fairseq's IWSLT'14 recipe prepared the
data: Moses tokenizer of the source language unless ``--tokenizer none``, lowercasing when the
dictionary is lowercase, ``@@`` BPE; the same code as an ONNX export's), then the source
dictionary; hypotheses are turned back into text the other way round (``@@`` removed, Moses
detokenizer). With neither, lines are the data's subword tokens and so are the translations. Translation runs on :class:`~lightcompress.deploy.generator.FastGenerator` (fairseq's
beam search and results, the export's decoder step run eagerly, the checkpoint's compressed
weights as they are),
in batches of ``batch_size`` sentences of similar length, on ``threads`` CPU threads; ``int8``
quantizes the large maps (or all) first (:func:`lightcompress.deploy.quantize.quantize_model_int8`).
Empty (or blank) lines give empty translations. Every input error (a missing file, a
sentencepiece model that does not load, dictionaries that do not fit the checkpoint) is a
:class:`TranslateError` with one line; the command prints it and exits with status 2, writing
no output file.
"""

from __future__ import annotations

import argparse
import math
import os
import sys
from argparse import Namespace
from collections.abc import Iterable, Iterator, Sequence

import torch

from lightcompress import cli
from lightcompress.errors import LightcompressError

__all__ = ["TranslateError", "Translator", "cli_main", "left_pad_batches", "main"]


class TranslateError(LightcompressError, ValueError):
    """An input the translator cannot use (one line for the user)."""


def left_pad_batches(
    sentences: Sequence[torch.Tensor], batch_size: int, pad: int
) -> Iterator[tuple[list[int], torch.Tensor, torch.Tensor]]:
    """:func:`lightcompress_runtime.left_pad_batches` (batches of similar length, left-padded as
    fairseq pads sources) over tensors: ``(indices, src_tokens [B x S], src_lengths [B])``."""
    from lightcompress_runtime import left_pad_batches as batches

    arrays = [s.cpu().numpy() for s in sentences]
    for idx, src, lengths in batches(arrays, batch_size, pad):
        yield idx, torch.from_numpy(src), torch.from_numpy(lengths)


def _file(path: str | None, what: str) -> None:
    if path is not None and not os.path.isfile(path):
        raise TranslateError(f"{what} not found: {path}")


def _check_settings(beam, batch_size, threads, min_len, lenpen, max_len_a, max_len_b) -> None:
    """The search and batch settings of :class:`Translator` (TranslateError)."""
    for name, value in (
        ("beam", beam),
        ("batch_size", batch_size),
        ("threads", threads),
        ("min_len", min_len),
    ):
        if value < 1:
            raise TranslateError(f"{name} must be >= 1, got {value}")
    for name, value in (("lenpen", lenpen), ("max_len_a", max_len_a)):
        if not math.isfinite(value):
            raise TranslateError(f"{name} must be a finite number, got {value}")
    if max_len_a < 0 or max_len_b < 1:
        raise TranslateError("max_len_a must be >= 0 and max_len_b >= 1")
    if max_len_a == 0 and min_len > max_len_b:
        raise TranslateError(f"min_len {min_len} is larger than max_len_b {max_len_b}")


def _check_inputs(checkpoint, data, spm, bpe_codes, int8, tokenizer, shortlist) -> None:
    """The files and choices of :class:`Translator` (TranslateError)."""
    if spm is not None and bpe_codes is not None:
        raise TranslateError("give a sentencepiece model or BPE codes, not both")
    if int8 not in (False, None, True, "large", "all"):
        raise TranslateError(f"int8 must be 'large' or 'all', got {int8!r}")
    if tokenizer not in (None, "none", "moses"):
        raise TranslateError(f"tokenizer must be 'moses' or none, got {tokenizer!r}")
    _file(checkpoint, "checkpoint")
    _file(spm, "sentencepiece model")
    _file(bpe_codes, "BPE codes")
    if bpe_codes is not None:
        from lightcompress_runtime.tokenizers import TextError, check_codes

        try:
            check_codes(bpe_codes)
        except TextError as exc:
            raise TranslateError(str(exc)) from None
    _file(shortlist, "shortlist")
    if not data or not os.path.isdir(data):
        raise TranslateError(f"data directory not found: {data}")


def _load_model(checkpoint, data, source_lang, target_lang, int8):
    """The checkpoint's model (int8 when asked) and task; a DA-WID training checkpoint or
    dictionaries of another model refused (TranslateError)."""
    from lightcompress.checkpoint import CheckpointError, load_checkpoint

    try:
        model, task, _args = load_checkpoint(checkpoint, data, source_lang, target_lang)
    except CheckpointError as exc:
        message = str(exc)
        if "size mismatch" in message:
            message = (
                f"the dictionaries in {data} do not fit {checkpoint} (its embedding or "
                "output tables have another size): give the data directory the model was "
                "trained with"
            )
        raise TranslateError(message) from None
    arch = getattr(_args, "arch", None) or getattr(_args, "_name", None)
    if arch in ("dawid", "dawid_roberta"):
        raise TranslateError(
            f"{checkpoint} is a DA-WID training checkpoint (the teacher with compactors and "
            f"masks): fuse it first (lightcompress-convert dawid-fuse -i {checkpoint} -o "
            "FUSED.pt) and translate FUSED.pt"
        )
    if int8:
        from lightcompress.deploy.quantize import LARGE_MAP_ELEMENTS, quantize_model_int8

        large = LARGE_MAP_ELEMENTS if int8 in (True, "large") else 0
        model = quantize_model_int8(model, inplace=True, min_weight_elements=large)
    return model, task


class Translator:
    """A checkpoint ready to translate raw text (see the module notes).

    Parameters
    ----------
    checkpoint : str
        A fairseq checkpoint of any translation architecture (fairseq's or the plugin's).
    data : str
        The directory with the dictionaries the model was trained with (``dict.<lang>.txt``).
    spm : str, optional
        A sentencepiece model (``--bpe sentencepiece``).
    bpe_codes : str, optional
        subword-nmt BPE codes (``--bpe subword_nmt``), Moses-tokenized text by default.
    tokenizer : str, optional
        With ``bpe_codes``: ``"moses"`` (the default; the languages are the model's unless
        ``moses_source_lang`` / ``moses_target_lang`` are given) or ``None`` / ``"none"``.
    lowercase : bool, optional
        With ``bpe_codes``: lowercase the tokenized source (default: when the source
        dictionary has no upper-case symbol, as after the IWSLT'14 recipe).
    moses_aggressive_dash_splits : bool
        ``tokenizer.perl -a`` (fairseq's WMT recipes).
    beam, lenpen, max_len_a, max_len_b, min_len
        Generation settings, as fairseq's flags.
    batch_size : int
        Sentences per batch.
    threads : int
        torch CPU threads.
    int8 : bool or str
        Dynamic int8 quantization: ``"large"`` (or ``True``) the maps with at least 2^17
        weights (the output projection, dense maps; small factors stay float32, where int8
        is slower at small batches), ``"all"`` every linear map.
    shortlist : str, optional
        A vocabulary shortlist of the model's data (``lightcompress-shortlist``): the output
        layer scores only each batch's candidates (:mod:`lightcompress.deploy.shortlist`;
        scores renormalized over them, so they differ from fairseq's). Off by default.
    """

    def __init__(
        self,
        checkpoint: str,
        data: str,
        spm: str | None = None,
        bpe_codes: str | None = None,
        tokenizer: str | None = "moses",
        source_lang: str | None = None,
        target_lang: str | None = None,
        beam: int = 5,
        lenpen: float = 1.0,
        max_len_a: float = 0.0,
        max_len_b: int = 200,
        min_len: int = 1,
        batch_size: int = 32,
        threads: int = 1,
        int8: bool | str = False,
        shortlist: str | None = None,
        lowercase: bool | None = None,
        moses_aggressive_dash_splits: bool = False,
        moses_source_lang: str | None = None,
        moses_target_lang: str | None = None,
    ):
        _check_settings(beam, batch_size, threads, min_len, lenpen, max_len_a, max_len_b)
        _check_inputs(checkpoint, data, spm, bpe_codes, int8, tokenizer, shortlist)
        import lightcompress.plugin  # noqa: F401  (plugin architectures; checkpoints load)

        torch.set_num_threads(threads)
        self.batch_size = batch_size
        self.bpe = self.moses_bpe = None  # (sentencepiece: fairseq's encoder; Moses + BPE)
        self._build_encoders(spm)
        model, task = _load_model(checkpoint, data, source_lang, target_lang, int8)
        self.model, self.task = model, task
        self.src_dict, self.tgt_dict = task.source_dictionary, task.target_dictionary
        from lightcompress.deploy.text_fit import (
            TextFitError,
            check_tokenizer_fits,
            task_dictionaries,
        )

        try:  # (codes or a sentencepiece model of another corpus: <unk> for most of the text)
            check_tokenizer_fits(task_dictionaries(task, data), spm=spm, codes=bpe_codes)
        except TextFitError as exc:
            raise TranslateError(str(exc)) from None
        if bpe_codes is not None:  # Moses + subword-nmt BPE (the ONNX export's own code)
            moses = (tokenizer == "moses", moses_aggressive_dash_splits)
            langs = (moses_source_lang, moses_target_lang)
            self.moses_bpe = self._moses_bpe(bpe_codes, langs, moses, lowercase)
        from lightcompress.deploy.generator import FastGenerator
        from lightcompress.deploy.shortlist import ShortlistError, load_shortlist

        try:
            self.shortlist = shortlist and load_shortlist(shortlist, self.src_dict, self.tgt_dict)
        except ShortlistError as exc:
            raise TranslateError(str(exc)) from None
        # (lengths past 2^31: the model's maximum length all the same, without an overflow)
        max_len_a, max_len_b = min(max_len_a, 2.0**31), min(max_len_b, 2**31)
        self.generator = FastGenerator(
            model,
            self.tgt_dict,
            beam_size=beam,
            len_penalty=lenpen,
            min_len=min_len,
            max_len_a=max_len_a,
            max_len_b=max_len_b,
            shortlist=self.shortlist or None,
        )

    def _moses_bpe(self, bpe_codes: str, langs, moses: tuple, lowercase):
        """Moses + subword-nmt BPE of the runtime: ``langs`` (source, target) default to the
        task's, ``moses`` is (tokenize with Moses, aggressive dash splits), ``lowercase``
        (None: as the source dictionary looks)."""
        from lightcompress_runtime.tokenizers import MosesBPE, TextError, looks_lowercased

        cfg = getattr(self.task, "cfg", None) or getattr(self.task, "args", None)
        if lowercase is None:
            lowercase = looks_lowercased(self.src_dict.symbols)
        try:
            return MosesBPE(
                bpe_codes,
                langs[0] or getattr(cfg, "source_lang", None),
                langs[1] or getattr(cfg, "target_lang", None),
                moses=moses[0],
                lowercase=lowercase,
                aggressive_dash_splits=moses[1],
            )
        except TextError as exc:
            raise TranslateError(str(exc)) from None

    def _build_encoders(self, spm) -> None:
        from fairseq.data import encoders

        try:
            if spm is not None:
                self.bpe = encoders.build_bpe(
                    Namespace(
                        bpe="sentencepiece",
                        sentencepiece_model=spm,
                        sentencepiece_enable_sampling=False,
                        sentencepiece_alpha=None,
                    )
                )
        except (RuntimeError, OSError, ValueError) as exc:
            detail = " ".join(str(exc).split())[:200]
            raise TranslateError(f"cannot load the sentencepiece model {spm}: {detail}") from None

    def encode(self, line: str) -> torch.Tensor:
        """Source ids (ending with EOS) of one raw line."""
        if self.bpe is not None:
            line = self.bpe.encode(line)
        elif self.moses_bpe is not None:
            line = " ".join(self.moses_bpe.encode(line))
        return self.src_dict.encode_line(line, add_if_not_exist=False, append_eos=True).long()

    def decode(self, tokens: Sequence[int]) -> str:
        """Raw text of target ids (EOS excluded)."""
        if self.moses_bpe is not None:  # @@ removed, the Moses detokenizer
            return self.moses_bpe.decode([self.tgt_dict[t] for t in tokens])
        text = self.tgt_dict.string(torch.tensor(list(tokens), dtype=torch.long))
        if self.bpe is not None:
            text = self.bpe.decode(text)
        return text

    def translate_ids(self, sentences: Sequence[torch.Tensor]) -> list[list[int]]:
        """Best hypothesis (target ids, no EOS) of every source id tensor."""
        out: list[list[int]] = [[] for _ in sentences]
        eos = self.tgt_dict.eos()
        for idx, src, lengths in left_pad_batches(sentences, self.batch_size, self.src_dict.pad()):
            for i, hyps in zip(idx, self.generator.generate(src, lengths)):
                out[i] = [t for t in hyps[0]["tokens"].tolist() if t != eos]
        return out

    def translate(self, lines: Iterable[str]) -> list[str]:
        """Translations of ``lines`` in order; an empty or blank line gives ``""`` (the ONNX
        runtime's text loop, :func:`lightcompress_runtime.translator.translate_lines`)."""
        from lightcompress_runtime.translator import translate_lines

        limit = self.model.max_positions()[0]
        return translate_lines(
            lines, self.encode, self.translate_ids, self.decode, limit, TranslateError
        )


def _arg_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="lightcompress-translate",
        description="Translate raw text (one sentence per line; with --spm or --bpe-codes, "
        "else the data's subword tokens) with a fairseq checkpoint of "
        "any lightcompress or fairseq translation architecture, on the fast path "
        "(fairseq's beam search and results, compressed weights kept).",
    )
    p.add_argument("--path", required=True, help="checkpoint")
    p.add_argument("--data", required=True, help="directory with the model's dictionaries")
    p.add_argument("--spm", help="sentencepiece model of the data")
    from lightcompress_runtime.tokenizers import add_arguments

    add_arguments(p)  # --bpe-codes and the Moses options
    p.add_argument(
        "-s",
        "--source-lang",
        help="source language (the dictionaries' dict.SRC.txt; "
        "needed when the checkpoint does not name it; the moses tokenizer's)",
    )
    p.add_argument("-t", "--target-lang", help="target language (as -s)")
    p.add_argument(
        "--tokenized",
        action="store_true",
        help="the input is the data's space-separated subword tokens, and so is the output (no "
        "--spm / --bpe-codes; without a tokenizer, input is taken as tokens with a notice)",
    )
    from lightcompress_runtime.translator import add_search_arguments

    add_search_arguments(p)  # (the export's translate.py has the same)
    p.add_argument(
        "--int8",
        nargs="?",
        const="large",
        choices=["large", "all"],
        help="dynamic int8 quantization: of the large maps (default), or of all",
    )
    p.add_argument(
        "--shortlist",
        metavar="FILE",
        help="score only the candidates of this vocabulary shortlist (lightcompress-shortlist)",
    )
    p.add_argument("-i", "--input", help="input file (default: standard input)")
    p.add_argument("-o", "--output", help="output file, written atomically (default: stdout)")
    return p


PROG = "lightcompress-translate"


def main(argv: Sequence[str] | None = None) -> int:
    """``lightcompress-translate``: the exit status (errors as one line, status 2)."""
    return cli.run(_main, argv, PROG)


def _main(argv: Sequence[str] | None) -> int:
    args = _arg_parser().parse_args(argv)
    if args.output is not None:
        from lightcompress.io import output_error

        message = output_error(args.output, "--output")
        if message:
            raise TranslateError(message)
    _file(args.input, "input file")
    if args.input is None and sys.stdin is None:  # (started with stdin closed)
        raise TranslateError("standard input is closed: give the text with -i FILE")
    if args.output is None and sys.stdout is None:
        raise TranslateError("standard output is closed: give a file with -o FILE")
    from lightcompress_runtime.tokenizers import TextError, check_arguments

    try:
        check_arguments(args)
    except TextError as exc:
        raise TranslateError(str(exc)) from None
    if args.tokenized and (args.spm or args.bpe_codes):
        raise TranslateError(
            "--tokenized takes subword tokens: give it without --spm / --bpe-codes"
        )
    codes = os.path.join(args.data, "bpe.code")
    notice = None
    if not (args.tokenized or args.spm or args.bpe_codes):
        if os.path.isfile(codes):  # (the IWSLT'14 recipe's copy: raw text, as the export)
            args.bpe_codes = codes
            notice = (
                f"raw text in and out: Moses + BPE with {codes} (--tokenized for the "
                "data's subword tokens)"
            )
        else:
            notice = (
                "no --spm or --bpe-codes: the input is taken as the data's subword tokens "
                "and the output is tokens too (give the data's tokenizer for raw text; "
                "--tokenized says so and drops this notice)"
            )
    translator = Translator(
        args.path,
        args.data,
        spm=args.spm,
        bpe_codes=args.bpe_codes,
        tokenizer=args.tokenizer or "moses",
        lowercase=args.lowercase,
        moses_aggressive_dash_splits=args.moses_aggressive_dash_splits,
        moses_source_lang=args.moses_source_lang,
        moses_target_lang=args.moses_target_lang,
        source_lang=args.source_lang,
        target_lang=args.target_lang,
        beam=args.beam,
        lenpen=args.lenpen,
        max_len_a=args.max_len_a,
        max_len_b=args.max_len_b,
        batch_size=args.batch_size,
        threads=args.threads,
        int8=args.int8 or False,
        shortlist=args.shortlist,
    )
    from lightcompress.io import read_text_lines

    try:
        lines = read_text_lines(args.input)  # at \n only, as fairseq
    except UnicodeDecodeError as exc:
        raise TranslateError(f"the input is not UTF-8 text ({exc.reason})") from None
    out = translator.translate(lines)
    text = "".join(line + "\n" for line in out)
    if args.output is None:
        sys.stdout.write(text)
    else:
        from lightcompress.io import atomic_write

        try:
            with atomic_write(args.output) as f:
                f.write(text)
        except OSError as exc:  # a full disk, a read-only file system (atomic: nothing left)
            raise TranslateError(f"cannot write {args.output}: {exc.strerror or exc}") from None
    if notice:  # (after a success only: an error stays one line)
        print(f"{PROG}: {notice}", file=sys.stderr)
    return 0


cli_main = cli.entry_point(main, quiet=True)
