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
plugin architectures; :mod:`lightcompress.deploy.ct2`), and every student whose factors multiply
out as the dense Transformer it computes (its shape on CTranslate2), to CTranslate2 and times it in float32
and int8 (int8 weights on disk, CTranslate2's int8 GEMMs) next to the fairseq rows, on the same
sentences with the same beam, length penalty and output lengths (:mod:`lightcompress.measure.engines`);
models that cannot be multiplied out (Admin, Subformer, DA-WID) get a ``note:`` line instead, and so does
the run without ctranslate2 installed (the ``[ct2]`` extra: no CTranslate2 rows). ``Size`` is
the model's weights as stored (fairseq: ``torch.save(state_dict())``, shared tensors once;
CTranslate2: its model directory). ``--memory`` adds the peak resident memory of a fresh process
per model that imports only its engine, loads the model and translates the timing sentences once
(:mod:`lightcompress.measure.memory`). ``--onnx`` exports every model that
:mod:`lightcompress.deploy.onnx_export` can express (fairseq's Transformer, LightFormer,
Hypoformer, Smartformer, Subformer; compressed weights kept) and times it on ONNX Runtime
(:class:`lightcompress_runtime.OnnxGenerator`, engine ``onnxruntime``) in float32,
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
from lightcompress.measure.speed_args import (  # the command line (re-exported: its old home)
    PROG,
    _arg_parser,
    _split_list,
    check_args,
    check_output_file,
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
    import lightcompress.plugin  # noqa: F401  (plugin architectures)

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
