"""The kind registry: every layer kind of the plugin, registered once (plain PyTorch).

A *kind* (``lowrank``, ``tt``, ``htt``, ``hmf``, ``cp``, ``dense``, ``identity``) is one way to
represent a weight. It has a *variant* per *target*, the slot it fills:

========== ===================================================================================
target     what the slot is
========== ===================================================================================
linear     an ``nn.Linear(in, out)`` (attention projections, FFN maps, output projection)
embedding  an ``nn.Embedding(V, d)`` token table (``in`` = V, ``out`` = d)
qkv        the fused ``d -> 3d`` Q/K/V map of a self-attention (Hypoformer Eq. 6-8), a
           :class:`~lightcompress.modules.fused_qkv.FusedQKV` (its variants are registered
           there, below the class; importing :mod:`lightcompress.modules` registers them)
========== ===================================================================================

Each :class:`Variant` knows its parameter schema (required / exactly-one-of / optional names,
each value checked by :data:`PARAM_CHECKS`), how to ``build`` a layer from scratch, how to
fit one to a trained dense module (``from_dense``: SVD, TT-SVD, CP fit), its exact
``num_params``, and (``int8``) how to turn it into ``nn.Linear`` pieces that dynamic int8
quantization packs. The compression spec (:mod:`~lightcompress.modules.spec`), the model
build hooks, the converters and the quantizer all look kinds up here: there is no other
kind -> class table in the package. Adding a method's layer means one :func:`register`
call.

One vocabulary: the kind names are the same for every target (``encoder.embed_tokens =
lowrank(rank=135)``, ``--hypo-embed htt``, a report's ``kind`` column). The names of the first
spec grammar, ``lowrank_embedding`` and ``htt_embedding``, are kept as aliases bound to the
embedding target.

Meanings shared by all kinds: ``ranks=0`` (TT kinds) means the maximal TT ranks, at which
TT-SVD is exact; TT shapes default to ``in_shape = factorize_dim(in, num_cores)`` and
``out_shape = factorize_dim(out_factorized, len(in_shape))``, where ``out_factorized`` is the
number of output columns the TT part covers (all of them for ``tt``, ``out - round(alpha out)``
for ``htt``); embedding tables use a padded vocabulary (``pad_factorize(V, num_cores)``).
"""

from __future__ import annotations

import inspect
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field

from torch import nn

from lightcompress.errors import SpecError
from lightcompress.modules.cp import CPLinear
from lightcompress.modules.embeddings import HTTEmbedding, LowRankEmbedding
from lightcompress.modules.hybrid import HybridLinear
from lightcompress.modules.kind_shapes import (
    Shape,
    _cp_linear,
    _dense_embedding,
    _dense_linear,
    _htt_embedding,
    _htt_embedding_fit,
    _hybrid_lowrank_fit,
    _hybrid_lowrank_linear,
    _hybrid_tt_fit,
    _hybrid_tt_linear,
    _identity,
    _lowrank_embedding,
    _lowrank_linear,
    _tt_fit,
    _tt_linear,
    tt_shapes,
)
from lightcompress.modules.lowrank import LowRankLinear
from lightcompress.modules.tensor_train import TTLinear

__all__ = [
    "ALIASES",
    "FACTORS",
    "KINDS",
    "PARAM_CHECKS",
    "QUANTIZE",
    "RANK_OPTIONS",
    "TARGETS",
    "TT_OPTIONS",
    "Kind",
    "Shape",
    "Variant",
    "canonical_kind",
    "get_variant",
    "register",
    "target_of",
    "tt_shapes",
    "two_factors",
    "unregister",
]

TARGETS = ("linear", "embedding", "qkv")


def _is_int(v) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)


def _is_num(v) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool)


def _is_int_list(v) -> bool:
    return isinstance(v, (list, tuple)) and len(v) > 0 and all(_is_int(x) for x in v)


