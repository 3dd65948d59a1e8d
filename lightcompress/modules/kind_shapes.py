"""The built-in kinds' shape rules (plain PyTorch): :class:`Shape`, the dense slot a layer fills,
and per kind the constructor arguments for a slot (a variant's ``make``) and the fit to a trained
dense module (its ``fit``). :mod:`~lightcompress.modules.registry` registers them."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from lightcompress.modules.embeddings import HTTEmbedding
from lightcompress.modules.hybrid import HybridLinear, dense_columns
from lightcompress.modules.lowrank import resolve_rank
from lightcompress.modules.tensor_train import (
    TTLinear,
    check_tt_shapes,
    factorize_dim,
    max_tt_ranks,
    pad_factorize,
)

__all__ = ["Shape", "tt_shapes"]


@dataclass(frozen=True)
class Shape:
    """The dense slot a layer fills.

    ``in_features`` / ``out_features`` are ``(in, out)`` of a Linear, ``(V, d)`` of an
    embedding and ``(d, 3d)`` of a fused Q/K/V map.
    """

    in_features: int
    out_features: int
    bias: bool = True
    padding_idx: int | None = None


# ------------------------------------------------------------------------------------------
# shape rules shared by every TT kind
# ------------------------------------------------------------------------------------------


def tt_shapes(in_features: int, out_factorized: int, p: Mapping) -> tuple[list[int], list[int]]:
    """TT modes of a map: ``in_shape`` (default ``factorize_dim(in, num_cores)``) and
    ``out_shape`` of the factorized columns (default ``factorize_dim(out, len(in_shape))``)."""
    nc = p.get("num_cores", 3)
    in_shape = list(p.get("in_shape") or factorize_dim(in_features, nc))
    out_shape = list(p.get("out_shape") or factorize_dim(out_factorized, len(in_shape)))
    return in_shape, out_shape


def _tt_ranks(p: Mapping, in_shape, out_shape):
    """``ranks=0`` means the maximal (exact) TT ranks."""
    ranks = p["ranks"]
    return max_tt_ranks(in_shape, out_shape) if ranks == 0 else ranks


def _rank_of(m: int, n: int, p: Mapping) -> int:
    return resolve_rank(m, n, rank=p.get("rank"), ratio=p.get("ratio"))


# ------------------------------------------------------------------------------------------
# dense and identity
# ------------------------------------------------------------------------------------------


def _dense_linear(s: Shape, p: dict) -> dict:
    return {"in_features": s.in_features, "out_features": s.out_features, "bias": s.bias}


def _dense_embedding(s: Shape, p: dict) -> dict:
    return {
        "num_embeddings": s.in_features,
        "embedding_dim": s.out_features,
        "padding_idx": s.padding_idx,
    }


def _identity(s: Shape, p: dict) -> dict:
    if s.in_features != s.out_features:
        raise ValueError(
            f"identity replaces only a square map, not {s.in_features}->{s.out_features}"
        )
    return {}


# ------------------------------------------------------------------------------------------
# low-rank (LightFormer, Hypoformer's LMF FFN and MF baselines)
# ------------------------------------------------------------------------------------------


def _lowrank_linear(s: Shape, p: dict) -> dict:
    r = _rank_of(s.out_features, s.in_features, p)
    return {"in_features": s.in_features, "out_features": s.out_features, "rank": r, "bias": s.bias}


def _lowrank_embedding(s: Shape, p: dict) -> dict:
    r = _rank_of(s.in_features, s.out_features, p)
    return {
        "num_embeddings": s.in_features,
        "embedding_dim": s.out_features,
        "rank": r,
        "padding_idx": s.padding_idx,
    }


# ------------------------------------------------------------------------------------------
# tensor train and the hybrids (Hypoformer)
# ------------------------------------------------------------------------------------------


def _tt_linear(s: Shape, p: dict) -> dict:
    in_shape, out_shape = tt_shapes(s.in_features, s.out_features, p)
    ranks = _tt_ranks(p, in_shape, out_shape)
    check_tt_shapes(in_shape, out_shape, ranks, s.in_features, s.out_features)
    return {"in_shape": in_shape, "out_shape": out_shape, "ranks": ranks, "bias": s.bias}


def _tt_fit(m, p):
    in_shape, out_shape = tt_shapes(m.in_features, m.out_features, p)
    ranks = None if p["ranks"] == 0 else p["ranks"]
    return TTLinear.from_linear(m, in_shape, out_shape, ranks, len(in_shape))


def _hybrid_tt_linear(s: Shape, p: dict) -> dict:
    nf = s.out_features - dense_columns(p["alpha"], s.out_features)
    kw = {
        "in_features": s.in_features,
        "out_features": s.out_features,
        "alpha": p["alpha"],
        "kind": "tt",
        "num_cores": p.get("num_cores", 3),
        "bias": s.bias,
    }
    if nf:
        in_shape, out_shape = tt_shapes(s.in_features, nf, p)
        kw.update(in_shape=in_shape, out_shape=out_shape, ranks=_tt_ranks(p, in_shape, out_shape))
    else:
        kw["ranks"] = 1  # no TT part: the ranks are unused
    return kw


def _hybrid_tt_fit(m, p):
    nf = m.out_features - dense_columns(p["alpha"], m.out_features)
    in_shape, out_shape = tt_shapes(m.in_features, max(nf, 1), p) if nf else (None, None)
    ranks = None if p["ranks"] == 0 else p["ranks"]
    return HybridLinear.from_linear(
        m,
        p["alpha"],
        "tt",
        ranks=ranks,
        in_shape=in_shape,
        out_shape=out_shape,
        num_cores=p.get("num_cores", 3),
    )


def _hybrid_lowrank_linear(s: Shape, p: dict) -> dict:
    nf = s.out_features - dense_columns(p["alpha"], s.out_features)
    r = _rank_of(nf, s.in_features, p) if nf else None
    return {
        "in_features": s.in_features,
        "out_features": s.out_features,
        "alpha": p["alpha"],
        "kind": "lowrank",
        "rank": r,
        "bias": s.bias,
    }


def _hybrid_lowrank_fit(m, p):
    p = dict(p)
    return HybridLinear.from_linear(m, p.pop("alpha"), "lowrank", **p)


def _htt_embedding(s: Shape, p: dict) -> dict:
    v, d, alpha = s.in_features, s.out_features, p.get("alpha", 0.0)
    nc = p.get("num_cores", 3)
    nt = d - dense_columns(alpha, d)
    kw = {
        "num_embeddings": v,
        "embedding_dim": d,
        "alpha": alpha,
        "ranks": 1,
        "padding_idx": s.padding_idx,
        "vocab_shape": p.get("vocab_shape"),
        "dim_shape": p.get("dim_shape"),
        "num_cores": nc,
    }
    if nt:
        vshape = list(p.get("vocab_shape") or pad_factorize(v, nc))
        dshape = list(p.get("dim_shape") or factorize_dim(nt, len(vshape)))
        kw.update(vocab_shape=vshape, dim_shape=dshape, ranks=_tt_ranks(p, vshape, dshape))
    return kw


def _htt_embedding_fit(m, p):
    p = dict(p)
    alpha = p.pop("alpha", 0.0)
    if p.get("ranks") == 0:
        p["ranks"] = None  # maximal
    return HTTEmbedding.from_embedding(m, alpha, **p)


# ------------------------------------------------------------------------------------------
# CP (Smartformer's CPAC projections)
# ------------------------------------------------------------------------------------------


def _cp_linear(s: Shape, p: dict) -> dict:
    return {
        "in_features": s.in_features,
        "out_features": s.out_features,
        "rank": p["rank"],
        "heads": p["heads"],
        "bias": s.bias,
    }
