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
Engines and size: ``--ct2`` exports every dense model (fairseq's Transformers, dense plugin
architectures; :mod:`lightcompress.deploy.ct2`), and every student whose factors multiply out as
the dense Transformer it computes (its shape on CTranslate2), to CTranslate2 and times it in
float32 and int8 (int8 weights on disk, CTranslate2's int8 GEMMs) next to the fairseq rows, on the
same sentences with the same beam, length penalty and output lengths
(:mod:`lightcompress.measure.engines`); models that cannot be multiplied out (Admin, Subformer,
DA-WID) get a ``note:`` line instead, and so does the run without ctranslate2 installed (the
``[ct2]`` extra: no CTranslate2 rows). ``Size`` is the model's weights as stored (fairseq:
``torch.save(state_dict())``, shared tensors once; CTranslate2: its model directory).
``--onnx`` exports every model that :mod:`lightcompress.deploy.onnx_export` can express
(fairseq's Transformer, LightFormer, Hypoformer, Smartformer, Subformer; compressed weights kept)
and times it on ONNX Runtime (:class:`lightcompress_runtime.OnnxGenerator`, engine
``onnxruntime``) in float32, and in ONNX Runtime's int8 with ``--int8-large`` (the large maps) /
``--compare-int8`` (every map); its size is the export directory. ``--shortlist FILE``
(``--onnx``, ``--ct2``: as its vocabulary map) adds those rows again scoring only a vocabulary
shortlist's candidates (:mod:`lightcompress.deploy.shortlist`; engine ``...+shortlist`` in the
table, BLEU with it). ``--natural``: every k-th sentence of the split at its own length;
``--sort-batches``: batches longest first.

The lab's ``lab/measure/measure_speed.py`` is this command with three more options for the
project's own benchmarks: ``--fast`` (lightcompress's PyTorch fast path), ``--text SPM`` (raw
text to raw text, sentencepiece in the timed path) and ``--memory`` (peak resident memory of a
fresh process per model). It runs this module's steps (:func:`load_models`,
:func:`timing_sentences`, :func:`generation_settings`, :func:`time_models`, :func:`add_bleu`)
with its own in between.

``--json OUT`` writes every raw run, the protocol, date, CPU model and library versions (the
file is written atomically).

Bad input (a value out of range, a missing, damaged or foreign checkpoint, an architecture
fairseq does not know, a ``--json`` path that cannot be written) ends the command with one line
on stderr and exit status 2, and everything that needs no model, the output path included, is
checked before any model is loaded or timed.
"""

from __future__ import annotations

import argparse
import os
import sys
from argparse import Namespace
from collections.abc import Sequence

import torch

from lightcompress import cli
from lightcompress.errors import one_line
from lightcompress.measure.candidates import (
    SpeedError,
    load_candidates,
    with_ct2,
    with_int8,
    with_onnx,
)
from lightcompress.measure.protocol import (
    as_samples,
    measure,
    pick_sentences,
    random_sentences,
    sacrebleu_of,
)
from lightcompress.measure.report import (
    bleu_lines,
    environment,
    format_results,
    protocol_line,
    write_json,
)
from lightcompress.measure.speed_args import PROG, arg_parser, check_args, split_list
from lightcompress.measure.timing import trim_count

__all__ = [
    "add_bleu",
    "cli_main",
    "generation_settings",
    "load_models",
    "main",
    "print_result",
    "protocol_of",
    "run",
    "setup",
    "timing_sentences",
]


def run(args: argparse.Namespace) -> dict:
    """Everything the command line does; returns the JSON document.

    Every argument and the ``--json`` output are checked before anything is loaded or timed.
    """
    import tempfile

    check_args(args)
    with tempfile.TemporaryDirectory(prefix="measure_speed.") as workdir:
        return _run(args, workdir)


def _run(args: argparse.Namespace, workdir: str) -> dict:
    setup(args)
    log = None if args.quiet else (lambda msg: print(msg, file=sys.stderr, flush=True))
    candidates, notes = load_models(args, workdir, log)
    sentences, sentences_from = timing_sentences(args, candidates)
    gen_args = generation_settings(args, candidates)
    records = time_models(args, candidates, sentences, gen_args, log)
    protocol = protocol_of(args, sentences, sentences_from, gen_args)
    add_bleu(args, candidates, records, protocol)
    return {"protocol": protocol, "environment": environment(), "models": records, "notes": notes}


def setup(args: argparse.Namespace) -> None:
    """Import ``--user-dir`` and the plugin; set torch's threads to ``--threads``."""
    if args.user_dir:
        from fairseq import utils

        try:
            utils.import_user_module(Namespace(user_dir=args.user_dir))
        except FileNotFoundError:
            raise SpeedError(f"--user-dir {args.user_dir}: no such directory") from None
        except ImportError as exc:
            raise SpeedError(f"--user-dir {args.user_dir}: {one_line(exc)}") from None
    import lightcompress.plugin  # noqa: F401  (plugin architectures)

    torch.set_num_threads(args.threads)
    try:
        torch.set_num_interop_threads(args.threads)
    except RuntimeError:  # already set in this process
        pass