_SHAPE_CHECK = (
    lambda v: _is_int_list(v) and len(v) >= 2 and min(v) >= 1,
    "a list of >= 2 positive integers like 8x8x8",
)
PARAM_CHECKS: dict[str, tuple[Callable, str]] = {
    "rank": (lambda v: _is_int(v) and v >= 1, "an integer >= 1"),
    "ratio": (lambda v: _is_num(v) and v > 0, "a number > 0"),
    "energy": (lambda v: _is_num(v) and 0 < v <= 1, "a number in (0, 1]"),
    "alpha": (lambda v: _is_num(v) and 0 <= v <= 1, "a number in [0, 1]"),
    "heads": (lambda v: _is_int(v) and v >= 1, "an integer >= 1"),
    "num_cores": (lambda v: _is_int(v) and v >= 2, "an integer >= 2"),
    "ranks": (
        lambda v: (_is_int(v) and v >= 0) or (_is_int_list(v) and min(v) >= 1),
        "an integer >= 1 (0 = maximal TT ranks) or a list like 16x16",
    ),
    "in_shape": _SHAPE_CHECK,
    "out_shape": _SHAPE_CHECK,
    "vocab_shape": _SHAPE_CHECK,
    "dim_shape": _SHAPE_CHECK,
}
"""Parameter name -> (check, description) for every kind parameter."""


@dataclass(frozen=True)
class Variant:
    """One kind for one target.

    Attributes
    ----------
    kind, target : str
    cls : type
        The module class built (``None`` for ``dense`` of the ``any`` target).
    make : callable
        ``(Shape, params) -> constructor kwargs`` (ranks resolved, shapes chosen; raises
        ``ValueError`` with the reason for this shape).
    fit : callable, optional
        ``(trained dense module, params) -> module`` (SVD, TT-SVD, CP fit).
    required, one_of, optional : tuple of str
        The parameter schema (``one_of``: exactly one of them).
    int8 : callable, optional
        ``module -> module of nn.Linear pieces`` computing the same function, for dynamic int8
        quantization; ``None`` when the class needs no conversion or cannot be quantized.
    factors : callable, optional
        ``module -> (first, second)`` with the weight ``W = second @ first`` (``first``
        ``(r, in)``, ``second`` ``(out, r)``; for a table ``(V, d)``: ``(r, d)`` and
        ``(V, r)``), for code that computes ``x W^T`` in two products: the logits of a tied
        factorized table, the regrouped maps of the ONNX export. ``None``: no such form.
    """

    kind: str
    target: str
    cls: type | None
    make: Callable[[Shape, dict], dict]
    fit: Callable[[nn.Module, dict], nn.Module] | None = None
    required: tuple[str, ...] = ()
    one_of: tuple[str, ...] = ()
    optional: tuple[str, ...] = ()
    int8: Callable[[nn.Module], nn.Module] | None = None
    factors: Callable[[nn.Module], tuple] | None = None

    @property
    def allowed(self) -> set[str]:
        return set(self.required) | set(self.one_of) | set(self.optional)

    def check(self, params: Mapping, where: str = "") -> None:
        """Validate parameter names and values against the schema; raises SpecError."""
        where = f" {where}" if where else ""
        unknown = sorted(set(params) - self.allowed)
        if unknown:
            raise SpecError(
                f"unknown parameter(s) {unknown} for kind {self.kind!r} on a {self.target} "
                f"slot{where}; allowed: {sorted(self.allowed) or 'none'}"
            )
        missing = [p for p in self.required if p not in params]
        if missing:
            raise SpecError(f"missing parameter(s) {missing} for kind {self.kind!r}{where}")
        if self.one_of:
            given = [p for p in self.one_of if p in params]
            if len(given) != 1:
                raise SpecError(
                    f"kind {self.kind!r} needs exactly one of {list(self.one_of)}{where}, "
                    f"got {given or 'none'}"
                )
        for name, value in params.items():
            check, desc = PARAM_CHECKS[name]
            if not check(value):
                raise SpecError(f"parameter {name}={value!r} must be {desc}{where}")

    def kwargs(self, shape: Shape, params: Mapping) -> dict:
        """Constructor keyword arguments for ``shape`` (raises ValueError if it does not fit)."""
        p = dict(params)
        if "energy" in p:
            raise ValueError(
                f"energy={p['energy']} needs trained weights: use it with mode='convert' only"
            )
        return self.make(shape, p)

    def build(self, shape: Shape, params: Mapping) -> nn.Module:
        """A from-scratch layer for ``shape``."""
        return self.cls(**self.kwargs(shape, params))

    def num_params(self, shape: Shape, params: Mapping) -> int:
        """Exact parameter count of :meth:`build`'s layer (without building it)."""
        kw = self.kwargs(shape, params)
        counter = getattr(self.cls, "num_params", None)
        if counter is None:  # classes without a closed form (FusedQKV, Identity)
            return _count_built(self.cls(**kw))
        names = inspect.signature(counter).parameters
        return int(counter(**{k: v for k, v in kw.items() if k in names}))

    def from_dense(self, module: nn.Module, params: Mapping) -> nn.Module:
        """Fit this kind to a trained dense module (``energy`` allowed)."""
        if self.fit is None:
            raise ValueError(f"kind {self.kind!r} has no weight transfer for a {self.target}")
        new = self.fit(module, dict(params))
        w = _dense_weight(module)
        return new.to(device=w.device, dtype=w.dtype) if w is not None else new


