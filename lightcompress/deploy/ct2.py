"""Export of fairseq Transformers to CTranslate2, through CTranslate2's own fairseq converter.

What a user deploys an uncompressed model with: the teachers and dense baselines of the plugin
(fairseq's ``transformer*`` architectures, and the plugin's own architectures when every map is
dense) go to CTranslate2 with :func:`export_ctranslate2` (``lightcompress-export-ct2``), so that
``scripts/measure_speed.sh --ct2`` can time them next to the compressed models.

A compressed student whose maps multiply out (LightFormer's low-rank maps and tables and shared
layers, Smartformer's CP maps, Hypoformer's HTT / TT / low-rank maps, fused Q/K/V map, identity
output maps and HTT table, when trained without Admin) is exported as the dense Transformer it
computes (:func:`lightcompress.deploy.densify.densify_model`): the student's shape on
CTranslate2, larger on disk than the factorized student by design (``check.json``'s
``densified`` and the command's output say what was multiplied out and the sizes). Shared layers
become equal copies, which CTranslate2 stores once (it aliases equal variables).

How: the checkpoint is loaded as ``fairseq-generate`` loads it (the plugin imported first, so its
architectures are known and torch's ``weights_only`` loader accepts fairseq checkpoints), the
model is checked (:func:`dense_export_error`; a student refused only for its maps is multiplied
out), then CTranslate2's converter functions (``ctranslate2.converters.fairseq``: the model spec
from the model flags, every layer's weights, the vocabularies, ``</s>`` as decoder start token
and source EOS) write the model. CTranslate2's converter itself accepts only fairseq's model
names (``transformer``...); a plugin model is converted with the spec of the fairseq
Transformer it is.

Proven before anything is written, against the checkpoint's own model (the factorized student
for a multiplied-out one): the export's log-probabilities of probe pairs (:func:`check_export`,
teacher forcing) and its greedy probe translations (:func:`check_translations`: equal, or
parting only at a near tie), to :data:`~lightcompress.deploy.probes.TOLERANCE` for float32 weights; for quantized weights the
deviation and the translations that differ are recorded in ``check.json``.

Refused with one clear error (:class:`ExportError`): Admin residual scaling (``--admin-init``:
CTranslate2 has no ``residual * omega``, and the dense Transformer nothing to multiply it into),
Subformer (SAFE and sandwich layers), DA-WID's layers (per-layer widths, masks), decoder
input / output projections, a module with no dense equivalent (no ``to_dense()``, or one that
does not reproduce its forward; :mod:`lightcompress.deploy.densify`), and whatever CTranslate2's
converter rejects (activation, different encoder/decoder heads or normalisation).

With a vocabulary shortlist (``--shortlist FILE``, :mod:`lightcompress.deploy.shortlist_build`),
the export ships it as CTranslate2's own vocabulary map (``vmap.txt``, :func:`write_vmap`), so
that ``translate_batch(..., use_vmap=True)`` scores only a batch's candidates, as a CTranslate2
user would deploy it: the comparison with the ONNX export's shortlist is then like for like.

The output directory is written atomically (a complete model or nothing).

CTranslate2 is an extra (``pip install 'lightcompress[ct2]'``; ``make`` installs it): without
it, an export is refused with one line saying so (:data:`NOT_INSTALLED`).
"""

from __future__ import annotations

import argparse
import copy
import json
import math
import os
from collections.abc import Sequence

import torch
from torch import nn

from lightcompress import cli
from lightcompress.deploy.probes import (
    TOLERANCE,
    ProbeMismatch,
    gold_logprobs,
    greedy,
    greedy_mismatch,
    max_len_of,
    probe_pairs,
)
from lightcompress.errors import LightcompressError

__all__ = [
    "NOT_INSTALLED",
    "ExportError",
    "cli_main",
    "ctranslate2_missing",
    "dense_export_error",
    "export_ctranslate2",
    "export_model",
    "main",
    "write_vmap",
]

QUANTIZATIONS = ("float32", "int8", "int8_float32", "int16")


class ExportError(LightcompressError, ValueError):
    """A checkpoint that cannot be exported (one line for the user)."""


# CTranslate2 is an extra (``pip install 'lightcompress[ct2]'``; ``make`` installs it): this
# module imports it only where it converts or scores a model
NOT_INSTALLED = "ctranslate2 is not installed (pip install 'lightcompress[ct2]')"


def ctranslate2_missing() -> str | None:
    """``None`` when ``ctranslate2`` imports, else :data:`NOT_INSTALLED` (one line)."""
    try:
        import ctranslate2  # noqa: F401
    except ImportError:
        return NOT_INSTALLED
    return None


