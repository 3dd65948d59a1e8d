"""Presets: every named architecture of the plugin, in one table, and the flag declarations.

A preset is a family configuration (a dataclass: the family's flags and their defaults, as
fairseq's ``TransformerConfig`` does for the Transformer) + the Transformer's shape (layers,
widths, heads, shared embeddings) + the fairseq base architecture that fills in the rest.
:data:`PRESETS` maps every architecture name to its :class:`Preset`; the families put theirs
in when they are registered (:func:`lightcompress.models.family.register_family` for the
compressed families, :func:`register_presets` for Subformer), which also registers each one
with fairseq under its name. The tests, ``python -m lightcompress --list-archs`` and the
recipe headers read the same table (``PRESETS[name].paper_params``).

Each family turns its configuration into spec text (its declaration in
``models/lightformer.py``, ``models/hypoformer.py``, ``models/smartformer.py``);
``--lc-spec`` replaces it for any preset. The family configurations themselves live with
their families; the old import paths (``from lightcompress.models.presets import
LightformerConfig``, ``TABLE5``, ...) still work.
"""

from __future__ import annotations

import dataclasses
import importlib
from collections.abc import Mapping
from dataclasses import dataclass, field

from fairseq.models import register_model_architecture

from lightcompress.admin import ADMIN_MODES

__all__ = [
    "ADMIN_MODES",
    "PRESETS",
    "CompressionConfig",
    "Preset",
    "add_config_args",
    "add_presets",
    "family_of",
    "flag_field",
    "own_fields",
    "register_presets",
]

# names that moved to their family's module (read lazily: those modules import this one)
_MOVED = {
    "LightformerConfig": "lightcompress.models.lightformer",
    "HypoformerConfig": "lightcompress.models.hypoformer",
    "EMBED_KINDS": "lightcompress.models.hypoformer",
    "LINEAR_KINDS": "lightcompress.models.hypoformer",
    "FUSED_KINDS": "lightcompress.models.hypoformer",
    "TABLE2": "lightcompress.models.hypoformer",
    "TABLE5": "lightcompress.models.hypoformer",
    "VOCAB": "lightcompress.models.hypoformer",
    "HEADS": "lightcompress.models.hypoformer",
    "SmartformerConfig": "lightcompress.models.smartformer",
    "SubformerConfig": "lightcompress.models.presets_subformer",
    "SUBFORMER_SHARING": "lightcompress.models.presets_subformer",
}


