"""Translation speed (tokens/s) on the papers' CPU protocol, several models side by side.

Protocol (Hypoformer appendix A.4, LightFormer section 4.3), all settable:

- 50 source sentences of the average length (``--src-len``: 23 for IWSLT-style data, the
  default; 30 for WMT), batch size 1, one CPU thread (``--threads``), beam 5 (``--beam``),
  ``--lenpen`` as given;
- 10 timed runs over those sentences (``--runs``) after ``--warmup`` untimed runs;
- the fastest and the slowest 10 % of runs dropped (``--trim``), the mean of the rest reported;
- tokens/s = generated target tokens / wall time of the run. **The EOS of each hypothesis is not
  counted** (only the best hypothesis of the beam counts). Source encoding, beam search and the
  output projection are all inside the timed region; reading data is not.

Decoding goes through fairseq's own ``SequenceGenerator`` built by ``task.build_generator`` and
``task.inference_step`` (what ``fairseq-generate`` runs), for fairseq's Transformers and every
plugin architecture alike.

Sentences: with ``--data DIR`` the ``--num-sentences`` sentences of ``--subset`` whose source
length (without EOS) is closest to ``--src-len`` (ties: lower index first; deterministic);
without data, random word ids of exactly ``--src-len`` tokens (+ EOS) from ``--seed``.

Output length: ``--min-len L --max-len L`` forces every hypothesis to L tokens (+ EOS), mapped
to SequenceGenerator's ``min_len=L, max_len_a=0, max_len_b=L``, so that models do equal work
(needed for untrained models, which otherwise stop at arbitrary lengths). When models with random
weights are measured and no length is given, the output length is forced to ``--src-len``.

Models (interleaved: A B C A B C ... one run of each per round):

- ``--path [LABEL=]a.pt,[LABEL=]b.pt`` with ``--data DIR`` (trained checkpoints);
- ``--arch SPEC,SPEC,...`` with ``--vocab-size N`` (random weights, joined dictionary of N
  entries, ``--share-all-embeddings`` unless ``--no-share-all-embeddings``; with ``--data`` the
  data's dictionary is used instead). ``SPEC`` is ``[LABEL=]ARCH[:--flag[=value]]...``, e.g.
  ``12-2=transformer_iwslt_de_en:--encoder-layers=12:--decoder-layers=2`` (see
  :class:`lightcompress.measure.params.ModelSpec`).

``--quantize int8`` measures int8 versions (``quantize_model_int8``); ``--compare-int8`` measures
each model in float32 and int8. ``--bleu`` (needs ``--data``) translates the whole ``--subset``
with the same beam and length penalty (batches of ``--batch-size``; forced lengths are NOT
applied) and reports sacreBLEU of the ``--post-process``-ed (e.g. BPE-removed) text; the table is
followed by sacreBLEU's signature (``BLEU: sacreBLEU nrefs:1|case:mixed|...``).
Engines, size, memory: ``--fast`` times every model also on lightcompress's fast path
(:class:`lightcompress.deploy.generator.FastGenerator`: fairseq's search and results, the ONNX
export's decoder step run eagerly over the model's own, compressed modules). ``--ct2`` exports every dense model (fairseq's Transformers, dense
plugin architectures; :mod:`lightcompress.deploy.ct2`) to CTranslate2 and times it in float32
and int8 (int8 weights on disk, CTranslate2's int8 GEMMs) next to the fairseq rows, on the same
sentences with the same beam, length penalty and output lengths (:mod:`lightcompress.measure.engines`);
compressed models get a ``note:`` line instead (CTranslate2 would store them dense), and so does
the run without ctranslate2 installed (the ``[ct2]`` extra: no CTranslate2 rows). ``Size`` is
the model's weights as stored (fairseq: ``torch.save(state_dict())``, shared tensors once;
CTranslate2: its model directory). ``--memory`` adds the peak resident memory of a fresh process
per model that imports only its engine, loads the model and translates the timing sentences once
(:mod:`lightcompress.measure.memory`). ``--onnx`` exports every model that
:mod:`lightcompress.deploy.onnx_export` can express (fairseq's Transformer, LightFormer,
Hypoformer, Smartformer, Subformer; compressed weights kept) and times it on ONNX Runtime
(:class:`lightcompress.runtime.OnnxGenerator`, engine ``onnxruntime``) in float32,
and in ONNX Runtime's int8 with ``--int8-large`` (the large maps) / ``--compare-int8`` (every
map); its size is the export directory. ``--shortlist FILE`` (``--fast``, ``--onnx``, ``--ct2``:
as its vocabulary map) adds those rows again scoring only a vocabulary shortlist's candidates
(:mod:`lightcompress.deploy.shortlist`; engine ``...+shortlist`` in the table, BLEU with it).
``--natural``: every k-th sentence of the split at its own length; ``--sort-batches``: batches
longest first; ``--text SPM``: each ONNX Runtime / CTranslate2 / fast-path row again from raw
text to raw text (engine ``...+text``; :mod:`lightcompress.measure.text`).

``--json OUT`` writes every raw run, the protocol, date, CPU model and library versions (the
file is written atomically).

Bad input (a value out of range, a missing, damaged or foreign checkpoint, an architecture
fairseq does not know, a ``--json`` path that cannot be written) ends the command with one line
on stderr and exit status 2, and everything that needs no model, the output path included, is
checked before any model is loaded or timed.
"""

