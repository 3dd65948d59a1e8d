"""Models of a measurement built from their names: ``[LABEL=]ARCH[:--flag[=value]]...`` specs
(:class:`ModelSpec`) and random-weight models of them without data, on the papers' convention
(one joined dictionary, ``--share-all-embeddings``; see :mod:`lightcompress.measure.params`)
or, for RoBERTa-style sentence encoders, with the ``sentence_prediction`` task.

:func:`build_random_model` builds on :func:`lightcompress.build.build_model_without_data`, the
package's one way of building a fairseq model without data; errors are :class:`ParamsError`.
"""

from __future__ import annotations

import argparse
import re
import sys
from collections.abc import Sequence
from dataclasses import dataclass, field

from lightcompress.errors import LightcompressError

__all__ = [
    "ModelSpec",
    "ParamsError",
    "build_random_model",
    "is_sentence_encoder",
    "make_dictionary",
    "parse_model_args",
    "parse_model_specs",
]

_SENTENCE_MAX_POSITIONS = 512  # fairseq's sentence_prediction --max-positions default


class ParamsError(LightcompressError, ValueError):
    """A user error (unknown architecture, bad vocabulary size, bad model flag)."""


# --------------------------------------------------------------------------------------------
# building models without data
# --------------------------------------------------------------------------------------------


def _import_plugin():
    import lightcompress.plugin  # noqa: F401  (registers the plugin's architectures)


def _check_arch(arch: str) -> None:
    from lightcompress.build import check_arch

    try:
        check_arch(arch)
    except ValueError as exc:
        raise ParamsError(str(exc)) from None


def make_dictionary(vocab_size: int):
    """A fairseq ``Dictionary`` of exactly ``vocab_size`` entries (4 specials + dummy words);
    :func:`lightcompress.build.dictionary_of_size` with the CLI's error message."""
    from lightcompress.build import dictionary_of_size

    nspecial = 4
    if isinstance(vocab_size, bool) or not isinstance(vocab_size, int) or vocab_size <= nspecial:
        raise ParamsError(
            f"--vocab-size must be an integer > {nspecial} (the dictionary's total size, "
            f"{nspecial} special symbols included), got {vocab_size!r}"
        )
    return dictionary_of_size(vocab_size)


def parse_model_args(
    arch: str, extra_args: Sequence[str] = (), data: str = "<no-data>"
) -> argparse.Namespace:
    """fairseq's training arguments for ``arch`` (translation task) plus ``extra_args``:
    :func:`lightcompress.build.parse_model_args`, errors as :class:`ParamsError`."""
    from lightcompress.build import parse_model_args as parse

    try:
        return parse(arch, extra_args, task="translation", data=data)
    except ValueError as exc:
        raise ParamsError(str(exc)) from None


def _with_sharing(extra_args: Sequence[str], share: bool) -> list[str]:
    extra = [str(a) for a in extra_args]
    if share and "--share-all-embeddings" not in extra:
        extra.append("--share-all-embeddings")
    if not share:
        extra = [a for a in extra if a != "--share-all-embeddings"]
    return extra


def build_random_model(
    arch: str,
    vocab_size: int,
    extra_args: Sequence[str] = (),
    share_all_embeddings: bool = True,
    return_task: bool = False,
):
    """Build a fairseq translation model with random weights and no data directory, with the
    papers' convention (one joined dictionary, ``--share-all-embeddings``): flags are parsed by
    :func:`lightcompress.build.parse_model_args`, the model built by
    :func:`lightcompress.build.build_model_without_data`.

    Parameters
    ----------
    arch : str
        Any registered architecture (fairseq's or the plugin's).
    vocab_size : int
        Total size of the joined source = target dictionary (4 specials included).
    extra_args : sequence of str
        fairseq model flags, e.g. ``["--encoder-layers", "12"]``.
    share_all_embeddings : bool
        Add ``--share-all-embeddings`` (the papers' convention). When fairseq refuses it (encoder
        and decoder widths differ), the model is built without it and ``args.share_all_embeddings``
        is False.
    return_task : bool
        Also return the ``TranslationTask`` (holding the dictionaries) and the parsed args.

    Returns
    -------
    model, or (model, task, args) with ``return_task``
    """
    from lightcompress.build import build_model_without_data as build

    _check_arch(arch)  # an unknown architecture is reported before a bad vocabulary size
    dictionary = make_dictionary(vocab_size)
    if is_sentence_encoder(arch):
        model, args = _build_sentence_encoder(arch, dictionary, extra_args)
        if return_task:
            from lightcompress.build import NoDataTask

            return model, NoDataTask(dictionary), args
        return model
    args = parse_model_args(
        arch,
        ["-s", "src", "-t", "tgt"] + _with_sharing(extra_args, share_all_embeddings),
    )
    try:
        model = build(args, dictionary)
    except ValueError as exc:
        if not (share_all_embeddings and "share-all-embeddings" in str(exc)):
            raise ParamsError(f"cannot build {arch}: {exc}") from None
        print(
            f"note: {arch} cannot share all embeddings ({exc}); built without "
            "--share-all-embeddings",
            file=sys.stderr,
        )
        args = parse_model_args(arch, ["-s", "src", "-t", "tgt"] + _with_sharing(extra_args, False))
        model = build(args, dictionary)
    except Exception as exc:  # noqa: BLE001 - turn any build failure into one clear line
        raise ParamsError(f"cannot build {arch}: {type(exc).__name__}: {exc}") from None
    model.eval()
    if return_task:
        from fairseq.tasks.translation import TranslationTask

        return model, TranslationTask(args, dictionary, dictionary), args
    return model