def __getattr__(name: str):
    if name in _MOVED:
        return getattr(importlib.import_module(_MOVED[name]), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def flag_field(default, help, **meta):
    """A configuration field that is a flag: its default (the preset value), its ``help`` and
    argparse settings (``type``, ``metavar``, ``choices``, ``flag="store_true"``)."""
    return field(default=default, metadata={"help": help, **meta})


_f = flag_field


@dataclass(frozen=True)
class CompressionConfig:
    """Flags every compressed family has."""

    lc_spec: str | None = _f(
        None,
        "a compression spec ('pattern = kind(params); ...', grammar in "
        "lightcompress.modules.spec and docs/architecture.md) used instead of the rules the "
        "family's flags generate",
        metavar="SPEC",
    )
    lc_encoder_groups: int = _f(
        0,
        "number of unique encoder layers: L layers in N contiguous groups share all "
        "parameters (0: no sharing)",
        type=int,
        metavar="N",
    )
    lc_decoder_groups: int = _f(
        0, "the same for the decoder (0: no sharing)", type=int, metavar="N"
    )
    admin_init: str = _f(
        "none",
        "residual scaling x * omega + f(x) of post-LN layers: profile (Liu et al. 2020, one "
        "training batch), closed-form (admin-torch, sqrt((N+1)/ln(N+1) - 1)) or none",
        choices=ADMIN_MODES,
    )
    no_share_all_embeddings: bool = _f(
        False,
        "do not share the source, target and output tables (the presets share them): a "
        "student of a teacher with separate dictionaries, or with only "
        "--share-decoder-input-output-embed",
        flag="store_true",
    )
    admin_profile_file: str | None = _f(
        None,
        "with --admin-init profile: read the omegas from PATH if it exists, otherwise profile "
        "on the first training batch and write them to PATH (JSON)",
        metavar="PATH",
    )


@dataclass(frozen=True)
class Preset:
    """One named architecture.

    Attributes
    ----------
    model : str
        The fairseq model name (family) it belongs to.
    config : dataclass instance
        The family configuration (flag defaults).
    transformer : dict
        fairseq Transformer settings (``encoder_layers``, widths, heads, ...), in order; a
        callable value is computed from the arguments set so far (``decoder_embed_dim``
        follows ``encoder_embed_dim``).
    base : callable
        fairseq's architecture function that sets the remaining Transformer defaults.
    doc : str
        What it is (paper table and row); shown by ``fairseq-train --help`` lists.
    paper_params : float, optional
        The paper's parameter count in millions.
    vocab : int, optional
        The joined vocabulary at which ``paper_params`` is counted.
    """

    model: str
    config: object
    transformer: dict
    base: object
    doc: str
    paper_params: float | None = None
    vocab: int | None = None

    def apply(self, args) -> None:
        """Set this preset's defaults on ``args`` (anything the user set wins)."""
        if getattr(args, "no_share_all_embeddings", None):
            if getattr(args, "share_all_embeddings", None):
                raise ValueError("--share-all-embeddings and --no-share-all-embeddings contradict")
            args.share_all_embeddings = False
        for key, value in self.transformer.items():
            if getattr(args, key, None) is None:
                setattr(args, key, value(args) if callable(value) else value)
        for f in dataclasses.fields(self.config):
            if getattr(args, f.name, None) is None:
                setattr(args, f.name, getattr(self.config, f.name))
        self.base(args)


PRESETS: dict[str, Preset] = {}
"""Architecture name -> :class:`Preset`, for every named architecture of the plugin (filled
by the families as they are registered)."""


def add_config_args(parser, config_cls, title: str) -> None:
    """Add one flag per field of ``config_cls`` (``--lc-rank`` for ``lc_rank``), with the
    field's ``metadata["help"]`` and no default (the presets set them)."""
    group = parser.add_argument_group(title)
    for f in dataclasses.fields(config_cls):
        meta = dict(f.metadata)
        kwargs: dict = {"help": meta.get("help", "")}
        if meta.get("flag") == "store_true":
            kwargs.update(action="store_true", default=None)
        else:
            kwargs["type"] = meta.get("type", str)
            for key in ("choices", "metavar"):
                if key in meta:
                    kwargs[key] = meta[key]
        group.add_argument("--" + f.name.replace("_", "-"), **kwargs)


def own_fields(config_cls, common_cls):
    """A dataclass of the fields of ``config_cls`` that ``common_cls`` does not have (a
    family's own flags)."""
    common = {f.name for f in dataclasses.fields(common_cls)}
    return dataclasses.make_dataclass(
        config_cls.__name__ + "Flags",
        [(f.name, f.type, f) for f in dataclasses.fields(config_cls) if f.name not in common],
    )


def add_presets(presets: Mapping[str, Preset], model_name: str | None = None) -> None:
    """Put ``presets`` (those of ``model_name`` if given) into :data:`PRESETS` and register
    each as a fairseq architecture of its model (which must be registered). A name fairseq or
    the table already knows is refused (fairseq would keep the first silently or fail half
    way); nothing is registered then."""
    from fairseq.models import ARCH_MODEL_REGISTRY, MODEL_REGISTRY

    chosen = {n: p for n, p in presets.items() if model_name is None or p.model == model_name}
    for name, preset in chosen.items():
        if name in PRESETS or name in ARCH_MODEL_REGISTRY:
            raise ValueError(f"architecture {name!r} is already registered")
        if preset.model not in MODEL_REGISTRY:
            raise ValueError(f"preset {name!r}: fairseq model {preset.model!r} is not registered")
    from lightcompress.checkpoint import register_plugin_model

    for name, preset in chosen.items():
        PRESETS[name] = preset
        register_plugin_model(preset.model)

        def arch(args, preset=preset):
            preset.apply(args)

        arch.__name__ = name
        arch.__doc__ = preset.doc
        register_model_architecture(preset.model, name)(arch)


def register_presets(model_name: str, presets: Mapping[str, Preset] | None = None) -> None:
    """Register the presets of ``model_name``: those of ``presets`` (added to the table), or
    the entries the table already holds that fairseq does not know yet."""
    if presets is not None:
        add_presets(presets, model_name)
        return
    from fairseq.models import ARCH_MODEL_REGISTRY

    pending = {
        n: p for n, p in PRESETS.items() if p.model == model_name and n not in ARCH_MODEL_REGISTRY
    }
    for name in pending:
        del PRESETS[name]
    add_presets(pending)


def family_of(arch: str) -> str | None:
    """The fairseq model (family) of the plugin whose architecture names ``arch`` has the form
    of (``<model>`` or ``<model>_...``, the longest such model name in :data:`PRESETS`), even
    when ``arch`` itself is not registered (a checkpoint of another version of the plugin);
    None for a name of no family of the plugin."""
    from lightcompress.checkpoint import plugin_model_of

    return plugin_model_of(arch)