class _ShortlistError(ExportError):
    """A shortlist that does not fit the model (reported without the checkpoint's name)."""


def _model_namespace(model_args) -> argparse.Namespace:
    """A plain Namespace copy of the checkpoint's model configuration (``args`` or ``cfg.model``)."""
    from lightcompress.deploy.densify import model_namespace

    return model_namespace(model_args)


def dense_export_error(model: nn.Module, arch: str) -> str | None:
    """Why ``model`` cannot be converted as it is (``None`` when it can): it must be fairseq's
    Transformer (:func:`~lightcompress.deploy.dense_structure.structure_error`: no Admin, Subformer,
    DA-WID layers or decoder projections), and every map CTranslate2 reads a plain
    ``nn.Linear`` / ``nn.Embedding``. A model refused only for its maps is exported through
    :func:`~lightcompress.deploy.densify.densify_model` (its factors multiplied out)."""
    from lightcompress.deploy.dense_structure import is_dense_slot, model_slots, structure_error

    message = structure_error(model, arch)
    if message:
        return message
    for path, module, target in model_slots(model):
        if not is_dense_slot(module, target):
            kind = "an nn.Embedding" if target == "embedding" else "an nn.Linear"
            return (
                f"architecture {arch!r} is not dense: {path} is a {type(module).__name__}, not "
                f"{kind}; CTranslate2 would have to store it dense"
            )
    return None


def write_vmap(shortlist: str, src_dict, tgt_dict, path: str) -> None:
    """Write the vocabulary shortlist file ``shortlist`` (checked against the model's fairseq
    dictionaries, :func:`~lightcompress.deploy.shortlist.load_shortlist`; the text file or an
    ONNX export's packed ``shortlist.npz``) as CTranslate2's vocabulary map: a line ``<TAB>``
    + the tokens always included, then ``source<TAB>targets`` per source token (CTranslate2's
    ``VocabularyMap``: a batch's candidates are the union of its source tokens' lines, the empty
    source's and UNK, BOS, EOS, as the shortlist's are). A list that no source token has is
    left out."""
    from lightcompress.deploy.shortlist import ShortlistError, load_shortlist
    from lightcompress.deploy.shortlist_build import list_lines

    try:
        sl = load_shortlist(shortlist, src_dict, tgt_dict)
    except ShortlistError as exc:
        raise _ShortlistError(f"--shortlist {exc}") from None
    pad = tgt_dict.pad()  # (CTranslate2 has no PAD token to map)
    keep = lambda ids: [t for t in ids.tolist() if t != pad]
    lists = [keep(sl.targets[a:b]) for a, b in zip(sl.offsets[:-1], sl.offsets[1:])]
    lines = list_lines(src_dict.symbols, tgt_dict.symbols, keep(sl.listed), lists)
    with open(path, "w", encoding="utf-8") as f:
        f.write("\n".join(lines) + "\n")


def _converter(model, task, spec_args):
    """A CTranslate2 FairseqConverter over an already loaded, checked model."""
    from ctranslate2.converters import fairseq as ct2_fairseq

    class LoadedFairseqConverter(ct2_fairseq.FairseqConverter):
        def __init__(self):
            super().__init__(model_path="", data_dir="")

        @torch.no_grad()  # .numpy() of the parameters
        def _load(self):
            # the same steps as FairseqConverter._load after it has built the model
            spec = ct2_fairseq._get_model_spec(spec_args)
            ct2_fairseq.set_transformer_encoder(spec.encoder, model.encoder)
            ct2_fairseq.set_transformer_decoder(spec.decoder, model.decoder)
            spec.register_source_vocabulary(ct2_fairseq._get_vocab(task.source_dictionary))
            spec.register_target_vocabulary(ct2_fairseq._get_vocab(task.target_dictionary))
            spec.config.decoder_start_token = spec.config.eos_token
            spec.config.add_source_eos = True
            return spec

    return LoadedFairseqConverter()


