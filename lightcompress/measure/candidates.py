"""The models of a speed measurement (:mod:`lightcompress.measure.speed`): checkpoints and
random-weight architectures loaded as :class:`Candidate` s, and their int8, CTranslate2, ONNX
Runtime versions; their size as stored.
"""

from __future__ import annotations

import os
import warnings
from collections.abc import Sequence
from dataclasses import dataclass, field

import torch

from lightcompress.checkpoint import load_checkpoint
from lightcompress.errors import LightcompressError

__all__ = [
    "Candidate",
    "SpeedError",
    "directory_bytes",
    "keep_exports",
    "load_candidates",
    "split_label",
    "state_dict_bytes",
    "with_ct2",
    "with_int8",
    "with_onnx",
]


class SpeedError(LightcompressError, ValueError):
    """A user error: reported as one line, exit code 2."""


@dataclass
class Candidate:
    """One model under measurement."""

    label: str
    source: str  # checkpoint path or arch spec
    model: torch.nn.Module
    task: object
    params: int
    precision: str = "float32"
    random_weights: bool = False
    args: list = field(default_factory=list)
    engine: str = "fairseq"
    runner: object = None  # engines other than fairseq's generator (lightcompress.measure.engines)
    model_args: object = None  # the model configuration (args / cfg.model)
    size_bytes: int | None = None
    float_model: torch.nn.Module | None = None  # the float32 model an int8 one was made from
    shortlist: str | None = None  # a vocabulary shortlist file the engine scores with
    text: bool = False  # timed from raw text to raw text (the lab's measure_speed --text)


# --------------------------------------------------------------------------------------------
# models
# --------------------------------------------------------------------------------------------


def split_label(item: str) -> tuple[str | None, str]:
    if "=" in item:
        label, rest = item.split("=", 1)
        if label and "/" not in label:
            return label, rest
    return None, item


def _build_random(spec, vocab_size: int | None, data: str | None, share: bool):
    from lightcompress.measure import specs as P

    share = share and spec.share_all_embeddings
    if data:
        from fairseq import tasks

        args = P.parse_model_args(spec.arch, P._with_sharing(spec.args, share), data=data)
        task = tasks.setup_task(args)
        model = task.build_model(args)
        model.eval()
        return model, task, args
    if vocab_size is None:
        raise SpeedError("--arch without --data needs --vocab-size")
    model, task, args = P.build_random_model(
        spec.arch, vocab_size, spec.args, share, return_task=True
    )
    return model, task, args


def load_candidates(
    paths: Sequence[str] = (),
    archs: Sequence[str] = (),
    data: str | None = None,
    vocab_size: int | None = None,
    share_all_embeddings: bool = True,
    seed: int = 1,
) -> list[Candidate]:
    """Load checkpoints (``[LABEL=]path``) and build random-weight models (model specs)."""
    from lightcompress.measure.specs import ParamsError, parse_model_specs
    from lightcompress.modules.counting import count_parameters

    out = []
    for item in paths:
        label, path = split_label(item)
        model, task, model_args = load_checkpoint(path, data)
        if label is None:
            stem = os.path.splitext(os.path.basename(path))[0]
            label = f"{os.path.basename(os.path.dirname(os.path.abspath(path)))}/{stem}"
        out.append(
            Candidate(
                label, path, model, task, count_parameters(model)["total"], model_args=model_args
            )
        )
    if archs:
        try:
            specs = parse_model_specs(list(archs))
        except ParamsError as exc:
            raise SpeedError(str(exc)) from None
        for spec in specs:
            torch.manual_seed(seed)
            try:
                model, task, model_args = _build_random(
                    spec, vocab_size, data, share_all_embeddings
                )
            except ParamsError as exc:
                raise SpeedError(str(exc)) from None
            out.append(
                Candidate(
                    spec.name,
                    spec.arch + "".join(f" {a}" for a in spec.args),
                    model,
                    task,
                    count_parameters(model)["total"],
                    random_weights=True,
                    args=list(spec.args),
                    model_args=model_args,
                )
            )
    if not out:
        raise SpeedError("nothing to measure: give --path and/or --arch")
    labels = [c.label for c in out]
    if len(set(labels)) != len(labels):
        raise SpeedError(f"labels must be unique, got {labels} (use LABEL=... to name models)")
    return out