def load_models(args: argparse.Namespace, workdir: str, log=None) -> tuple[list, list[str]]:
    """The models to time and the notes on those left out: every ``--path`` / ``--arch`` model,
    its int8 versions, its ONNX Runtime (``--onnx``) and CTranslate2 (``--ct2``) exports (in
    ``workdir`` unless ``--ct2-dir``); every model must read the same source dictionary."""
    candidates = load_candidates(
        split_list(args.path),
        args.arch,
        args.data,
        args.vocab_size,
        args.share_all_embeddings,
        args.seed,
    )
    exports, notes = [], []
    if args.ct2:
        ct2_dir = args.ct2_dir or os.path.join(workdir, "ct2")
        exports, notes = with_ct2(candidates, ct2_dir, args.threads, log, shortlist=args.shortlist)
    if args.onnx:
        onnx_variants = [
            v for v, on in (("int8-large", args.int8_large), ("int8", args.compare_int8)) if on
        ]
        onnx, onnx_notes = with_onnx(
            candidates,
            os.path.join(workdir, "onnx"),
            args.threads,
            onnx_variants,
            log,
            shortlist=args.shortlist,
        )
        exports, notes = onnx + exports, notes + onnx_notes
    variants = [
        v
        for v, on in (
            ("int8", args.compare_int8 or args.quantize == "int8"),
            ("int8-large", args.int8_large or args.quantize == "int8-large"),
        )
        if on
    ]
    if variants:
        keep_float = args.compare_int8 or args.int8_large
        candidates = with_int8(candidates, keep_float=keep_float, variants=variants)
    candidates = candidates + exports
    first = candidates[0].task
    for c in candidates[1:]:
        if len(c.task.source_dictionary) != len(first.source_dictionary):
            raise SpeedError(
                f"{c.label} has a source dictionary of {len(c.task.source_dictionary)} entries, "
                f"{candidates[0].label} of {len(first.source_dictionary)}: they cannot translate "
                "the same sentences"
            )
    return candidates, notes


def timing_sentences(args: argparse.Namespace, candidates) -> tuple[list[torch.Tensor], str]:
    """The timing sentences (``--data``'s ``--subset`` or random word ids) and where they come
    from, in the order they are timed (``--sort-batches``: longest first)."""
    first = candidates[0].task
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
    return sentences, sentences_from


def generation_settings(args: argparse.Namespace, candidates) -> Namespace:
    """Beam, length penalty and output lengths of the timed runs: forced to ``--src-len`` for
    random weights unless a length is given."""
    min_len, max_len_a, max_len_b = 1, args.max_len_a, args.max_len_b
    if args.max_len is None and args.min_len is None and any(c.random_weights for c in candidates):
        min_len, max_len_a, max_len_b = args.src_len, 0, args.src_len
    if args.min_len is not None:
        min_len = args.min_len
    if args.max_len is not None:
        max_len_a, max_len_b = 0, args.max_len
    if max_len_a == 0 and min_len > max_len_b:
        raise SpeedError(f"--min-len {min_len} exceeds the maximum length {max_len_b}")
    return Namespace(
        beam=args.beam,
        lenpen=args.lenpen,
        min_len=min_len,
        max_len_a=max_len_a,
        max_len_b=max_len_b,
    )


def time_models(args: argparse.Namespace, candidates, sentences, gen_args, log=None) -> list:
    """The timed runs of every candidate, interleaved: one record per candidate."""
    pad = candidates[0].task.source_dictionary.pad()
    return measure(
        candidates,
        as_samples(sentences, args.timing_batch_size, pad),
        gen_args,
        args.runs,
        args.warmup,
        args.trim,
        log,
        sentences=sentences,
        batch_size=args.timing_batch_size,
    )


def protocol_of(args: argparse.Namespace, sentences, sentences_from: str, gen_args) -> dict:
    """The protocol as the JSON document records it."""
    return {
        "num_sentences": len(sentences),
        "src_len": args.src_len,
        "natural": bool(args.natural and args.data),
        "sorted_batches": bool(args.sort_batches),
        "mean_src_len": sum(s.numel() - 1 for s in sentences) / len(sentences),
        "sentences_from": sentences_from,
        "batch_size": args.timing_batch_size,
        "beam": args.beam,
        "lenpen": args.lenpen,
        "min_len": gen_args.min_len,
        "max_len_a": gen_args.max_len_a,
        "max_len_b": gen_args.max_len_b,
        "threads": args.threads,
        "runs": args.runs,
        "warmup": args.warmup,
        "trim": args.trim,
        "dropped_each_end": trim_count(args.runs, args.trim),
        "tokens": "generated target tokens of the best hypothesis, EOS excluded",
        "order": "interleaved (A B C A B C ...)",
    }


def add_bleu(args: argparse.Namespace, candidates, records: list, protocol: dict) -> None:
    """With ``--bleu``: each candidate's sacreBLEU on all of ``--subset`` into its record and
    the BLEU settings into ``protocol``; then ``protocol``'s note on sizes."""
    if args.bleu:
        bleu_args = Namespace(
            beam=args.beam,
            lenpen=args.lenpen,
            max_len_a=args.max_len_a,
            max_len_b=args.max_len_b,
            min_len=1,
        )
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


def main(argv: Sequence[str] | None = None) -> int:
    """``measure_speed``: the exit status (errors as one line, status 2)."""
    return cli.run(_main, argv, PROG)


def _main(argv: Sequence[str] | None) -> int:
    args = arg_parser().parse_args(argv)
    print_result(args, run(args))
    return 0


def print_result(args: argparse.Namespace, result: dict) -> None:
    """The table, notes and BLEU lines on stdout; the JSON document to ``--json``."""
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


cli_main = cli.entry_point(main, quiet=True)


if __name__ == "__main__":
    cli_main()