def export_ctranslate2(
    checkpoint: str,
    data: str,
    output_dir: str,
    quantization: str | None = None,
    force: bool = False,
    shortlist: str | None = None,
    densify: bool = True,
) -> str:
    """Export a dense fairseq Transformer checkpoint to a CTranslate2 model directory.

    Parameters
    ----------
    checkpoint : str
        A fairseq checkpoint (fairseq's ``transformer*``, a dense plugin architecture, or a
        student whose maps multiply out).
    data : str
        Its data-bin directory (the dictionaries become CTranslate2's vocabularies).
    output_dir : str
        The model directory to write (atomically).
    quantization : str, optional
        Weight type on disk: ``float32`` (default), ``int8``, ``int8_float32``, ``int16``.
    force : bool
        Replace an existing ``output_dir``.
    shortlist : str, optional
        A vocabulary shortlist (``lightcompress-shortlist``) shipped as CTranslate2's
        vocabulary map (``vmap.txt``; translate with ``use_vmap=True``).
    densify : bool
        Export a student whose maps multiply out as the dense Transformer it computes
        (default); ``False``: refuse it, as a model that is not dense.

    Returns
    -------
    str
        ``output_dir``.
    """
    import lightcompress.plugin  # noqa: F401  (plugin architectures; fairseq checkpoints load)
    from lightcompress.checkpoint import CheckpointError, load_checkpoint

    missing = ctranslate2_missing()  # (before anything is checked or loaded)
    if missing:
        raise ExportError(missing)
    if quantization is not None and quantization not in QUANTIZATIONS:
        raise ExportError(
            f"quantization must be one of {', '.join(QUANTIZATIONS)}, got {quantization!r}"
        )
    if os.path.exists(output_dir) and not force:
        raise ExportError(f"{output_dir} exists (pass --force to replace it)")
    if os.path.exists(output_dir) and not os.path.isdir(output_dir):
        raise ExportError(f"{output_dir} exists and is not a directory")
    parent = os.path.dirname(os.path.abspath(output_dir))
    if not os.path.isdir(parent):
        raise ExportError(f"{output_dir}: directory {parent} does not exist")
    if not os.access(parent, os.W_OK):
        raise ExportError(f"{output_dir}: cannot write in {parent}")
    if not data or not os.path.isdir(data):
        raise ExportError(f"--data is not a directory: {data}")
    if shortlist is not None and not os.path.isfile(shortlist):
        raise ExportError(f"--shortlist {shortlist}: file not found")
    try:
        model, task, model_args = load_checkpoint(checkpoint, data)
    except CheckpointError as exc:
        raise ExportError(str(exc)) from None
    try:
        return export_model(
            model, task, model_args, output_dir, quantization, shortlist, densify=densify
        )
    except _ShortlistError:
        raise
    except ExportError as exc:
        raise ExportError(f"{checkpoint}: {exc}") from None
    except OSError as exc:  # a full disk, a read-only file system (atomic: nothing is left)
        raise ExportError(f"cannot write {output_dir}: {exc.strerror or exc}") from None


