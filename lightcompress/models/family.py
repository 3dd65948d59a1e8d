"""A compressed family is one declaration: :class:`Family`, registered by one call.

A family (LightFormer, Hypoformer, Smartformer, the next method) is data:

- ``config``: a frozen dataclass deriving from
  :class:`~lightcompress.models.presets.CompressionConfig`; its own fields are its flags
  (``lc_rank`` -> ``--lc-rank``), each with its ``help`` (:func:`~lightcompress.models.presets.flag_field`);
- ``spec``: the compression spec its flags mean, as a function ``args -> spec text`` or as a
  template whose ``{fields}`` are the flags (``"*.fc1, *.fc2 = lowrank(rank={my_rank})"``);
  ``--lc-spec`` replaces it for every family;
- ``presets``: its named architectures (:class:`~lightcompress.models.presets.Preset`);
- ``check``: any further check of its flags (the spec text is always made once before
  anything is built, so a bad flag value fails there with one line);
- ``transfer``: how ``lightcompress-convert`` fills a student from a dense Transformer
  (:class:`Transfer`: the settings that must match the teacher, preconditions, options); the
  transfer itself is the same for every family (:mod:`lightcompress.convert.family`).

:func:`register_family` registers the fairseq model (a :class:`FamilyModel`, i.e. the one
:class:`~lightcompress.models.compressed.CompressedTransformerModel` reading its
declaration), its architectures and, through :data:`FAMILIES`, its converter. As fairseq's
own ``register_model`` / ``register_model_architecture`` (which silently keep the first model
of a name), but refusing any name that is taken.
"""

from __future__ import annotations

import argparse
import dataclasses
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field

from lightcompress.models.compressed import CompressedTransformerModel
from lightcompress.models.presets import (
    PRESETS,
    CompressionConfig,
    Preset,
    add_config_args,
    add_presets,
    own_fields,
)

__all__ = [
    "FAMILIES",
    "Family",
    "FamilyModel",
    "Transfer",
    "register_family",
    "unregister_family",
]


@dataclass(frozen=True, eq=False)
class Transfer:
    """The converter of a family as data (``lightcompress-convert --arch <its preset>``).

    Every family's conversion is the same (:mod:`lightcompress.convert.family`): the teacher's
    layers are mapped into a dense model of the student's shape (teacher depth = student depth,
    or = number of sharing groups), Admin omegas start at 1 (the teacher's plain residuals),
    each layer the student's spec names is fitted by its kind's ``from_dense`` (SVD, TT-SVD,
    CP), the groups are tied and the student is rebuilt from its own flags.

    Attributes
    ----------
    method : str
        What the transfer is called in messages (``"SVD transfer"``).
    same : tuple of str
        Settings the student must have as the teacher has them (widths, depths, heads).
    title : str
        Heading of the converter's own options in ``lightcompress-convert --help``.
    options : tuple of (flags, argparse keyword arguments)
        The converter's own options (names unique among all converters).
    check : callable, optional
        ``(teacher_args, student_args, opts, log) -> None``: the preconditions beyond
        ``same``; raises :class:`~lightcompress.errors.ConfigError` with the reason.
    spec : callable, optional
        ``(student_args, opts) -> spec text`` (default: the family's spec of the student's
        flags), e.g. ranks or energy thresholds given to the converter.
    finish : callable, optional
        ``(student_args, opts, records) -> None``: set the student's flags so that they
        rebuild exactly the converted model (e.g. the ranks an energy threshold chose).
    """

    method: str
    same: tuple[str, ...] = ()
    title: str = ""
    options: tuple[tuple[tuple[str, ...], dict], ...] = ()
    check: Callable | None = None
    spec: Callable | None = None
    finish: Callable | None = None


@dataclass(frozen=True, eq=False)
class Family:
    """One compressed family (see the module docstring).

    Attributes
    ----------
    name : str
        The fairseq model name (checkpoints store it through their architecture); prefix of
        its architecture names and its flags, so that nothing collides.
    config : type
        Frozen dataclass deriving from ``CompressionConfig``: its own fields are its flags.
    spec : callable or str
        ``args -> spec text``, or a template formatted with the flags.
    presets : mapping
        Architecture name -> ``Preset`` (whose ``model`` is ``name``).
    title : str
        Heading of its flags in ``--help`` (default: ``"<name> (lightcompress)"``).
    doc : str
        Docstring of its model class (what ``python -m lightcompress`` shows).
    check : callable, optional
        ``args -> None``: further flag checks (raise ``ConfigError``).
    transfer : Transfer, optional
        Its converter; None: ``lightcompress-convert`` has none for it.
    class_name : str, optional
        Name of the generated model class (default: ``<Name>Model``).
    """

    name: str
    config: type
    spec: Callable | str
    presets: Mapping[str, Preset] = field(default_factory=dict)
    title: str = ""
    doc: str = ""
    check: Callable | None = None
    transfer: Transfer | None = None
    class_name: str | None = None

    def flags(self) -> type:
        """A dataclass of the family's own flags (the fields ``CompressionConfig`` lacks)."""
        return own_fields(self.config, CompressionConfig)

    def spec_text(self, args) -> str:
        """The compression spec of ``args`` (``--lc-spec`` wins)."""
        if getattr(args, "lc_spec", None):
            return args.lc_spec
        if callable(self.spec):
            return self.spec(args)
        return self.spec.format_map(_Flags(args))