from __future__ import annotations

import argparse
import math
import os
import sys
from argparse import Namespace
from collections.abc import Sequence

import torch

from lightcompress import cli
from lightcompress.checkpoint import load_checkpoint  # (re-exported: its old home)
from lightcompress.errors import one_line
from lightcompress.measure.candidates import (  # (re-exported: their old home)
    Candidate,
    SpeedError,
    directory_bytes,
    load_candidates,
    split_label,
    state_dict_bytes,
    with_ct2,
    with_fast,
    with_int8,
    with_onnx,
)
from lightcompress.measure.protocol import (  # (re-exported)
    as_samples,
    measure,
    pick_sentences,
    random_sentences,
    sacrebleu_of,
    time_run,
)
from lightcompress.measure.report import (  # (re-exported)
    bleu_lines,
    cpu_model,
    environment,
    format_results,
    protocol_line,
    write_json,
)
from lightcompress.measure.timing import (
    trim_count,
)

__all__ = [
    "Candidate",
    "SpeedError",
    "bleu_lines",
    "check_args",
    "check_output_file",
    "cli_main",
    "cpu_model",
    "directory_bytes",
    "format_results",
    "load_candidates",
    "load_checkpoint",
    "main",
    "measure",
    "pick_sentences",
    "random_sentences",
    "sacrebleu_of",
    "state_dict_bytes",
    "time_run",
    "with_ct2",
    "with_fast",
    "with_int8",
    "with_onnx",
    "write_json",
]

PROG = "measure_speed"
IWSLT_AVG_LEN = 23
WMT_AVG_LEN = 30


# --------------------------------------------------------------------------------------------
# command line
# --------------------------------------------------------------------------------------------