def export_model(
    model,
    task,
    model_args,
    output_dir: str,
    quantization: str | None = None,
    shortlist: str | None = None,
    densify: bool = True,
) -> str:
    """Export a loaded (or freshly built) fairseq Transformer: ``model``, its ``task``
    (dictionaries) and model configuration (``args`` / ``cfg.model``), into ``output_dir``
    (replaced atomically), with ``shortlist`` as its vocabulary map (:func:`write_vmap`).

    A compressed student whose maps multiply out (LightFormer, Smartformer, Hypoformer without
    Admin) is exported as the dense Transformer it computes
    (:func:`~lightcompress.deploy.densify.densify_model`; recorded in ``check.json``'s
    ``densified``; ``densify=False`` refuses it instead). Either way the export is proven
    against ``model`` itself before anything is written: its log-probabilities of probe pairs
    (:func:`check_export`) and its greedy probe translations (:func:`check_translations`). Raises :class:`ExportError` for a model
    CTranslate2 cannot express or a shortlist of other dictionaries."""
    import tempfile

    from fairseq.models import ARCH_MODEL_NAME_REGISTRY

    from lightcompress.deploy.densify import DensifyError, densify_model, structure_error
    from lightcompress.errors import one_line
    from lightcompress.io import atomic_directory

    missing = ctranslate2_missing()
    if missing:
        raise ExportError(missing)
    spec_args = _model_namespace(model_args)
    arch = getattr(spec_args, "arch", None) or getattr(spec_args, "_name", None) or "?"
    message = structure_error(model, arch)
    if message:
        raise ExportError(message)
    densified = None
    factorized = dense_export_error(model, arch)
    if factorized and not densify:
        raise ExportError(f"{factorized} (its factors would be multiplied out with densify=True)")
    if factorized:  # multiplied out, or one line saying why it cannot be
        try:
            densified = densify_model(model, model_args, task)
        except DensifyError as exc:
            raise ExportError(str(exc)) from None
        # (a model of its own: CTranslate2's quantization may scale its weights in place)
        target, spec_args = densified.model, copy.copy(densified.args)
    else:
        # (CTranslate2's converter reads the parameters as numpy views and its int8 / int16
        # quantization scales them in place: it converts a copy, so that the caller's model is
        # the same afterwards; measure_speed times that model next to the export)
        target = copy.deepcopy(model)
    if ARCH_MODEL_NAME_REGISTRY.get(spec_args.arch) not in ("transformer", "transformer_align"):
        # a dense plugin model is fairseq's Transformer: CTranslate2 knows it by that name
        spec_args.arch = "transformer"
    converter = _converter(target, task, spec_args)
    try:
        with atomic_directory(output_dir) as tmp, tempfile.TemporaryDirectory() as scratch:
            vmap = None
            if shortlist is not None:  # (checked before anything is converted)
                vmap = os.path.join(scratch, "vmap.txt")
                write_vmap(shortlist, task.source_dictionary, task.target_dictionary, vmap)
            converter.convert(tmp, vmap=vmap, quantization=quantization, force=True)
            # proven before it is written: the export scores probe pairs as the model does
            # (float32 weights: to rounding; quantized weights: the deviation is recorded in
            # the export's check.json and reported, as the ONNX exporter's int8_error)
            worst = check_export(model, task, tmp)
            exact = quantization in (None, "float32")
            what = "the multiplied-out model" if densified is not None else "fairseq's"
            if (exact and not worst <= TOLERANCE) or not math.isfinite(worst):
                raise ExportError(
                    "the CTranslate2 export computes another model: its log-probabilities of "
                    f"probe translations differ from {what} by up to {worst:.3g} (allowed "
                    f"{TOLERANCE:g}); options CTranslate2 ignores (e.g. --cross-self-attention) "
                    "change the model; nothing written"
                )
            translations = check_translations(model, task, tmp, strict=exact)
            record = {
                "quantization": quantization or "float32",
                "max_abs_logprob_difference": worst,
                "tolerance": TOLERANCE if exact else None,
                "translations": translations,
                "densified": None,
            }
            if densified is not None:
                record["densified"] = {
                    "maps": len(densified.maps),
                    "kinds": sorted({name for _, name in densified.maps}),
                    "params": densified.params,
                    "dense_params": densified.dense_params,
                    "summary": densified.summary(),
                }
            with open(os.path.join(tmp, "check.json"), "w", encoding="utf-8") as f:
                json.dump(record, f)
    except ValueError as exc:  # CTranslate2's ConfigurationChecker: options it cannot express
        if isinstance(exc, ExportError):
            raise
        if isinstance(exc, DensifyError):
            raise ExportError(str(exc)) from None
        raise ExportError(f"CTranslate2 cannot express it: {one_line(exc)}") from None
    return output_dir


@torch.no_grad()
def check_export(model, task, ct2_dir: str, sentences: int = 4, seed: int = 0) -> float:
    """Largest absolute difference between fairseq's and the CTranslate2 export's
    log-probability of each target token (and EOS) of random probe pairs (teacher forcing);
    NaN-aware: a non-finite value on either side gives ``inf``."""
    import ctranslate2

    src_dict, tgt_dict = task.source_dictionary, task.target_dictionary
    pairs = probe_pairs(task, sentences, seed)
    srcs, tgts = [s for s, _ in pairs], [t for _, t in pairs]
    ours = gold_logprobs(model, task, pairs)
    translator = ctranslate2.Translator(ct2_dir, device="cpu", inter_threads=1, intra_threads=1)
    results = translator.score_batch(
        [[src_dict[int(t)] for t in s] for s in srcs],
        [[tgt_dict[int(t)] for t in t_] for t_ in tgts],
    )
    worst = 0.0
    for ref, res in zip(ours, results):
        theirs = torch.tensor(res.log_probs, dtype=torch.float32)
        if theirs.shape != ref.shape or not (
            torch.isfinite(theirs).all() and torch.isfinite(ref).all()
        ):
            return float("inf")
        worst = max(worst, float((theirs - ref).abs().max()))
    return worst