class _Flags(Mapping):
    """``args`` (a Namespace or a checkpoint's model config) as a mapping, for templates."""

    def __init__(self, args):
        self._args = args

    def __getitem__(self, key):
        try:
            return getattr(self._args, key)
        except AttributeError:
            raise KeyError(key) from None

    def __iter__(self):
        return iter(vars(self._args))

    def __len__(self):
        return len(vars(self._args))


class FamilyModel(CompressedTransformerModel):
    """The compressed Transformer of a declared family (``family``: its :class:`Family`)."""

    family: Family

    @classmethod
    def add_args(cls, parser):
        super().add_args(parser)
        family = cls.family
        add_config_args(parser, family.flags(), family.title or f"{family.name} (lightcompress)")

    @classmethod
    def spec_text(cls, args) -> str:
        return cls.family.spec_text(args)

    @classmethod
    def check_args(cls, args) -> None:
        super().check_args(args)
        if cls.family.check is not None:
            cls.family.check(args)
        cls.family.spec_text(args)  # bad flag values: one clear error before anything is built


FAMILIES: dict[str, Family] = {}
"""fairseq model name -> :class:`Family`, for every registered family (in order)."""


def _transformer_flags() -> set[str]:
    parser = argparse.ArgumentParser(add_help=False)
    CompressedTransformerModel.add_args(parser)
    return {a.dest for a in parser._actions}


def _check(family: Family) -> None:
    from fairseq.models import ARCH_MODEL_REGISTRY, MODEL_REGISTRY

    name = family.name
    if name in FAMILIES or name in MODEL_REGISTRY:
        raise ValueError(f"a fairseq model named {name!r} is already registered")
    if not (
        dataclasses.is_dataclass(family.config) and issubclass(family.config, CompressionConfig)
    ):
        raise ValueError(f"family {name!r}: config must be a dataclass deriving CompressionConfig")
    clash = sorted({f.name for f in dataclasses.fields(family.flags())} & _transformer_flags())
    if clash:
        raise ValueError(f"family {name!r}: flags {clash} are already fairseq Transformer flags")
    for arch, preset in family.presets.items():
        if preset.model != name:
            raise ValueError(f"preset {arch!r} belongs to {preset.model!r}, not to {name!r}")
        if arch in PRESETS or arch in ARCH_MODEL_REGISTRY:
            raise ValueError(f"architecture {arch!r} is already registered")
    if family.transfer is not None:
        taken = {
            o
            for f in FAMILIES.values()
            if f.transfer
            for flags, _ in f.transfer.options
            for o in flags
        }
        clash = sorted(taken & {o for flags, _ in family.transfer.options for o in flags})
        if clash:
            raise ValueError(f"family {name!r}: converter options {clash} are taken")


def register_family(family: Family, module: str | None = None) -> type:
    """Register ``family``: its fairseq model, its architectures, its converter (read by
    ``lightcompress-convert`` from :data:`FAMILIES`). Returns the model class.

    ``module`` names the module the class is said to come from (default: the one of the
    family's config). Raises ValueError, registering nothing, if any name is taken."""
    from fairseq.models import register_model

    _check(family)
    class_name = family.class_name or family.name.title().replace("_", "") + "Model"
    cls = type(
        class_name,
        (FamilyModel,),
        {
            "family": family,
            "__doc__": family.doc or f"The compressed Transformer of the {family.name} family.",
            "__module__": module or family.config.__module__,
            "__qualname__": class_name,
        },
    )
    register_model(family.name)(cls)
    try:
        add_presets(family.presets)
    except ValueError:
        unregister_family(family.name)
        raise
    FAMILIES[family.name] = family
    return cls


def unregister_family(name: str) -> None:
    """Remove a family registered by :func:`register_family` (its model, architectures and
    presets) from fairseq's registries and the plugin's tables: for tests and notebooks that
    declare a family for a while."""
    from fairseq.models import (
        ARCH_CONFIG_REGISTRY,
        ARCH_MODEL_INV_REGISTRY,
        ARCH_MODEL_NAME_REGISTRY,
        ARCH_MODEL_REGISTRY,
        MODEL_REGISTRY,
    )

    if name not in MODEL_REGISTRY or not issubclass(MODEL_REGISTRY[name], FamilyModel):
        raise ValueError(f"{name!r} is not a registered family")
    for arch in ARCH_MODEL_INV_REGISTRY.pop(name, []):
        for table in (ARCH_MODEL_REGISTRY, ARCH_MODEL_NAME_REGISTRY, ARCH_CONFIG_REGISTRY):
            table.pop(arch, None)
        if arch in PRESETS and PRESETS[arch].model == name:
            del PRESETS[arch]
    MODEL_REGISTRY.pop(name, None)
    FAMILIES.pop(name, None)
    from lightcompress.checkpoint import unregister_plugin_model

    unregister_plugin_model(name)