def _arg_parser() -> argparse.ArgumentParser:
    p = cli.OneLineParser(
        prog=PROG,
        description="Translation speed (tokens/s) of fairseq models on the papers' CPU "
        "protocol, side by side. See the module docstring of lightcompress.measure.speed.",
    )
    m = p.add_argument_group("models")
    m.add_argument(
        "--path",
        action="append",
        default=[],
        help="comma-separated checkpoints, each [LABEL=]PATH (needs --data)",
    )
    m.add_argument(
        "--arch",
        action="append",
        default=[],
        help="comma-separated random-weight model specs "
        "[LABEL=]ARCH[:--flag[=value]]... (needs --vocab-size or --data)",
    )
    m.add_argument(
        "--vocab-size", type=int, help="joined dictionary size for --arch without --data"
    )
    m.add_argument(
        "--no-share-all-embeddings",
        dest="share_all_embeddings",
        action="store_false",
        help="--arch models: do not add --share-all-embeddings",
    )
    m.add_argument("--user-dir", help="an extra fairseq --user-dir to import")
    d = p.add_argument_group("sentences")
    d.add_argument("--data", help="fairseq data-bin directory (dictionaries, --subset)")
    d.add_argument("--subset", default="test", help="split to take sentences from (default test)")
    d.add_argument("--num-sentences", type=int, default=50, help="default 50")
    d.add_argument(
        "--src-len",
        type=int,
        default=IWSLT_AVG_LEN,
        help=f"average source length: {IWSLT_AVG_LEN} IWSLT (default), {WMT_AVG_LEN} WMT",
    )
    d.add_argument(
        "--natural",
        action="store_true",
        help="with --data: every k-th sentence of --subset at its own length (k = the split's "
        "size // --num-sentences) instead of those closest to --src-len",
    )
    d.add_argument("--seed", type=int, default=1, help="random sentences and random weights")
    g = p.add_argument_group("generation")
    g.add_argument("--beam", type=int, default=5)
    g.add_argument("--lenpen", type=float, default=1.0)
    g.add_argument("--min-len", type=int, help="force at least this many output tokens")
    g.add_argument("--max-len", type=int, help="at most this many output tokens (max_len_a=0)")
    g.add_argument(
        "--max-len-a", type=float, default=0.0, help="fairseq max_len_a when --max-len is not given"
    )
    g.add_argument(
        "--max-len-b", type=int, default=200, help="fairseq max_len_b when --max-len is not given"
    )
    t = p.add_argument_group("timing")
    t.add_argument(
        "--timing-batch-size",
        type=int,
        default=1,
        help="sentences per batch in the timed runs (default 1, the papers' protocol; "
        "consecutive sentences, left-padded)",
    )
    t.add_argument(
        "--sort-batches",
        action="store_true",
        help="batch the timing sentences longest first (as fairseq-generate and the translators "
        "batch a file) instead of in their order; every engine gets the same batches",
    )
    t.add_argument("--threads", type=int, default=1, help="torch CPU threads (default 1)")
    t.add_argument("--runs", type=int, default=10, help="timed runs per model (default 10)")
    t.add_argument("--warmup", type=int, default=1, help="untimed runs per model first (default 1)")
    t.add_argument(
        "--trim",
        type=float,
        default=0.1,
        help="fraction of fastest and of slowest runs dropped (default 0.1)",
    )
    q = p.add_argument_group("int8 and BLEU")
    q.add_argument(
        "--quantize",
        choices=["none", "int8", "int8-large"],
        default="none",
        help="measure dynamically int8-quantized models (int8-large: only the maps with at "
        "least 2^17 weights, e.g. the output projection; small factors stay float32)",
    )
    q.add_argument(
        "--int8-large",
        action="store_true",
        help="also measure each model with only its large maps in int8 (see --quantize)",
    )
    q.add_argument(
        "--compare-int8", action="store_true", help="measure each model in float32 and int8"
    )
    q.add_argument(
        "--bleu", action="store_true", help="also translate all of --subset and report sacreBLEU"
    )
    q.add_argument(
        "--batch-size", type=int, default=32, help="batch size of the --bleu translation"
    )
    q.add_argument(
        "--post-process",
        "--remove-bpe",
        dest="post_process",
        nargs="?",
        const="@@ ",
        default=None,
        help="fairseq post-processing before BLEU (e.g. subword_nmt, sentencepiece)",
    )
    q.add_argument("--bleu-tokenize", default="13a", help="sacreBLEU tokenizer (default 13a)")
    q.add_argument(
        "--bleu-threads",
        type=int,
        default=None,
        help="torch CPU threads of the --bleu translation (default: --threads); the timed runs "
        "always use --threads",
    )
    e = p.add_argument_group("engines, size and memory")
    e.add_argument(
        "--ct2",
        action="store_true",
        help="also time CTranslate2 exports (float32 and int8) of every dense model "
        "(lightcompress.deploy.ct2; needs ctranslate2, the [ct2] extra); compressed models are "
        "listed as not exportable",
    )
    e.add_argument(
        "--fast",
        action="store_true",
        help="also time every model on lightcompress's fast path (lightcompress.deploy: "
        "fairseq's beam search and results, the ONNX export's encoder and decoder step run "
        "eagerly in torch), float32 and int8 alike",
    )
    e.add_argument(
        "--onnx",
        action="store_true",
        help="also time ONNX Runtime exports (lightcompress.deploy.onnx_export: compressed "
        "weights kept, numpy beam search) of every model it can export, in float32 and, with "
        "--int8-large / --compare-int8, in ONNX Runtime's int8 of the large maps / of every map",
    )
    e.add_argument(
        "--shortlist",
        metavar="FILE",
        help="with --fast / --onnx / --ct2: also time each of those rows scoring only the candidates "
        "of this vocabulary shortlist (lightcompress-shortlist; CTranslate2: its vmap; BLEU too)",
    )
    e.add_argument(
        "--text",
        metavar="SPM",
        help="also time every ONNX Runtime, CTranslate2 and fast-path row from raw text to raw "
        "text with this sentencepiece model (encoding, dictionary lookup and decoding in the "
        "timed path, as the WNGT / WMT efficiency tasks time it): engine ...+text, right after "
        "the row timed on ids (lightcompress.measure.text)",
    )
    e.add_argument(
        "--ct2-dir",
        help="keep the CTranslate2 exports in this (new or empty) directory instead of a "
        "temporary one",
    )
    e.add_argument(
        "--memory",
        action="store_true",
        help="add the peak resident memory of each model: one fresh process per model (the "
        "engine's imports only) loads it and translates the timing sentences once",
    )
    p.add_argument("--json", dest="json_out", help="write all results and raw runs to this file")
    p.add_argument("--quiet", action="store_true", help="no per-run progress on stderr")
    return p  # fmt: skip


