"""Fused Q/K/V projection of Hypoformer's HTT self-attention (Eq. 6-8), plain PyTorch.

The three ``d x d`` maps are one ``3d x d`` matrix ``W = [W_q; W_k; W_v]`` factorized as a
whole by a :class:`~lightcompress.modules.hybrid.HybridLinear` (or kept dense / factorized
entirely). Its output columns are ``[dense part (3 n_d) | factorized part (3 (d - n_d))]``
with ``n_d = round(beta d)`` dense columns per projection; Eq. 8 splits each part in three
and concatenates the matching slices::

    Q1, K1, V1 = split(x W_dense, 3);   Q2, K2, V2 = split(x W_tt, 3)
    q = [Q1 | Q2],  k = [K1 | K2],  v = [V1 | V2]

so that every projection has its first ``n_d`` features from the dense part and the rest from
the TT part. :func:`fused_rows` gives the row permutation that turns a stacked dense
``[W_q; W_k; W_v]`` into the fused layout (used for weight transfer).
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
from torch import nn

from lightcompress.modules.hybrid import dense_columns
from lightcompress.modules.registry import RANK_OPTIONS, TT_OPTIONS, Shape, get_variant, register

__all__ = ["FUSED_KINDS", "FusedQKV", "fused_rows", "split_qkv"]

FUSED_KINDS = ("dense", "htt", "hmf", "tt", "lowrank")
"""``dense``: one ``nn.Linear(d, 3d)``; ``htt`` / ``hmf``: dense share ``beta`` + TT / low-rank;
``tt`` / ``lowrank``: the whole ``3d x d`` matrix factorized (``beta`` ignored)."""


def split_qkv(y: torch.Tensor, num_dense: int, dim: int) -> tuple[torch.Tensor, ...]:
    """Eq. 8: ``[Q1 K1 V1 | Q2 K2 V2]`` -> ``q = [Q1|Q2], k = [K1|K2], v = [V1|V2]``.

    Parameters
    ----------
    y : torch.Tensor
        ``(..., 3 d)``: ``3 num_dense`` dense columns, then ``3 (d - num_dense)`` others.
    num_dense : int
        Dense columns per projection, ``n_d``.
    dim : int
        ``d``.

    Returns
    -------
    q, k, v : torch.Tensor
        Each ``(..., d)``.
    """
    nd, nt = num_dense, dim - num_dense
    dense, fact = y[..., : 3 * nd], y[..., 3 * nd :]
    out = []
    for i in range(3):
        parts = [dense[..., i * nd : (i + 1) * nd], fact[..., i * nt : (i + 1) * nt]]
        parts = [p for p in parts if p.shape[-1]]
        out.append(parts[0] if len(parts) == 1 else torch.cat(parts, -1))
    return tuple(out)


def fused_rows(num_dense: int, dim: int) -> torch.Tensor:
    """Row order of the fused weight in terms of a stacked ``[W_q; W_k; W_v]`` (``3d`` rows).

    ``W_fused = W_stacked[fused_rows(n_d, d)]``: the dense rows of q, k, v first, then the
    remaining rows of q, k, v.
    """
    nd = num_dense
    dense = [i * dim + j for i in range(3) for j in range(nd)]
    rest = [i * dim + j for i in range(3) for j in range(nd, dim)]
    return torch.tensor(dense + rest, dtype=torch.long)


class FusedQKV(nn.Module):
    """``x -> (q, k, v)`` through one (hybrid-)factorized ``3d x d`` map.

    The map is a layer of the kind registry (:mod:`lightcompress.modules.registry`) built for
    the ``d -> 3d`` shape; for the hybrid kinds its dense share is ``3 n_d`` of the ``3d``
    columns with ``n_d = round(beta d)`` per projection.

    Parameters
    ----------
    dim : int
        Model dimension ``d`` (input and each of q, k, v).
    kind : str
        One of :data:`FUSED_KINDS`.
    beta : float
        Dense share per projection (``htt`` / ``hmf``); ``n_d = round(beta d)``.
    ranks : int or sequence of int, optional
        TT ranks (``htt`` / ``tt``); ``None`` or ``0`` means the maximal (exact) ranks.
    rank : int, optional
        Low-rank rank (``hmf`` / ``lowrank``).
    num_cores : int
        TT cores (``htt`` / ``tt``).
    in_shape, out_shape : sequence of int, optional
        TT modes of ``d`` and of the TT columns (default: balanced factorizations).
    bias : bool
        Learn a bias (per output column, carried by the part producing it).
    params : dict, optional
        The kind's parameters as in a spec rule (``alpha`` is ``beta``); replaces the keyword
        arguments above when given.

    Attributes
    ----------
    proj : nn.Module
        ``nn.Linear``, :class:`HybridLinear`, :class:`TTLinear` or :class:`LowRankLinear`
        producing the ``3d`` fused columns.
    num_dense : int
        ``n_d`` (``d`` for ``dense``, 0 for ``tt`` / ``lowrank``).
    """

    def __init__(
        self,
        dim: int,
        kind: str = "htt",
        beta: float = 0.25,
        ranks: int | Sequence[int] | None = None,
        rank: int | None = None,
        num_cores: int = 3,
        in_shape: Sequence[int] | None = None,
        out_shape: Sequence[int] | None = None,
        bias: bool = True,
        *,
        params: dict | None = None,
    ):
        super().__init__()
        if kind not in FUSED_KINDS:
            raise ValueError(f"FusedQKV kind must be one of {FUSED_KINDS}, got {kind!r}")
        self.dim, self.kind = int(dim), kind
        if params is None:
            params = _legacy_params(kind, beta, ranks, rank, num_cores, in_shape, out_shape)
        self.params = dict(params)
        self.num_dense, inner = self.inner_params(self.dim, kind, self.params)
        self.proj = get_variant(kind, "linear").build(Shape(dim, 3 * dim, bias), inner)
        if kind in ("htt", "hmf") and self.proj.num_dense != 3 * self.num_dense:
            raise ValueError(  # pragma: no cover - rounding guard
                f"fused dense columns {self.proj.num_dense} != 3 x {self.num_dense}"
            )

    @staticmethod
    def inner_params(dim: int, kind: str, params: dict) -> tuple[int, dict]:
        """``(n_d, parameters of the d -> 3d map)``: for the hybrids the map's ``alpha`` is
        exactly ``3 n_d / 3d``."""
        if kind == "dense":
            return dim, {}
        if kind in ("tt", "lowrank"):
            return 0, dict(params)
        num_dense = dense_columns(params["alpha"], dim)
        return num_dense, {**params, "alpha": num_dense / dim}

    @classmethod
    def from_linears(
        cls,
        q: nn.Linear,
        k: nn.Linear,
        v: nn.Linear,
        kind: str = "htt",
        beta: float = 0.25,
        ranks: int | Sequence[int] | None = None,
        rank: int | None = None,
        num_cores: int = 3,
        in_shape: Sequence[int] | None = None,
        out_shape: Sequence[int] | None = None,
        *,
        params: dict | None = None,
    ) -> FusedQKV:
        """Fuse trained ``q``, ``k``, ``v`` projections (rows permuted per Eq. 8), then slice
        the dense part and TT-SVD / SVD the rest. ``ranks=None`` or 0: exact TT ranks."""
        d = q.in_features
        for name, lin in (("q", q), ("k", k), ("v", v)):
            if lin.weight.shape != (d, d):
                raise ValueError(f"{name}_proj is {tuple(lin.weight.shape)}, expected {(d, d)}")
        has_bias = q.bias is not None
        if params is None:
            params = _legacy_params(kind, beta, ranks, rank, num_cores, in_shape, out_shape)
        layer = cls(d, kind, bias=has_bias, params=params)
        rows = fused_rows(layer.num_dense, d).to(q.weight.device)
        w = torch.cat([q.weight, k.weight, v.weight], 0)[rows]
        b = torch.cat([q.bias, k.bias, v.bias], 0)[rows] if has_bias else None
        stacked = nn.Linear(d, 3 * d, bias=has_bias).to(device=w.device, dtype=w.dtype)
        with torch.no_grad():
            stacked.weight.copy_(w)
            if has_bias:
                stacked.bias.copy_(b)
        _, inner = cls.inner_params(d, kind, layer.params)
        layer.proj = get_variant(kind, "linear").from_dense(stacked, inner)
        return layer

    @property
    def kept_energy(self) -> float | None:
        return getattr(self.proj, "kept_energy", None)

    @property
    def rank(self):
        return getattr(self.proj, "rank", None)

    def project(self, x: torch.Tensor, index: int) -> torch.Tensor:
        """Projection ``index`` (0 = q, 1 = k, 2 = v) of ``x``.

        fairseq's attention asks for q, k and v of the same input one after the other; the
        fused map runs once per input tensor: its result is kept, keyed by the input object,
        until v (the last) has been handed out or another input arrives.
        """
        memo = self.__dict__.get("_memo")
        if memo is None or memo[0] is not x:
            memo = (x, self(x))
            self.__dict__["_memo"] = memo
        if index == 2:
            self.__dict__["_memo"] = None
        return memo[1][index]

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """``(..., d)`` -> ``q, k, v`` each ``(..., d)`` (Eq. 8)."""
        y = self.proj(x)  # [T x B x d] -> [T x B x 3d]
        if self.kind == "dense" or self.num_dense == 0:
            # copies, not views: fairseq scales q in place (``q *= self.scaling``), which
            # autograd refuses on a view of a chunk
            return tuple(c.clone() for c in y.chunk(3, dim=-1))
        return split_qkv(y, self.num_dense, self.dim)

    def extra_repr(self) -> str:
        return f"dim={self.dim}, kind={self.kind!r}, num_dense={self.num_dense}"


def _legacy_params(kind, beta, ranks, rank, num_cores, in_shape, out_shape) -> dict:
    """Keyword arguments of :class:`FusedQKV` -> the kind's spec parameters."""
    p: dict = {}
    if kind in ("htt", "hmf"):
        p["alpha"] = beta
    if kind in ("htt", "tt"):
        p["ranks"] = ranks or 0
        p["num_cores"] = num_cores
        if in_shape is not None:
            p["in_shape"] = list(in_shape)
        if out_shape is not None:
            p["out_shape"] = list(out_shape)
    if kind in ("hmf", "lowrank"):
        p["rank"] = rank
    return p


