"""Export a translation model to ONNX Runtime: an encoder graph and a one-step decoder graph.

``lightcompress-export-onnx --path ckpt.pt --data data-bin -o model-onnx [--int8 large|all]``
writes a self-contained directory that the torch-free package :mod:`lightcompress_runtime`
translates with (numpy, onnxruntime and, for raw text, sentencepiece; no torch, no fairseq):

- ``encoder.onnx``: ``src_tokens [B x S]`` (left-padded) -> the additive
  source mask ``[B x 1 x 1 x S]`` (0 or -inf) and, per decoder layer, the cross-attention keys
  and values ``[B x H x S x d]`` (computed once per sentence, as fairseq does);
- ``decoder.onnx``: one beam-search step. Inputs: the last tokens ``[N]``, their position
  (``pos``; for sinusoidal positions ``pos_emb``, the embedding row ``[1 x C]``), the
  order of the previous step's hypotheses ``[N]`` (the self-attention caches are reordered
  inside the graph), a per-token score bias ``[V]`` (fairseq's ``-inf`` for padding, the unknown
  penalty, the EOS rules of ``min_len`` / ``max_len``), ``k``, and the caches. Outputs: the
  ``k`` best next tokens of every hypothesis (log-probability + bias, and their ids) and the
  grown self-attention caches;
- ``weights.bin``: every weight once (ONNX external data that both graphs point into): layer
  sharing, tied tables and factorized maps stay as they are, the file is the compressed size;
- ``config.json`` (special ids, layer shapes, maximum positions), ``dict.src.txt`` /
  ``dict.tgt.txt`` (the model's fairseq dictionaries), ``spm.model`` when given, the
  package ``runtime/`` (:mod:`lightcompress_runtime`, copied file for file) and ``translate.py``,
  which runs it (``python translate.py DIR < in > out``; format version 2, see
  :data:`lightcompress_runtime.VERSION`);
- with ``--bpe-codes`` (a Moses + subword-nmt BPE data-bin, fairseq's IWSLT'14 recipe; the
  data-bin's ``bpe.code`` when neither it nor ``--spm`` is given): ``bpe.codes`` (read by
  :mod:`lightcompress_runtime.tokenizers`: sacremoses + subword-nmt) and the settings in ``config.json``'s ``"bpe"`` (Moses languages, lowercasing, dash splits), so the
  export takes raw text and returns detokenized text. An export with neither takes only
  subword tokens (``translate.py --tokenized``) and refuses raw text.

The graphs are traced from the model's own modules (``q_proj(x)``, ``fc1(x)``, the output
projection...; :mod:`lightcompress.deploy.onnx_graphs`, the modules that the PyTorch backend,
:class:`~lightcompress.deploy.generator.FastGenerator`, runs eagerly), so these families export:
fairseq's Transformer, LightFormer (low-rank maps and table, tied factorized output projection,
shared layers, Admin), Hypoformer (fused HTT Q/K/V), Smartformer (CP Q/K/V), Subformer (SAFE
block without cross-attention, sandwich projections, query-projected cross-attention, output
reduction), DA-WID's fused layers. A decoder with other layers is refused with one line. The export is checked before anything
is written: the float32 graphs must reproduce the model's encoder outputs and log-probabilities
on a probe batch (to 1e-3); an int8 export records how far int8 moved them
(``config.json``: ``int8_error``, relative) and the command prints it. Then the export is run
as a user runs it (its own ``translate.py``, in a process of its own) on probe sentences and compared with fairseq's
beam search (:mod:`lightcompress.deploy.onnx_proof`): a float32 export that does not give
fairseq's translations, or does not run, is never written; an int8 export records the share of
probe sentences it translates as the float32 model does (``int8_probe_agreement``).

``--int8``: ONNX Runtime's dynamic int8 quantization (int8 weights, activations quantized on
the fly: ``MatMulInteger``) of the large maps (``large``: at least 2^17 weights, the
:func:`lightcompress.deploy.quantize.quantize_model_int8` rule) or of every map (``all``),
in the decoder and the encoder. A tied table (embedding and output projection) is then
stored once, in int8: the lookups gather and dequantize the int8 copy the output projection
multiplies with, and the float32 table is dropped (:func:`onnx_tools.int8_lookups`); a token
table that is only looked up (untied; with ``--shortlist``, gathered for the candidates' rows)
of that size is stored in int8 too (:func:`onnx_tools.int8_tables`).

``--shortlist FILE`` (a ``lightcompress-shortlist`` file of the model's data): the decoder graph
takes the sorted candidate ids ``cands`` ``[V']`` after ``bias`` and scores only them. For a
float output layer it knows (:func:`~lightcompress.deploy.shortlist.split_output_rows`:
fairseq's Linear, the plugin's tied tables) the candidates' rows are gathered once per batch by
a third graph, ``rows.onnx`` (``cands`` -> ``rows0``...; ``config.json``'s ``shortlist_rows``),
and the step takes them after ``cands``, with ``bias`` the candidates' ``[V']``; for any other
output layer the step gathers them itself (:mod:`lightcompress.deploy.shortlist`); the list is
shipped packed, as ``shortlist.npz`` (ids, each list sorted and stored as differences,
compressed: about a sixth of the text; in the manifest, ``config.json``'s ``shortlist``;
exports made before it ship ``shortlist.txt``, which the runtime still reads), and the
translators use it by default; with ``--no-shortlist`` the runtime feeds every id (the
proof above runs so: the shortlist graph over the full vocabulary gives fairseq's
translations). Without the option the export is what it was.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import tempfile
from collections.abc import Sequence

from lightcompress import cli
from lightcompress.deploy.onnx_encoder import (  # (lean_encoder_error: importable from here too)
    lean_encoder_error,  # noqa: F401
)
from lightcompress.deploy.onnx_graphs import (
    ExportError,
    export_error,
    layer_layout,
    position_kind,
    sinusoid_frequencies,
)
from lightcompress.deploy.onnx_tools import (
    check_exported_graphs,
    int8_lookups,
    int8_tables,
    k_as_input,
    quantize_graph,
    share_weights,
    simplify_graph,
    write_dict,
    write_manifest,
    write_runtime,
)
from lightcompress.deploy.onnx_trace import _Probe, _trace_graphs
from lightcompress_runtime.files import FORMAT, VERSION

__all__ = ["NothingToQuantize", "cli_main", "export_onnx", "main"]


class NothingToQuantize(ExportError):
    """``int8``: no map of the model is large enough, so int8 would quantize nothing (the
    export would be the float32 one, only larger)."""


ROWS_GRAPH = "rows.onnx"


# --------------------------------------------------------------------------------------------
# export
# --------------------------------------------------------------------------------------------


def export_onnx(
    model,
    task,
    out_dir: str,
    int8: str | None = None,
    spm: str | None = None,
    check: bool = True,
    shortlist: str | None = None,
    bpe: dict | None = None,
) -> dict:
    """Export ``model`` (eval mode, float32, CPU) into the new directory ``out_dir`` (see the
    module notes); ``int8``: ``None``, ``"large"`` or ``"all"``; ``shortlist``: a shortlist
    file to ship (the decoder graph then takes candidate ids); ``bpe``: Moses + BPE settings
    (:class:`~lightcompress_runtime.tokenizers.MosesBPE`'s keyword arguments, ``codes`` the
    file to ship). Returns the config written.
    Raises :class:`ExportError` (nothing written) for a model it cannot export."""
    text, packed = _checked_inputs(model, task, out_dir, int8, spm, shortlist, bpe)
    model.eval()
    model.float().cpu()
    split = None  # (a float output layer's rows: gathered once per batch by rows.onnx)
    if shortlist is not None:
        from lightcompress.deploy.shortlist import split_output_rows

        split = split_output_rows(model.decoder.output_projection)
    config = _export_config(model, task, int8, spm, text, shortlist is not None, split is not None)
    parent = os.path.dirname(os.path.abspath(out_dir))
    if not os.path.isdir(parent):
        raise ExportError(f"cannot create {out_dir}: {parent} is not a directory")
    tmp = tempfile.mkdtemp(prefix=".onnx-export-", dir=parent)
    try:
        probe = _trace_graphs(model, task, config, tmp, shortlist is not None, split)
        protos = _load_graphs(tmp, split is not None)
        if int8:
            _quantize_graphs(protos, int8, tmp, probe if check else None, task)
        share_weights(protos, tmp)
        _write_files(tmp, protos, task, spm, text, bpe, config, packed)
        if check:  # float32: exact (or ExportError); int8: how far it moved, recorded
            errors = check_exported_graphs(
                tmp, probe.feed, probe.ref, probe.src, probe.cross, strict=not int8
            )
            if int8:
                config["int8_error"] = errors
        _write_config(tmp, config)
        if check:  # the export, run by its own translate.py, translates like the model
            from lightcompress.deploy.onnx_proof import prove_translations

            agreement = prove_translations(tmp, model, task, int8)
            if int8:  # (recorded: int8 may move some best hypotheses)
                config["int8_probe_agreement"] = round(agreement, 4)
                _write_config(tmp, config)
        if os.path.isdir(out_dir):
            os.rmdir(out_dir)
        from lightcompress.io import current_umask

        os.chmod(tmp, 0o777 & ~current_umask())  # (mkdtemp makes it 0700)
        os.replace(tmp, out_dir)
    finally:
        if os.path.isdir(tmp):
            shutil.rmtree(tmp, ignore_errors=True)
    return config


def _checked_inputs(model, task, out_dir, int8, spm, shortlist, bpe):
    """What :func:`export_onnx` checks before anything is written: the tokenizer (returned:
    the Moses + BPE one, or None), the model, ``int8``, ``out_dir`` and the shortlist (returned
    loaded against the dictionaries, or None)."""
    text = packed = None
    if bpe is not None:
        from lightcompress_runtime.tokenizers import MosesBPE, TextError

        if spm:
            raise ExportError("give a sentencepiece model or BPE codes, not both")
        try:
            text = MosesBPE(**bpe)
        except TextError as exc:
            raise ExportError(str(exc)) from None
    why = export_error(model)
    if why is not None:
        raise ExportError(f"{type(model).__name__} cannot be exported to ONNX: {why}")
    if int8 not in (None, "large", "all"):
        raise ExportError(f"int8 must be 'large' or 'all', got {int8!r}")
    if os.path.exists(out_dir) and (not os.path.isdir(out_dir) or os.listdir(out_dir)):
        raise ExportError(f"{out_dir} exists: give a new or empty directory")
    if shortlist is not None:
        from lightcompress.deploy.shortlist import ShortlistError, load_shortlist

        try:
            packed = load_shortlist(shortlist, task.source_dictionary, task.target_dictionary)
        except ShortlistError as exc:
            raise ExportError(str(exc)) from None
    return text, packed


def _export_config(model, task, int8, spm, text, shortlist: bool, rows_graph: bool) -> dict:
    """``config.json`` of the export (before the checks add their figures)."""
    src_dict, tgt_dict = task.source_dictionary, task.target_dictionary
    dec = model.decoder
    positions = dec.embed_positions
    kind = position_kind(dec)
    config = {
        "format": FORMAT,
        "version": VERSION,
        "pad": tgt_dict.pad(),
        "eos": tgt_dict.eos(),
        "unk": tgt_dict.unk(),
        "src_pad": src_dict.pad(),
        "src_eos": src_dict.eos(),
        "src_unk": src_dict.unk(),
        "vocab_size": len(tgt_dict),
        "src_vocab_size": len(src_dict),
        "max_decoder_positions": int(model.max_decoder_positions()),
        "max_source_positions": int(model.max_positions()[0]),
        "position_offset": int(positions.padding_idx) if positions is not None else 0,
        "position_kind": kind,
        "position_dim": int(positions.embedding_dim) if positions is not None else 0,
        # (torch's float32 frequencies: the runtime's rows are then torch's to rounding)
        "position_freq": (
            sinusoid_frequencies(positions.embedding_dim).tolist() if kind == "sinusoidal" else None
        ),
        "layers": [layer_layout(layer) for layer in dec.layers],
        "int8": int8,
        "architecture": type(model).__name__,
        "spm": "spm.model" if spm else None,
        "bpe": text.settings() if text is not None else None,
        # the decoder graph takes the encoder's outputs once per sentence (exports before
        # this key: repeated per hypothesis)
        "cross_layout": "sentence",
    }
    if shortlist:
        config["shortlist"] = "shortlist.npz"  # (exports before the packed form: .txt)
    if rows_graph:  # (the candidates' output rows: gathered once per batch by rows.onnx)
        config["shortlist_rows"] = ROWS_GRAPH
    return config


def _load_graphs(tmp: str, rows_graph: bool) -> dict:
    """The traced graphs, loaded, ``k`` made an input, simplified."""
    import onnx

    names = ["encoder", "decoder"] + (["rows"] if rows_graph else [])
    protos = {name: onnx.load(os.path.join(tmp, f"{name}.raw.onnx")) for name in names}
    k_as_input(protos["decoder"])
    for proto in protos.values():
        simplify_graph(proto)
    return protos


def _quantize_graphs(protos: dict, int8: str, tmp: str, probe: _Probe | None, task) -> None:
    """``protos`` in int8 (``int8``: ``large`` or ``all``), in place; with ``probe`` the float32
    graphs are checked first, exactly. Raises :class:`NothingToQuantize`."""
    import onnx

    from lightcompress.deploy.quantize import LARGE_MAP_ELEMENTS

    limit = LARGE_MAP_ELEMENTS if int8 == "large" else 1
    work = os.path.join(tmp, "int8")
    os.makedirs(work)
    for name, proto in protos.items():
        onnx.save(proto, os.path.join(work, f"{name}.onnx"))
    if probe is not None:  # the float32 graphs first, exactly
        check_exported_graphs(work, probe.feed, probe.ref, probe.src, probe.cross, strict=True)
    quantized = 0
    for name in ("encoder", "decoder"):  # (rows.onnx only gathers)
        path = os.path.join(work, f"{name}.onnx")
        quantized += quantize_graph(path, os.path.join(work, f"{name}.int8.onnx"), limit)
        protos[name] = onnx.load(os.path.join(work, f"{name}.int8.onnx"))
    int8_lookups(protos)  # a tied table stored once, in int8
    # tables only looked up (untied; the shortlist's rows): int8 too
    sizes = {len(task.source_dictionary), len(task.target_dictionary)}
    quantized += int8_tables(protos, limit, sizes)
    if not quantized:  # (the export would be float32, only larger: refused)
        raise NothingToQuantize(_nothing_to_quantize(int8, limit))
    shutil.rmtree(work)


def _write_files(tmp: str, protos: dict, task, spm, text, bpe, config: dict, packed) -> None:
    """The graphs (in place of the traced ones), dictionaries, tokenizer files, the packed
    shortlist, the runtime and ``translate.py`` into ``tmp``."""
    import onnx

    for name, proto in protos.items():
        onnx.save(proto, os.path.join(tmp, f"{name}.onnx"))
        os.remove(os.path.join(tmp, f"{name}.raw.onnx"))
    write_dict(task.source_dictionary, os.path.join(tmp, "dict.src.txt"))
    write_dict(task.target_dictionary, os.path.join(tmp, "dict.tgt.txt"))
    if spm:
        shutil.copyfile(spm, os.path.join(tmp, "spm.model"))
    if text is not None:  # the codes (read by the runtime's tokenizers)
        shutil.copyfile(bpe["codes"], os.path.join(tmp, config["bpe"]["codes"]))
    if packed is not None:
        packed.save_packed(os.path.join(tmp, "shortlist.npz"))
    write_runtime(tmp)  # runtime/ and translate.py


def _write_config(tmp: str, config: dict) -> None:
    """``config.json`` and the manifest (again after the proof adds its figure)."""
    with open(os.path.join(tmp, "config.json"), "w", encoding="utf-8") as f:
        json.dump(config, f, indent=1)
    write_manifest(tmp)


def _nothing_to_quantize(int8: str, limit: int) -> str:
    fix = "export it without --int8" + (" (or with --int8 all)" if int8 == "large" else "")
    return (
        f"--int8 {int8}: no map or token table of this model has {limit} weights or "
        f"more, so int8 would quantize nothing (a float32 export, only larger): {fix}"
    )


# --------------------------------------------------------------------------------------------
# command
# --------------------------------------------------------------------------------------------


def _arg_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="lightcompress-export-onnx",
        description="Export a fairseq translation checkpoint (fairseq's Transformer, "
        "LightFormer, Hypoformer, Smartformer, Subformer) to ONNX Runtime graphs that keep its compressed "
        "weights, with a torch-free runtime (translate.py) in the output directory.",
    )
    p.add_argument("--path", required=True, help="checkpoint")
    p.add_argument("--data", required=True, help="directory with the model's dictionaries")
    p.add_argument(
        "-s",
        "--source-lang",
        help="source language (dict.SRC.txt; needed when the "
        "checkpoint does not name it and --data holds only dictionaries)",
    )
    p.add_argument("-t", "--target-lang", help="target language (as -s)")
    p.add_argument("-o", "--output", required=True, help="output directory (new or empty)")
    p.add_argument("--spm", help="sentencepiece model to ship with the export (raw text)")
    from lightcompress_runtime.tokenizers import add_arguments

    add_arguments(p)  # --bpe-codes and the Moses options (raw text)
    p.add_argument(
        "--int8",
        nargs="?",
        const="all",
        choices=["all", "large"],
        help="ONNX Runtime dynamic int8 of every map and token table (all, the default: "
        "measured the fastest and smallest) or of the maps of at least 2^17 weights only",
    )
    p.add_argument(
        "--shortlist",
        metavar="FILE",
        help="ship this vocabulary shortlist (lightcompress-shortlist) with a decoder graph that "
        "can score only its candidates (translate.py --shortlist)",
    )
    return p


PROG = "lightcompress-export-onnx"


def main(argv: Sequence[str] | None = None) -> int:
    """``lightcompress-export-onnx``: the exit status (errors as one line, status 2)."""
    return cli.run(_main, argv, PROG)


def _main(argv: Sequence[str] | None) -> int:
    args = _arg_parser().parse_args(argv)
    prog = PROG
    from lightcompress_runtime.tokenizers import TextError, check_arguments, settings_of

    if args.bpe_codes is None and args.spm is None and os.path.isfile(f"{args.data}/bpe.code"):
        args.bpe_codes = os.path.join(args.data, "bpe.code")  # (the IWSLT'14 recipe's copy)
    try:
        check_arguments(args)
    except TextError as exc:
        raise ExportError(str(exc)) from None
    if args.spm is not None and not os.path.isfile(args.spm):
        raise ExportError(f"sentencepiece model not found: {args.spm}")
    if args.spm is not None:
        import sentencepiece

        try:
            sentencepiece.SentencePieceProcessor(model_file=args.spm)
        except (RuntimeError, OSError) as exc:
            detail = " ".join(str(exc).split())[:200]
            raise ExportError(f"cannot load the sentencepiece model {args.spm}: {detail}")
    if not os.path.isfile(args.path):
        raise ExportError(f"checkpoint not found: {args.path}")
    if args.shortlist is not None and not os.path.isfile(args.shortlist):
        raise ExportError(f"shortlist not found: {args.shortlist}")
    if os.path.exists(args.output) and (not os.path.isdir(args.output) or os.listdir(args.output)):
        raise ExportError(f"{args.output} exists: give a new or empty directory")
    import lightcompress.plugin  # noqa: F401  (plugin architectures)
    from lightcompress.checkpoint import CheckpointError, load_checkpoint

    try:
        model, task, _ = load_checkpoint(args.path, args.data, args.source_lang, args.target_lang)
    except CheckpointError as exc:
        message = str(exc)
        if "size mismatch" in message:
            message = (
                f"the dictionaries in {args.data} do not fit {args.path} (its embedding or "
                "output tables have another size): give the data directory the model was "
                "trained with"
            )
        raise ExportError(message) from None
    from lightcompress.deploy.text_fit import TextFitError, check_tokenizer_fits, task_dictionaries

    try:  # (codes or a sentencepiece model of another corpus: <unk> for most of the text)
        sides = task_dictionaries(task, args.data)
        check_tokenizer_fits(sides, spm=args.spm, codes=args.bpe_codes)
    except TextFitError as exc:
        raise ExportError(str(exc)) from None
    bpe = None
    if args.bpe_codes is not None:
        cfg = getattr(task, "cfg", None) or getattr(task, "args", None)
        bpe = settings_of(
            args,
            getattr(cfg, "source_lang", None),
            getattr(cfg, "target_lang", None),
            task.source_dictionary.symbols,
        )
    try:
        config = export_onnx(
            model,
            task,
            args.output,
            int8=args.int8,
            spm=args.spm,
            shortlist=args.shortlist,
            bpe=bpe,
        )
    except OSError as exc:  # a full disk, a read-only file system (nothing is left)
        raise ExportError(f"cannot write {args.output}: {exc.strerror or exc}") from None
    errors = config.get("int8_error")
    if errors:
        print(
            f"{prog}: int8 moved the encoder's outputs by {100 * errors['encoder']:.1f} % and "
            f"the decoder's log-probabilities by {100 * errors['decoder']:.1f} % (relative, on "
            "a probe batch): compare its BLEU with the float32 export's",
            file=sys.stderr,
        )
    agreement = config.get("int8_probe_agreement")
    if agreement is not None:
        print(
            f"{prog}: int8 kept the float32 model's best translation of "
            f"{100 * agreement:.0f} % of the probe sentences",
            file=sys.stderr,
        )
    if config.get("bpe"):
        b = config["bpe"]
        steps = [f"Moses ({b['source_lang']})"] if b["tokenizer"] else []
        steps += ["lowercased"] * bool(b["lowercase"]) + ["BPE"]
        after = f", Moses-detokenized ({b['target_lang']})" if b["tokenizer"] else ""
        print(
            f"{prog}: raw text in: {', '.join(steps)} (the codes {args.bpe_codes}); out: @@ "
            f"removed{after}",
            file=sys.stderr,
        )
    elif not config.get("spm"):
        print(
            f"{prog}: no tokenizer (no --spm or --bpe-codes): the export takes subword "
            "tokens (translate.py --tokenized)",
            file=sys.stderr,
        )
    print(f"{prog}: wrote {args.output}", file=sys.stderr)
    return 0


cli_main = cli.entry_point(main, quiet=True)