def with_int8(
    candidates: Sequence[Candidate], keep_float: bool, variants: Sequence[str] = ("int8",)
) -> list[Candidate]:
    """int8 copies of ``candidates`` (after each float one when ``keep_float``), one per
    variant: ``int8`` (every linear map) or ``int8-large`` (only maps with at least
    :data:`~lightcompress.deploy.quantize.LARGE_MAP_ELEMENTS` weights)."""
    from lightcompress.deploy.quantize import LARGE_MAP_ELEMENTS, quantize_model_int8

    out = []
    for c in candidates:
        if keep_float:
            out.append(c)
        for variant in variants:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore", UserWarning)  # torch's qint8 deprecation notice
                warnings.simplefilter("ignore", DeprecationWarning)
                q = quantize_model_int8(
                    c.model,
                    min_weight_elements=LARGE_MAP_ELEMENTS if variant == "int8-large" else 0,
                )
            out.append(
                Candidate(
                    c.label,
                    c.source,
                    q,
                    c.task,
                    c.params,
                    variant,
                    c.random_weights,
                    c.args,
                    model_args=c.model_args,
                    float_model=c.model,
                )
            )
    return out


# the exports kept for the next run in this process (keep_exports): the folder that holds them
# (None: nothing is kept) and key -> its folder of hard links there
_kept_folder: str | None = None
_kept: dict = {}


def keep_exports() -> None:
    """Keep this process's ONNX Runtime and CTranslate2 exports of checkpoint files for its
    next runs: a later run that exports the same checkpoint file (same size and modification
    time), data, shortlist and precision links the kept files instead of exporting again (the
    exports are deterministic). For ``lightcompress-compress``, whose two speed steps (batch 1
    and batch 32, called in its process) export the same models. The files are hard links in a
    folder of their own (no second copy on disk), removed when the process exits."""
    global _kept_folder
    if _kept_folder is None:
        import atexit
        import shutil
        import tempfile

        _kept_folder = tempfile.mkdtemp(prefix="measure_speed.kept.")
        atexit.register(shutil.rmtree, _kept_folder, True)


def _identity(path: str | None):
    if path is None:
        return None
    st = os.stat(path)
    return os.path.realpath(path), st.st_size, st.st_mtime_ns, st.st_ino


def _export_key(c, engine: str, prefix: str, precision: str, shortlist: str | None):
    """What an export depends on (None: not kept: a model with random weights)."""
    if _kept_folder is None or c.random_weights or not os.path.isfile(str(c.source)):
        return None
    cfg = getattr(c.task, "cfg", None) or getattr(c.task, "args", None)
    data = getattr(cfg, "data", None)
    return (engine, prefix, precision, _identity(c.source), data, _identity(shortlist))


def _link_or_copy(src: str, dst: str) -> None:
    import shutil

    try:
        os.link(src, dst)
    except OSError:  # (another file system)
        shutil.copy2(src, dst)


def _link_tree(src: str, dst: str) -> None:
    import shutil

    shutil.copytree(src, dst, copy_function=_link_or_copy)


def _keep(key, target: str) -> None:
    """Keep the export in ``target`` under ``key`` (best effort: not kept where it cannot be)."""
    import shutil

    kept = os.path.join(_kept_folder, str(len(_kept)))
    try:
        _link_tree(target, kept)
    except OSError:
        shutil.rmtree(kept, ignore_errors=True)
        return
    _kept[key] = kept


def _with_exports(
    candidates,
    workdir,
    engine,
    name,
    precisions,
    export,
    make_runner,
    errors,
    log=None,
    prefix="",
    shortlist=None,
):
    """For every float32 fairseq candidate, one candidate per precision of ``engine``:
    ``export(candidate, target, precision)`` writes it into ``workdir`` (or, after
    :func:`keep_exports`, the kept export of an earlier run is linked there), ``make_runner(
    candidate, target, precision)`` times it. An export refused with one of ``errors`` gives
    a note (and, refused in the first precision, no candidates of that model; in another, none
    of that precision). Returns the new candidates and the notes."""
    os.makedirs(workdir, exist_ok=True)
    out, notes = [], []
    for i, c in enumerate(candidates):
        if c.engine != "fairseq" or c.precision != "float32":
            continue
        for precision in precisions:
            target = os.path.join(workdir, f"{i}-{prefix}{precision}")
            key = _export_key(c, engine, prefix, precision, shortlist)
            try:
                if key is not None and key in _kept:
                    _link_tree(_kept[key], target)
                else:
                    export(c, target, precision)
                    if key is not None:
                        _keep(key, target)
            except errors as exc:
                notes.append(f"{c.label}: no {name} export ({exc})")
                if precision == precisions[0]:  # (a model it cannot export at all)
                    break
                continue  # (one precision refused, e.g. int8 of the large maps of a small model)
            if log:
                log(f"exported {c.label} to {name} ({precision}): {target}")
            out.append(
                Candidate(
                    c.label,
                    target,
                    None,
                    c.task,
                    c.params,
                    precision,
                    c.random_weights,
                    c.args,
                    engine=engine,
                    runner=make_runner(c, target, precision),
                    model_args=c.model_args,
                    size_bytes=directory_bytes(target),
                )
            )
    return out, notes