def is_sentence_encoder(arch: str | None) -> bool:
    """Whether ``arch`` (an architecture or a model name) is a RoBERTa-style sentence encoder
    (fairseq's ``roberta_*``, DA-WID's ``dawid_roberta_fused``, ...), counted with the
    ``sentence_prediction`` task (module docstring)."""
    from fairseq.models import ARCH_MODEL_REGISTRY, MODEL_REGISTRY
    from fairseq.models.roberta import RobertaModel

    _import_plugin()
    cls = ARCH_MODEL_REGISTRY.get(arch) or MODEL_REGISTRY.get(arch)
    return cls is not None and issubclass(cls, RobertaModel)


def _with_classification_heads(model, heads: dict, where: str):
    """Register ``{name: (num_classes, inner_dim or None)}`` on a sentence encoder."""
    for name, (classes, inner) in heads.items():
        try:
            model.register_classification_head(name, num_classes=classes, inner_dim=inner)
        except Exception as exc:  # noqa: BLE001 - one clear line
            raise ParamsError(
                f"{where}: cannot add classification head {name!r}: {type(exc).__name__}: {exc}"
            ) from None
    return model


def _build_sentence_encoder(arch: str, dictionary, extra_args: Sequence[str]):
    """``(model, args)``: a sentence encoder of ``arch`` parsed with the ``sentence_prediction``
    task's flags, with the classification head fairseq's task adds (``--num-classes N``)."""
    from lightcompress.build import build_model_without_data as build
    from lightcompress.build import parse_model_args as parse

    extra = [str(a) for a in extra_args if a != "--share-all-embeddings"]
    if "--criterion" not in extra:  # its --classification-head-name, as fairseq-train has it
        extra = ["--criterion", "sentence_prediction", *extra]
    try:
        args = parse(arch, extra, task="sentence_prediction")
    except ValueError as exc:
        raise ParamsError(str(exc)) from None
    if getattr(args, "max_positions", None) is None:
        args.max_positions = _SENTENCE_MAX_POSITIONS
    try:
        model = build(args, dictionary)
    except Exception as exc:  # noqa: BLE001 - turn any build failure into one clear line
        raise ParamsError(f"cannot build {arch}: {type(exc).__name__}: {exc}") from None
    classes = getattr(args, "num_classes", -1)
    if classes is not None and classes > 0:
        name = getattr(args, "classification_head_name", None) or "sentence_classification_head"
        _with_classification_heads(model, {name: (classes, None)}, arch)
    model.eval()
    return model, args


# --------------------------------------------------------------------------------------------
# model specs: "[LABEL=]ARCH[:--flag[=value]]..."
# --------------------------------------------------------------------------------------------


@dataclass
class ModelSpec:
    """One model of a comparison: ``[LABEL=]ARCH[:--flag[=value]]...``.

    Examples: ``transformer_iwslt_de_en``,
    ``12-2=transformer_iwslt_de_en:--encoder-layers=12:--decoder-layers=2``,
    ``lf=lightformer_iwslt_de_en:--no-share-all-embeddings``. Flags are separated by ``:`` followed
    by ``--``; ``--flag=value`` becomes ``["--flag", "value"]`` (values may contain ``=``, ``,``
    and ``:``), a bare ``--flag`` is a switch. ``--no-share-all-embeddings`` is understood per model.
    """

    arch: str
    args: list[str] = field(default_factory=list)
    label: str | None = None
    share_all_embeddings: bool = True

    @property
    def name(self) -> str:
        return self.label or self.arch

    @classmethod
    def parse(cls, text: str) -> ModelSpec:
        text = text.strip()
        if not text:
            raise ParamsError("empty model spec")
        head, *flags = re.split(r":(?=--)", text)
        label = None
        if "=" in head:
            label, head = head.split("=", 1)
            label = label.strip() or None
        spec = cls(arch=head.strip(), label=label)
        for flag in flags:
            if not flag.startswith("--") or flag == "--":
                raise ParamsError(f"bad flag {flag!r} in model spec {text!r}")
            if flag == "--no-share-all-embeddings":
                spec.share_all_embeddings = False
                continue
            if "=" in flag:
                key, value = flag.split("=", 1)
                spec.args += [key, value]
            else:
                spec.args.append(flag)
        return spec


def parse_model_specs(text: str | Sequence[str]) -> list[ModelSpec]:
    """Split comma-separated model specs (one string or several) into :class:`ModelSpec` s.

    A comma starts a new model only where the text after it begins with ``[LABEL=]ARCH`` of a
    registered architecture; other commas belong to a flag value of the previous model.
    """
    from fairseq.models import ARCH_MODEL_REGISTRY

    _import_plugin()
    texts = [text] if isinstance(text, str) else list(text)
    items: list[str] = []
    for t in texts:
        pieces = t.split(",")
        current: str | None = None
        for piece in pieces:
            head = re.split(r":(?=--)", piece, maxsplit=1)[0]
            arch = head.split("=", 1)[-1].strip()
            starts_model = arch in ARCH_MODEL_REGISTRY or current is None
            if starts_model:
                if current is not None:
                    items.append(current)
                current = piece
            else:
                current += "," + piece
        if current is not None:
            items.append(current)
    return [ModelSpec.parse(i) for i in items if i.strip()]