# ------------------------------------------------------------------------------------------
# the qkv target of the kind registry (Hypoformer's HTT SAN and its Table 2 baselines)
# ------------------------------------------------------------------------------------------


def _register_qkv() -> None:
    def make(kind):
        def fn(s: Shape, p: dict) -> dict:
            if s.out_features != 3 * s.in_features:
                raise ValueError(
                    f"a fused Q/K/V map is d -> 3d, not {s.in_features}->{s.out_features}"
                )
            _, inner = FusedQKV.inner_params(s.in_features, kind, p)
            get_variant(kind, "linear").kwargs(Shape(s.in_features, s.out_features, s.bias), inner)
            return {"dim": s.in_features, "kind": kind, "params": p, "bias": s.bias}

        return fn

    def fit(kind):
        # the dense source of a fused slot is the triple (q_proj, k_proj, v_proj)
        return lambda qkv, p: FusedQKV.from_linears(*qkv, kind=kind, params=p)

    schemas = {
        "dense": {},
        "lowrank": {"one_of": RANK_OPTIONS},
        "tt": {"required": ("ranks",), "optional": TT_OPTIONS},
        "htt": {"required": ("alpha", "ranks"), "optional": TT_OPTIONS},
        "hmf": {"required": ("alpha",), "one_of": RANK_OPTIONS},
    }
    for kind, schema in schemas.items():
        register(kind, "qkv", FusedQKV, make(kind), fit(kind), **schema)


_register_qkv()