def with_ct2(
    candidates: Sequence[Candidate],
    workdir: str,
    threads: int,
    log=None,
    shortlist: str | None = None,
) -> tuple[list[Candidate], list[str]]:
    """CTranslate2 float32 and int8 candidates exported from every float32 fairseq
    candidate (:func:`lightcompress.deploy.ct2.export_model`, into ``workdir``; the int8 model
    is exported with int8 weights; a student whose factors multiply out is exported as the
    dense Transformer it computes); with ``shortlist``, each also exported with it as
    CTranslate2's vocabulary map and run with ``use_vmap`` (after the one without). Returns the
    new candidates and one note per model that could not be exported (Admin, Subformer,
    DA-WID). Without ctranslate2 (the ``[ct2]`` extra): no candidates and one note saying so."""
    from lightcompress.deploy.ct2 import ExportError, ctranslate2_missing, export_model
    from lightcompress.measure.engines import CT2Runner

    missing = ctranslate2_missing()
    if missing:
        return [], [f"{missing}: no CTranslate2 rows"]

    def exports(sl):
        def export(c, target, precision):
            export_model(c.model, c.task, c.model_args, target, precision, shortlist=sl)

        def runner(c, target, precision):
            return CT2Runner(
                target,
                precision,
                threads,
                c.task.source_dictionary,
                c.task.target_dictionary,
                c.model.max_decoder_positions(),
                c.model.max_positions(),
                use_vmap=sl is not None,
            )

        return _with_exports(
            candidates,
            workdir,
            "ctranslate2",
            "CTranslate2",
            ("float32", "int8"),
            export,
            runner,
            ExportError,
            log,
            prefix="vmap-" if sl else "",
            shortlist=sl,
        )

    return _with_and_without(shortlist, exports)


def with_onnx(
    candidates: Sequence[Candidate],
    workdir: str,
    threads: int,
    variants: Sequence[str],
    log=None,
    shortlist: str | None = None,
) -> tuple[list[Candidate], list[str]]:
    """ONNX Runtime candidates (:mod:`lightcompress.deploy.onnx_export`, into ``workdir``) of
    every float32 fairseq candidate: float32, and ``int8`` (every map) / ``int8-large`` (the
    maps of at least 2^17 weights) when in ``variants``; with ``shortlist``, each also exported
    with it and run with it (after the one without). Returns the new candidates and one note
    per model that could not be exported."""
    from lightcompress.deploy.onnx_export import export_onnx
    from lightcompress.deploy.onnx_graphs import ExportError
    from lightcompress.measure.engines import OnnxRunner

    def exports(sl):
        def export(c, target, precision):
            int8 = {"float32": None, "int8": "all", "int8-large": "large"}[precision]
            export_onnx(c.model, c.task, target, int8=int8, shortlist=sl)

        def runner(c, target, precision):
            return OnnxRunner(
                target,
                threads,
                c.task.source_dictionary.pad(),
                c.model.max_positions(),
                shortlist=sl is not None,
            )

        return _with_exports(
            candidates,
            workdir,
            "onnxruntime",
            "ONNX",
            ("float32", *variants),
            export,
            runner,
            ExportError,
            log,
            prefix="onnx-sl-" if sl else "onnx-",
            shortlist=sl,
        )

    return _with_and_without(shortlist, exports)


def _with_and_without(shortlist: str | None, exports) -> tuple[list[Candidate], list[str]]:
    """``exports(None)``'s candidates and, with ``shortlist``, ``exports(shortlist)``'s (each
    marked with it, right after the same one without); the notes of both, once each."""
    out, notes = [], []
    for sl in (None, shortlist) if shortlist else (None,):
        new, new_notes = exports(sl)
        for c in new:
            c.shortlist = sl
        out, notes = out + new, notes + [n for n in new_notes if n not in notes]
    return _shortlist_after_plain(out), notes


def _shortlist_after_plain(candidates: list[Candidate]) -> list[Candidate]:
    """Each candidate with a shortlist right after the same one without."""
    plain = [c for c in candidates if c.shortlist is None]
    out = []
    for c in plain:
        out.append(c)
        out += [
            s
            for s in candidates
            if s.shortlist is not None
            and s.label == c.label
            and s.precision == c.precision
            and s.engine == c.engine
        ]
    return out


def directory_bytes(path: str) -> int:
    """Total size of the files under ``path``."""
    return sum(
        os.path.getsize(os.path.join(root, f))
        for root, _dirs, files in os.walk(path)
        for f in files
    )


def state_dict_bytes(model: torch.nn.Module) -> int:
    """Bytes of the model's weights as ``torch.save`` stores them: its state dict with a module
    that several parents share saved once and a tensor that several modules share stored once
    (layer sharing); int8 models store int8 weights."""
    import io

    state: dict = {}
    for prefix, module in model.named_modules():  # a module shared by several parents once
        module._save_to_state_dict(state, prefix + "." if prefix else "", keep_vars=False)
    buffer = io.BytesIO()
    torch.save(state, buffer)
    return buffer.tell()