def check_translations(
    model, task, ct2_dir: str, strict: bool = True, sentences: int = 4, seed: int = 0
) -> dict:
    """Greedy translations of random probe sentences by the CTranslate2 export against
    ``model``'s (:func:`lightcompress.deploy.probes.greedy`: the argmax at every step, no
    token masked, the same length limit): equal, or parting at a near tie (the two tokens'
    log-probabilities under ``model`` within :data:`~lightcompress.deploy.probes.TOLERANCE`). Returns ``{"sentences",
    "equal", "near_ties", "differ"}``; with ``strict`` (float32 weights), a translation that
    parts elsewhere is an :class:`ExportError`, otherwise it is counted in ``differ`` (int8)."""
    import ctranslate2

    src_dict, tgt_dict = task.source_dictionary, task.target_dictionary
    sources = [s for s, _ in probe_pairs(task, sentences, seed)]
    ours = greedy(model, task, sources)
    translator = ctranslate2.Translator(ct2_dir, device="cpu", inter_threads=1, intra_threads=1)
    index = lambda t: tgt_dict.pad() if t == "<blank>" else tgt_dict.index(t)
    theirs = []
    for src in sources:
        (result,) = translator.translate_batch(
            [[src_dict[int(t)] for t in src]],
            beam_size=1,
            max_decoding_length=max_len_of(src),
            min_decoding_length=0,
        )
        theirs.append([index(t) for t in result.hypotheses[0]])
    counts = {"sentences": len(sources), "equal": 0, "near_ties": 0, "differ": 0}
    for pair, hyp in zip(ours, theirs):
        try:
            one = greedy_mismatch([pair], [hyp], tgt_dict.eos(), "the CTranslate2 export")
        except ProbeMismatch as exc:
            if strict:
                raise ExportError(f"{exc}; nothing written") from None
            counts["differ"] += 1
            continue
        counts["equal"] += one["equal"]
        counts["near_ties"] += one["near_ties"]
    return counts


def _arg_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="lightcompress-export-ct2",
        description="Export a fairseq Transformer checkpoint (a teacher, a dense baseline, a "
        "dense plugin architecture) to CTranslate2 with CTranslate2's fairseq converter. A "
        "compressed student whose maps multiply out (LightFormer, Smartformer, Hypoformer "
        "without Admin) is exported as the dense Transformer it computes (larger than the "
        "student by design); Admin, Subformer and DA-WID students are refused. The export is "
        "checked against the checkpoint's model on probe translations before it is written.",
    )
    p.add_argument("--path", required=True, help="fairseq checkpoint")
    p.add_argument("--data", required=True, help="its data-bin directory (dictionaries)")
    p.add_argument("-o", "--output-dir", required=True, help="CTranslate2 model directory")
    p.add_argument(
        "--quantization",
        choices=QUANTIZATIONS,
        default=None,
        help="weights on disk (default float32); int8 can also be chosen at load time "
        "(ctranslate2.Translator(..., compute_type='int8'))",
    )
    p.add_argument(
        "--shortlist",
        metavar="FILE",
        default=None,
        help="ship this vocabulary shortlist (lightcompress-shortlist) as CTranslate2's "
        "vocabulary map (vmap.txt): translate_batch(..., use_vmap=True) then scores "
        "only a batch's candidates",
    )
    p.add_argument("--force", action="store_true", help="replace an existing output directory")
    return p


PROG = "lightcompress-export-ct2"


def main(argv: Sequence[str] | None = None) -> int:
    """``lightcompress-export-ct2``: the exit status (errors as one line, status 2)."""
    return cli.run(_main, argv, PROG)


def _main(argv: Sequence[str] | None) -> int:
    args = _arg_parser().parse_args(argv)
    out = export_ctranslate2(
        args.path,
        args.data,
        args.output_dir,
        args.quantization,
        args.force,
        shortlist=args.shortlist,
    )
    with open(os.path.join(out, "check.json"), encoding="utf-8") as f:
        check = json.load(f)
    size = os.path.getsize(os.path.join(out, "model.bin"))
    dense = check.get("densified")
    if dense:
        print(
            f"{args.path}: {dense['summary']} (the export is the student's dense shape: "
            "larger than the factorized student by design)"
        )
    t = check["translations"]
    agree = f"{t['equal']} of {t['sentences']} greedy probe translations equal"
    if t["near_ties"]:
        agree += f", {t['near_ties']} parting at a near tie"
    if t["differ"]:
        agree += f", {t['differ']} otherwise"
    print(
        f"wrote {out} (model.bin {size / 1e6:.2f} MB, {check['quantization']} weights; checked "
        f"against {'the student' if dense else 'fairseq'} on probe translations: largest "
        f"log-probability difference {check['max_abs_logprob_difference']:.2g} per token, "
        f"{agree}"
        + (
            "; the shortlist as its vocabulary map: translate with use_vmap=True)"
            if args.shortlist
            else ")"
        )
    )
    return 0


cli_main = cli.entry_point(main, quiet=True)
