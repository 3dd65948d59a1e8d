"""What a compression spec did or would do (:mod:`lightcompress.modules.spec`): one
:class:`ReplacementRecord` per layer, the :class:`CompressionReport` of a model, and
:func:`count_params` (a kind's exact parameter count for a shape).
"""

from __future__ import annotations

from dataclasses import dataclass

from torch import nn

from lightcompress.modules.registry import (
    ALIASES,
    Shape,
    canonical_kind,
)
from lightcompress.modules.spec_grammar import Rule

__all__ = [
    "CompressionReport",
    "ReplacementRecord",
    "count_params",
    "describe_module",
    "module_numel",
    "module_shape",
]


@dataclass
class ReplacementRecord:
    """What the spec did (or would do) to one module.

    ``shape`` is ``(out, in)`` for a Linear and ``(V, d)`` for an Embedding; ``rank`` is an
    int (low-rank, CP), a list (TT ranks) or None; ``params_after`` is None when it cannot be
    known before converting (``energy``).
    """

    name: str
    kind: str
    shape: tuple[int, int]
    rank: int | list[int] | None
    kept_energy: float | None
    params_before: int
    params_after: int | None
    rule: str


class CompressionReport(list):
    """A list of :class:`ReplacementRecord` with totals and a printable table."""

    @property
    def params_before(self) -> int:
        return sum(r.params_before for r in self)

    @property
    def params_after(self) -> int | None:
        if any(r.params_after is None for r in self):
            return None
        return sum(r.params_after for r in self)

    def format(self) -> str:
        """A plain-text table, one line per module."""
        lines = [
            (
                f"{'module':40s} {'kind':18s} {'shape':>12s} {'rank':>10s} {'energy':>7s} "
                f"{'before':>10s} {'after':>10s}"
            )
        ]
        for r in self:
            rank = "x".join(map(str, r.rank)) if isinstance(r.rank, list) else str(r.rank or "-")
            energy = f"{r.kept_energy:.4f}" if r.kept_energy is not None else "-"
            lines.append(
                f"{r.name:40s} {r.kind:18s} {'x'.join(map(str, r.shape)):>12s} {rank:>10s} "
                f"{energy:>7s} {r.params_before:>10d} {r.params_after!s:>10s}"
            )
        return "\n".join(lines)


def count_params(
    kind: str,
    in_features: int,
    out_features: int,
    bias: bool = True,
    target: str | None = None,
    **params,
) -> int:
    """Exact parameter count of a layer of ``kind`` replacing a dense one.

    Parameters
    ----------
    kind : str
        A kind of the registry (or an alias, which fixes the target).
    in_features, out_features : int
        The dense layer's shape; for an embedding ``num_embeddings, embedding_dim``; for a
        fused Q/K/V map ``d, 3d``.
    bias : bool
        Whether the (linear) layer has a bias; ignored for embeddings.
    target : {"linear", "embedding", "qkv"}, optional
        The slot (default: ``linear``, or the alias's target).
    **params
        The kind's parameters as in a spec rule (``energy`` is not countable statically).

    Returns
    -------
    int

    Raises
    ------
    ValueError
        Invalid parameters for this shape (SpecError for an unknown kind or parameter).
    """
    rule = Rule(("*",), kind, dict(params))  # kind / parameter-name / range validation
    if target is None:
        target = ALIASES[kind][1] if kind in ALIASES else "linear"
    if canonical_kind(kind) == "dense" and target != "qkv":  # pass bias=False for a table
        return in_features * out_features + (out_features if bias and target == "linear" else 0)
    variant = rule.variant(target)
    return variant.num_params(Shape(in_features, out_features, bias), params)


def module_shape(module: nn.Module) -> tuple[int, int]:
    """``(out, in)`` of a Linear, ``(V, d)`` of an Embedding, else its weight's first two."""
    if isinstance(module, nn.Embedding):
        return (module.num_embeddings, module.embedding_dim)
    if isinstance(module, nn.Linear):
        return (module.out_features, module.in_features)
    w = getattr(module, "weight", None)
    return tuple(w.shape[:2]) if w is not None and w.dim() >= 2 else (0, 0)


def module_numel(module: nn.Module) -> int:
    """The number of parameters of ``module``."""
    return sum(p.numel() for p in module.parameters())


def describe_module(name: str, module: nn.Module) -> str:
    """``module 'NAME' (TYPE SHAPE)``, as errors name a module."""
    if isinstance(module, nn.Linear):
        return f"module {name!r} (nn.Linear {module.in_features}->{module.out_features})"
    if isinstance(module, nn.Embedding):
        return f"module {name!r} (nn.Embedding {module.num_embeddings}x{module.embedding_dim})"
    return f"module {name!r} ({type(module).__name__})"