def _count_built(module: nn.Module) -> int:
    return sum(p.numel() for p in module.parameters())


def _dense_weight(module):
    w = getattr(module, "weight", None)
    return w if w is not None and hasattr(w, "device") else None


@dataclass
class Kind:
    """A kind name, its help line and its variants per target."""

    name: str
    help: str
    variants: dict[str, Variant] = field(default_factory=dict)


KINDS: dict[str, Kind] = {}
"""Kind name -> :class:`Kind`; filled by :func:`register`."""

ALIASES: dict[str, tuple[str, str]] = {
    "lowrank_embedding": ("lowrank", "embedding"),
    "htt_embedding": ("htt", "embedding"),
}
"""Names of the first spec grammar: alias -> (kind, the only target it may fill)."""

QUANTIZE: dict[type, Callable[[nn.Module], nn.Module]] = {}
"""Layer class -> int8 converter, collected from the variants' ``int8``."""

FACTORS: dict[type, Callable[[nn.Module], tuple]] = {}
"""Layer class -> its two factors ``(first, second)``, collected from the variants' ``factors``."""


def register(kind: str, target: str, cls, make, fit=None, *, help: str = "", **schema) -> Variant:
    """Register the ``target`` variant of ``kind`` (see :class:`Variant` for the fields)."""
    if target not in TARGETS and target != "any":
        raise ValueError(f"unknown target {target!r}; choose from {TARGETS}")
    entry = KINDS.setdefault(kind, Kind(kind, help))
    if help and not entry.help:
        entry.help = help
    if target in entry.variants:
        raise ValueError(f"kind {kind!r} already has a {target} variant")
    variant = Variant(kind, target, cls, make, fit, **schema)
    entry.variants[target] = variant
    if variant.int8 is not None and cls is not None:
        QUANTIZE[cls] = variant.int8
    if variant.factors is not None and cls is not None:
        FACTORS[cls] = variant.factors
    return variant


def unregister(kind: str) -> None:
    """Remove ``kind`` and every variant of it (with its int8 and factor handlers): for tests
    and notebooks that register a kind for a while. Built-in kinds are kept."""
    if kind in _BUILTIN:
        raise ValueError(f"kind {kind!r} is built in")
    entry = KINDS.pop(kind, None)
    if entry is None:
        raise ValueError(f"unknown kind {kind!r}")
    others = {v.cls for k in KINDS.values() for v in k.variants.values()}
    for variant in entry.variants.values():
        if variant.cls not in others:
            QUANTIZE.pop(variant.cls, None)
            FACTORS.pop(variant.cls, None)


def two_factors(module: nn.Module) -> tuple | None:
    """``(first, second)`` with ``module``'s weight ``= second @ first`` if its kind declares
    them (:attr:`Variant.factors`; the exact class), else None."""
    fn = FACTORS.get(type(module))
    return None if fn is None else fn(module)


def canonical_kind(name: str) -> str:
    """The registry name of ``name`` (aliases resolved)."""
    return ALIASES[name][0] if name in ALIASES else name


def target_of(module: nn.Module) -> str | None:
    """The target a module fills: ``linear``, ``embedding`` or None (anything else)."""
    if isinstance(module, nn.Linear):
        return "linear"
    if isinstance(module, nn.Embedding):
        return "embedding"
    return None


_TARGET_WORDS = {"linear": "an nn.Linear", "embedding": "an nn.Embedding", "qkv": "a fused Q/K/V"}


def get_variant(kind: str, target: str, where: str = "") -> Variant:
    """The variant of ``kind`` (or alias) for ``target``; SpecError if there is none."""
    where = f" {where}" if where else ""
    if kind in ALIASES:
        name, only = ALIASES[kind]
        if target != only:
            raise SpecError(
                f"kind {kind!r} replaces {_TARGET_WORDS[only]}, not {_TARGET_WORDS[target]}"
                f"{where} (write {name!r}: kind names are the same for every target)"
            )
        kind = name
    if kind not in KINDS:
        raise SpecError(
            f"unknown kind {kind!r}{where}; known kinds: {sorted(KINDS)} "
            f"(aliases: {sorted(ALIASES)})"
        )
    variants = KINDS[kind].variants
    if target in variants:
        return variants[target]
    if "any" in variants:
        return variants["any"]
    raise SpecError(
        f"kind {kind!r} has no form for {_TARGET_WORDS[target]}{where}; it replaces "
        + " or ".join(_TARGET_WORDS[t] for t in variants)
    )