def _split_list(values: Sequence[str]) -> list[str]:
    return [x for v in values for x in v.split(",") if x.strip()]


def check_output_file(path: str, flag: str) -> None:
    """Raise :class:`SpeedError` unless ``path`` can be written: not a directory, in an existing
    writable directory (probed by creating and removing a temporary file there). Called before
    any work, so that a measurement of hours does not end in a failed write."""
    from lightcompress.io import output_error

    message = output_error(path, flag)
    if message:
        raise SpeedError(message)


def check_args(args: argparse.Namespace) -> None:
    """The checks of every command-line value that need no model (:class:`SpeedError`)."""
    for name, value in (("--runs", args.runs), ("--num-sentences", args.num_sentences),
                        ("--src-len", args.src_len), ("--beam", args.beam),
                        ("--threads", args.threads), ("--batch-size", args.batch_size),
                        ("--timing-batch-size", args.timing_batch_size),
                        ("--bleu-threads", 1 if args.bleu_threads is None else args.bleu_threads)
                        ):  # fmt: skip
        if value < 1:
            raise SpeedError(f"{name} must be >= 1, got {value}")
    if args.vocab_size is not None and args.vocab_size < 5:
        raise SpeedError(
            f"--vocab-size must be >= 5 (4 special symbols + a word), got {args.vocab_size}"
        )
    if args.warmup < 0:
        raise SpeedError("--warmup must be >= 0")
    if not 0 <= args.trim < 0.5:
        raise SpeedError("--trim must be in [0, 0.5)")
    for name, value in (("--min-len", args.min_len), ("--max-len", args.max_len)):
        if value is not None and value < 1:
            raise SpeedError(f"{name} must be >= 1, got {value}")
    if args.max_len_a < 0 or args.max_len_b < 1:
        raise SpeedError("--max-len-a must be >= 0 and --max-len-b >= 1")
    if not math.isfinite(args.lenpen):
        raise SpeedError(f"--lenpen must be a number, got {args.lenpen}")
    if args.path and not args.data:
        raise SpeedError("--path needs --data (the checkpoints' data-bin directory)")
    if args.bleu and not args.data:
        raise SpeedError("--bleu needs --data")
    if args.data and not os.path.isdir(args.data):
        raise SpeedError(f"--data is not a directory: {args.data}")
    for item in _split_list(args.path):
        path = split_label(item)[1]
        if not os.path.exists(path):
            raise SpeedError(f"checkpoint not found: {path}")
        if not os.path.isfile(path):
            raise SpeedError(f"checkpoint {path} is not a file")
    if args.json_out is not None:
        check_output_file(args.json_out, "--json")
    if args.shortlist is not None:
        if not (args.fast or args.onnx or args.ct2):
            raise SpeedError("--shortlist needs --fast, --onnx or --ct2")
        if not os.path.isfile(args.shortlist):
            raise SpeedError(f"--shortlist {args.shortlist}: file not found")
    from lightcompress.measure import text

    text.check_args(args)
    if args.natural and not args.data:
        raise SpeedError("--natural needs --data")
    if args.ct2_dir is not None:
        if not args.ct2:
            raise SpeedError("--ct2-dir needs --ct2")
        if os.path.exists(args.ct2_dir) and (
            not os.path.isdir(args.ct2_dir) or os.listdir(args.ct2_dir)
        ):
            raise SpeedError(f"--ct2-dir {args.ct2_dir} must be a new or empty directory")
        parent = os.path.dirname(os.path.abspath(args.ct2_dir))
        if not os.path.isdir(parent) or not os.access(parent, os.W_OK):
            raise SpeedError(f"--ct2-dir {args.ct2_dir}: cannot create it in {parent}")


