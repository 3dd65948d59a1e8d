"""Building fairseq models without data: the one way of the package (and of its tests).

A fairseq model's ``build_model(args, task)`` needs only the task's dictionaries, and of those
only their sizes and special symbols. :func:`dictionary_of_size` makes a dictionary of a given
size, :class:`NoDataTask` holds them, :func:`build_model_without_data` builds any registered
architecture (translation models and language models, fairseq's and the plugin's)::

    args = parse_model_args("lightformer_iwslt_de_en", ["--share-all-embeddings"])
    model = build_model_without_data(args, 10200)                    # joined dictionary
    model = build_model_without_data(args, 10200, 9800)              # separate target table
    lm = build_model_without_data(
        parse_model_args("subformer_lm", ["--tokens-per-sample", "64"], task="language_modeling"),
        267744,
    )

``args`` is what fairseq's training parser gives (:func:`parse_model_args`, or the Namespace /
model config a checkpoint stores). Language models are built from the model config fairseq-train
derives from that Namespace (their defaults live in a dataclass, which argparse leaves out).
"""

from __future__ import annotations

import argparse
import contextlib
import io
import re
import warnings
from collections.abc import Sequence

__all__ = [
    "NoDataTask",
    "build_model_without_data",
    "check_arch",
    "dictionary_of_size",
    "model_class",
    "parse_model_args",
]


def dictionary_of_size(size: int):
    """A fairseq ``Dictionary`` of exactly ``size`` entries: the 4 specials
    (``<s> <pad> </s> <unk>``) and placeholder words ``w0, w1, ...``."""
    from fairseq.data import Dictionary

    d = Dictionary()
    if isinstance(size, bool) or not isinstance(size, int) or size < len(d):
        raise ValueError(
            f"a dictionary needs an integer size >= {len(d)} (its special symbols included), "
            f"got {size!r}"
        )
    for i in range(size - len(d)):
        d.add_symbol(f"w{i}")
    return d


def _as_dictionary(vocab):
    return dictionary_of_size(vocab) if isinstance(vocab, int) else vocab


class NoDataTask:
    """Just enough of a fairseq task to build a model: its dictionaries.

    ``source_dictionary`` / ``target_dictionary`` (translation) and ``dictionary`` /
    ``output_dictionary`` (language modeling); the target defaults to the source.
    """

    def __init__(self, source_dictionary, target_dictionary=None):
        self.source_dictionary = source_dictionary
        self.target_dictionary = (
            source_dictionary if target_dictionary is None else target_dictionary
        )

    @property
    def dictionary(self):
        return self.source_dictionary

    @property
    def output_dictionary(self):
        return self.target_dictionary


def _arch_name(args) -> str | None:
    return getattr(args, "arch", None) or getattr(args, "_name", None)


def model_class(args):
    """The model class of ``args.arch`` (an architecture, or a model name of a config)."""
    from fairseq.models import ARCH_MODEL_REGISTRY, MODEL_REGISTRY

    import lightcompress.plugin  # noqa: F401  (the plugin's architectures)

    arch = _arch_name(args)
    cls = ARCH_MODEL_REGISTRY.get(arch) or MODEL_REGISTRY.get(arch)
    if cls is None:
        raise ValueError(f"unknown architecture {arch!r}")
    return cls


def _language_model_config(args: argparse.Namespace):
    """The model config fairseq-train builds from a training Namespace (dataclass defaults and
    the task's interpolations such as ``tokens_per_sample`` filled in)."""
    from fairseq.dataclass.utils import convert_namespace_to_omegaconf

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # hydra's deprecation chatter
        return convert_namespace_to_omegaconf(args).model


def build_model_without_data(args, src_vocab, tgt_vocab=None, **build_kwargs):
    """Build ``args``' architecture with random weights and no data.

    Parameters
    ----------
    args : argparse.Namespace or model config
        fairseq's training arguments (:func:`parse_model_args`), or the ``args`` / ``cfg.model``
        of a checkpoint. For a language model given as a Namespace, the model config is derived
        from it as fairseq-train does (the Namespace must then be a whole training Namespace).
    src_vocab : int or Dictionary
        The source dictionary (a language model's only one), or its size
        (:func:`dictionary_of_size`).
    tgt_vocab : int or Dictionary, optional
        The target dictionary or its size; default: the source dictionary itself (a joined
        dictionary, as ``--share-all-embeddings`` needs).
    **build_kwargs
        Passed to the model class's ``build_model`` (e.g. the plugin's ``plan=``).

    Returns
    -------
    the model, in training mode (as ``build_model`` leaves it)
    """
    from fairseq.models import FairseqLanguageModel

    cls = model_class(args)
    src = _as_dictionary(src_vocab)
    if tgt_vocab is None or (isinstance(tgt_vocab, int) and tgt_vocab == len(src)):
        tgt = src
    else:
        tgt = _as_dictionary(tgt_vocab)
    if isinstance(args, argparse.Namespace) and issubclass(cls, FairseqLanguageModel):
        args = _language_model_config(args)
    return cls.build_model(args, NoDataTask(src, tgt), **build_kwargs)


def check_arch(arch: str) -> None:
    """Raise ``ValueError`` naming similar architectures when ``arch`` is not registered."""
    from fairseq.models import ARCH_MODEL_REGISTRY

    import lightcompress.plugin  # noqa: F401  (the plugin's architectures)

    if arch not in ARCH_MODEL_REGISTRY:
        close = [a for a in sorted(ARCH_MODEL_REGISTRY) if arch.split("_")[0] in a][:8]
        hint = f" (similar: {', '.join(close)})" if close else ""
        raise ValueError(f"unknown architecture {arch!r}{hint}")


def parse_model_args(
    arch: str,
    flags: Sequence[str] = (),
    task: str = "translation",
    data: str = "<no-data>",
) -> argparse.Namespace:
    """fairseq's training arguments for ``arch`` and the model ``flags``, exactly as
    ``fairseq-train DATA --task TASK --arch ARCH FLAGS`` parses them (the architecture's
    defaults applied, plugin flags included).

    ``data`` is only a placeholder unless the caller sets the task up from it. Raises ``ValueError`` with fairseq's one-line
    message for an unknown architecture or a bad flag.
    """
    from fairseq import options

    check_arch(arch)
    flags = [str(a) for a in flags]
    argv = [data, "--task", task, "--arch", arch, "--cpu"]
    parser = options.get_training_parser(default_task=task)
    err = io.StringIO()
    try:
        with contextlib.redirect_stderr(err):
            return options.parse_args_and_arch(parser, argv + flags)
    except SystemExit:
        lines = [ln for ln in err.getvalue().splitlines() if ln.strip()]
        msg = lines[-1] if lines else "could not parse the model flags"
        msg = re.sub(r"^[\w.-]+: error: ", "", msg)
        raise ValueError(f"bad model flags for {arch}: {msg}") from None