def schema_names(kind: str) -> set[str]:
    """Every parameter name some variant of ``kind`` accepts (for parse-time checks)."""
    if kind in ALIASES:
        name, target = ALIASES[kind]
        return KINDS[name].variants[target].allowed
    return set().union(*(v.allowed for v in KINDS[kind].variants.values()))


#: the parameters that set a low-rank map's rank; those that shape a TT matrix
RANK_OPTIONS = ("rank", "ratio", "energy")
TT_OPTIONS = ("in_shape", "out_shape", "num_cores")
_EMB_TT_OPT = ("vocab_shape", "dim_shape", "num_cores")


# ------------------------------------------------------------------------------------------
# dense and identity
# ------------------------------------------------------------------------------------------


register(
    "dense",
    "linear",
    nn.Linear,
    _dense_linear,
    lambda m, p: m,
    help="keep the dense module (excludes it from later rules)",
)
register("dense", "embedding", nn.Embedding, _dense_embedding, lambda m, p: m)
register("dense", "any", None, lambda s, p: {}, lambda m, p: m)


register(
    "identity",
    "linear",
    nn.Identity,
    _identity,
    lambda m, p: nn.Identity(),
    help="drop a square map (y = x): Hypoformer's attention without output projection",
)


# ------------------------------------------------------------------------------------------
# low-rank (LightFormer, Hypoformer's LMF FFN and MF baselines)
# ------------------------------------------------------------------------------------------


register(
    "lowrank",
    "linear",
    LowRankLinear,
    _lowrank_linear,
    lambda m, p: LowRankLinear.from_linear(m, **p),
    one_of=RANK_OPTIONS,
    int8=lambda m: m.as_linears(),
    factors=lambda m: (m.v, m.u),
    help="W = U V (SVD transfer)",
)
register(
    "lowrank",
    "embedding",
    LowRankEmbedding,
    _lowrank_embedding,
    lambda m, p: LowRankEmbedding.from_embedding(m, **p),
    one_of=RANK_OPTIONS,
    factors=lambda m: (m.v, m.u),
)


# ------------------------------------------------------------------------------------------
# tensor train and the hybrids (Hypoformer)
# ------------------------------------------------------------------------------------------


register(
    "tt",
    "linear",
    TTLinear,
    _tt_linear,
    _tt_fit,
    required=("ranks",),
    optional=TT_OPTIONS,
    help="tensor-train matrix (TT-SVD transfer)",
)
register(
    "tt",
    "embedding",
    HTTEmbedding,
    _htt_embedding,
    _htt_embedding_fit,
    required=("ranks",),
    optional=_EMB_TT_OPT,
)
register(
    "htt",
    "linear",
    HybridLinear,
    _hybrid_tt_linear,
    _hybrid_tt_fit,
    required=("alpha", "ranks"),
    optional=TT_OPTIONS,
    help="hybrid: round(alpha out) dense columns + a TT part",
)
register(
    "htt",
    "embedding",
    HTTEmbedding,
    _htt_embedding,
    _htt_embedding_fit,
    required=("alpha", "ranks"),
    optional=_EMB_TT_OPT,
)
register(
    "hmf",
    "linear",
    HybridLinear,
    _hybrid_lowrank_linear,
    _hybrid_lowrank_fit,
    required=("alpha",),
    one_of=RANK_OPTIONS,
    help="hybrid: round(alpha out) dense columns + a low-rank part",
)


# ------------------------------------------------------------------------------------------
# CP (Smartformer's CPAC projections)
# ------------------------------------------------------------------------------------------


register(
    "cp",
    "linear",
    CPLinear,
    _cp_linear,
    lambda m, p: CPLinear.from_linear(m, p["rank"], p["heads"]),
    required=("rank", "heads"),
    int8=lambda m: m.as_linears(),
    help="CP over the (heads, d_k) view of the input (CP-ALS transfer)",
)


_BUILTIN = frozenset(KINDS)