def run(args: argparse.Namespace) -> dict:
    """Everything the command line does; returns the JSON document.

    Every argument and the ``--json`` output are checked before anything is loaded or timed.
    """
    import tempfile

    check_args(args)
    with tempfile.TemporaryDirectory(prefix="measure_speed.") as workdir:
        return _run(args, workdir)


def _run(args: argparse.Namespace, workdir: str) -> dict:
    if args.user_dir:
        from fairseq import utils

        try:
            utils.import_user_module(Namespace(user_dir=args.user_dir))
        except FileNotFoundError:
            raise SpeedError(f"--user-dir {args.user_dir}: no such directory") from None
        except ImportError as exc:
            raise SpeedError(f"--user-dir {args.user_dir}: {one_line(exc)}") from None
    import lightcompress  # noqa: F401  (plugin architectures)

    torch.set_num_threads(args.threads)
    try:
        torch.set_num_interop_threads(args.threads)
    except RuntimeError:  # already set in this process
        pass

    candidates = load_candidates(
        _split_list(args.path), args.arch, args.data, args.vocab_size,
        args.share_all_embeddings, args.seed,
    )  # fmt: skip
    notes = []
    log = None if args.quiet else (lambda msg: print(msg, file=sys.stderr, flush=True))
    ct2 = []
    if args.ct2:
        ct2_dir = args.ct2_dir or os.path.join(workdir, "ct2")
        ct2, notes = with_ct2(candidates, ct2_dir, args.threads, log, shortlist=args.shortlist)
    if args.onnx:
        onnx_variants = [v for v, on in (("int8-large", args.int8_large),
                                         ("int8", args.compare_int8)) if on]  # fmt: skip
        onnx, onnx_notes = with_onnx(
            candidates, os.path.join(workdir, "onnx"), args.threads, onnx_variants, log,
            shortlist=args.shortlist,
        )  # fmt: skip
        ct2, notes = onnx + ct2, notes + onnx_notes
    variants = [v for v, on in (("int8", args.compare_int8 or args.quantize == "int8"),
                                ("int8-large", args.int8_large or args.quantize == "int8-large"))
                if on]  # fmt: skip
    if variants:
        keep_float = args.compare_int8 or args.int8_large
        candidates = with_int8(candidates, keep_float=keep_float, variants=variants)
    candidates = candidates + ct2

    first = candidates[0].task
    for c in candidates[1:]:
        if len(c.task.source_dictionary) != len(first.source_dictionary):
            raise SpeedError(
                f"{c.label} has a source dictionary of {len(c.task.source_dictionary)} entries, "
                f"{candidates[0].label} of {len(first.source_dictionary)}: they cannot translate "
                "the same sentences"
            )
    if args.data:
        sentences = pick_sentences(
            first, args.subset, args.num_sentences, args.src_len, natural=args.natural
        )
        sentences_from = f"{args.subset} split of {args.data}{', natural lengths' * args.natural}"
    else:
        sentences = random_sentences(
            first.source_dictionary, args.num_sentences, args.src_len, args.seed
        )
        sentences_from = "random word ids"
    if args.sort_batches:  # (stable: equal lengths keep their order)
        sentences = sorted(sentences, key=lambda s: -s.numel())

    min_len, max_len_a, max_len_b = 1, args.max_len_a, args.max_len_b
    if args.max_len is None and args.min_len is None and any(c.random_weights for c in candidates):
        min_len, max_len_a, max_len_b = args.src_len, 0, args.src_len
    if args.min_len is not None:
        min_len = args.min_len
    if args.max_len is not None:
        max_len_a, max_len_b = 0, args.max_len
    if max_len_a == 0 and min_len > max_len_b:
        raise SpeedError(f"--min-len {min_len} exceeds the maximum length {max_len_b}")
    gen_args = Namespace(
        beam=args.beam, lenpen=args.lenpen, min_len=min_len, max_len_a=max_len_a,
        max_len_b=max_len_b,
    )  # fmt: skip
    if args.fast:
        candidates = with_fast(candidates, gen_args, shortlist=args.shortlist)
    if args.text is not None:
        from lightcompress.measure.text import with_text

        candidates = with_text(candidates, args.text)
    records = measure(
        candidates,
        as_samples(sentences, args.timing_batch_size, first.source_dictionary.pad()),
        gen_args, args.runs, args.warmup, args.trim, log,
        sentences=sentences, batch_size=args.timing_batch_size,
    )  # fmt: skip
    if args.memory:
        from lightcompress.measure.memory import measure_peak_rss, write_job

        for i, (c, rec) in enumerate(zip(candidates, records)):
            if c.text:  # (the same process as the row timed on ids)
                continue
            try:
                mem = measure_peak_rss(write_job(workdir, i, c, sentences, gen_args))
            except (RuntimeError, OSError) as exc:
                raise SpeedError(f"{c.label} [{c.engine} {c.precision}]: {exc}") from None
            rec["peak_rss_kib"] = mem["peak_kib"]
            rec["baseline_rss_kib"] = mem["baseline_kib"]
            if log:
                log(f"memory {c.label} [{c.engine} {c.precision}]: peak {mem['peak_kib']} KiB")
    protocol = {
        "num_sentences": len(sentences),
        "src_len": args.src_len,
        "natural": bool(args.natural and args.data),
        "sorted_batches": bool(args.sort_batches),
        "mean_src_len": sum(s.numel() - 1 for s in sentences) / len(sentences),
        "sentences_from": sentences_from,
        "batch_size": args.timing_batch_size,
        "beam": args.beam,
        "lenpen": args.lenpen,
        "min_len": min_len,
        "max_len_a": max_len_a,
        "max_len_b": max_len_b,
        "threads": args.threads,
        "runs": args.runs,
        "warmup": args.warmup,
        "trim": args.trim,
        "dropped_each_end": trim_count(args.runs, args.trim),
        "tokens": "generated target tokens of the best hypothesis, EOS excluded",
        "order": "interleaved (A B C A B C ...)",
    }
    if args.bleu:
        bleu_args = Namespace(
            beam=args.beam, lenpen=args.lenpen, max_len_a=args.max_len_a,
            max_len_b=args.max_len_b, min_len=1,
        )  # fmt: skip
        # BLEU is not timed: it may use more threads (set after every timed run has finished)
        torch.set_num_threads(args.bleu_threads or args.threads)
        for c, rec in zip(candidates, records):
            res = sacrebleu_of(
                c, args.subset, bleu_args, args.batch_size, args.post_process, args.bleu_tokenize
            )
            rec["bleu"] = res["bleu"]
            rec["bleu_signature"] = res["bleu_signature"]
            rec["bleu_sentences"] = len(res["hypotheses"])
            rec["hypotheses_sample"] = res["hypotheses"][:3]
        protocol["bleu"] = {
            "subset": args.subset,
            "batch_size": args.batch_size,
            "post_process": args.post_process,
            "tokenize": args.bleu_tokenize,
            "threads": args.bleu_threads or args.threads,
            "note": "same beam and lenpen as the timing; forced output lengths not applied",
        }
    protocol["size"] = (
        "fairseq: bytes of torch.save(state_dict()) (shared tensors once); CTranslate2: the "
        "model directory"
    )
    if args.memory:
        protocol["memory"] = (
            "peak resident size (VmHWM) of a fresh process that imports the engine (torch + "
            "fairseq + lightcompress, or ctranslate2 alone), loads the model and translates the "
            "timing sentences once; +Model: peak minus the process's size after the imports"
        )
    return {"protocol": protocol, "environment": environment(), "models": records,
            "notes": notes}  # fmt: skip


def main(argv: Sequence[str] | None = None) -> int:
    """``measure_speed``: the exit status (errors as one line, status 2)."""
    return cli.run(_main, argv, PROG)


def _main(argv: Sequence[str] | None) -> int:
    args = _arg_parser().parse_args(argv)
    result = run(args)
    print(protocol_line(result["protocol"]))
    env = result["environment"]
    print(f"CPU: {env['cpu']}; torch {env['torch']}, fairseq {env['fairseq']}")
    print(format_results(result["models"], bleu=args.bleu))
    for note in result.get("notes", []):
        print(f"note: {note}")
    for line in bleu_lines(result["models"], result["protocol"]):
        print(line)
    if args.json_out:
        write_json(args.json_out, result)
        print(f"wrote {args.json_out}")
    return 0


cli_main = cli.entry_point(main, quiet=True)


if __name__ == "__main__":
    cli_main()
