"""Hybrid dense / factorized linear layers (Hypoformer HTT and HMF).

``y = concat(dense(x), factorized(x))`` over the output columns: the first
``round_half_up(alpha * out)`` output features come from a dense ``nn.Linear``, the rest from a
:class:`~lightcompress.modules.tensor_train.TTLinear` (``kind="tt"``, HTT) or a
:class:`~lightcompress.modules.lowrank.LowRankLinear` (``kind="lowrank"``, HMF).
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import torch
from torch import nn

from lightcompress.modules.lowrank import (
    LowRankLinear,
    init_bias_like_linear,
    resolve_rank,
)
from lightcompress.modules.tensor_train import TTLinear, check_tt_shapes, factorize_dim

__all__ = ["HybridLinear", "dense_columns"]

_KINDS = ("tt", "lowrank")


def dense_columns(alpha: float, n: int) -> int:
    """Number of dense columns: ``floor(alpha * n + 0.5)`` (round half up).

    Raises
    ------
    ValueError
        If ``alpha`` is outside ``[0, 1]``.
    """
    if not 0.0 <= alpha <= 1.0:
        raise ValueError(f"alpha must be in [0, 1], got {alpha}")
    return math.floor(alpha * n + 0.5)


class HybridLinear(nn.Module):
    """``[dense | factorized]`` output columns: a drop-in for ``nn.Linear(in, out)``.

    Parameters
    ----------
    in_features : int
        Input size.
    out_features : int
        Output size ``N``.
    alpha : float
        Dense share in ``[0, 1]``; ``N_d = floor(alpha N + 0.5)`` dense columns come first, the
        remaining ``N - N_d`` are factorized. ``alpha=0``: all factorized; ``alpha=1``: dense.
    kind : {"tt", "lowrank"}
        Factorization of the remaining columns (HTT or HMF).
    rank : int, optional
        ``kind="lowrank"``: the rank of the ``(N - N_d) x in`` part.
    ranks : int or sequence of int, optional
        ``kind="tt"``: TT ranks.
    in_shape, out_shape : sequence of int, optional
        ``kind="tt"``: modes of ``in`` and of ``N - N_d``; default :func:`factorize_dim` with
        ``num_cores`` factors.
    num_cores : int
        ``kind="tt"``: cores used when a shape is not given.
    bias : bool
        Whether to learn a bias; each part carries the bias of its own columns.

    Attributes
    ----------
    dense : nn.Linear or None
        ``(N_d, in)`` weight; None when ``N_d = 0``.
    factorized : TTLinear or LowRankLinear or None
        Produces the last ``N - N_d`` columns; None when ``N_d = N``.
    num_dense : int
        ``N_d``.
    rank : int or list of int or None
        The factorized part's rank(s).
    kept_energy : float or None
        Set by :meth:`from_linear`: fraction of ``||W||_F^2`` kept over the whole matrix.

    Notes
    -----
    The dense part is initialised like the factorized part's convention,
    ``Var(W) = 1 / in_features`` (normal), bias ``U(-1/sqrt(in), 1/sqrt(in))``.
    """

    def __init__(
        self,
        in_features: int,
        out_features: int,
        alpha: float,
        kind: str = "tt",
        rank: int | None = None,
        ranks: int | Sequence[int] | None = None,
        in_shape: Sequence[int] | None = None,
        out_shape: Sequence[int] | None = None,
        num_cores: int = 3,
        bias: bool = True,
    ):
        super().__init__()
        self.in_features = int(in_features)
        self.out_features = int(out_features)
        self.alpha = float(alpha)
        self.kind = kind
        cfg = self._config(
            self.in_features,
            self.out_features,
            alpha,
            kind,
            rank,
            ranks,
            in_shape,
            out_shape,
            num_cores,
        )
        self.num_dense = cfg["num_dense"]
        self.kept_energy: float | None = None
        self.dense = (
            nn.Linear(self.in_features, self.num_dense, bias=bias) if self.num_dense else None
        )
        self.factorized: nn.Module | None = None
        self.rank = None
        if cfg["num_fact"]:
            if kind == "tt":
                self.factorized = TTLinear(cfg["in_shape"], cfg["out_shape"], cfg["ranks"], bias)
            else:
                self.factorized = LowRankLinear(
                    self.in_features, cfg["num_fact"], cfg["rank"], bias
                )
            self.rank = self.factorized.rank
        self.reset_parameters()

    @staticmethod
    def _config(in_f, out_f, alpha, kind, rank, ranks, in_shape, out_shape, num_cores) -> dict:
        if kind not in _KINDS:
            raise ValueError(f"HybridLinear kind must be one of {_KINDS}, got {kind!r}")
        nd = dense_columns(alpha, out_f)
        nf = out_f - nd
        cfg = {"num_dense": nd, "num_fact": nf}
        if nf == 0:
            return cfg
        if kind == "lowrank":
            if rank is None:
                raise ValueError("HybridLinear(kind='lowrank') needs rank")
            cfg["rank"] = resolve_rank(nf, in_f, rank=rank)
        else:
            if ranks is None:
                raise ValueError("HybridLinear(kind='tt') needs ranks")
            in_shape = list(in_shape) if in_shape is not None else factorize_dim(in_f, num_cores)
            if out_shape is None:
                out_shape = factorize_dim(nf, len(in_shape))
            cfg["in_shape"], cfg["out_shape"] = list(in_shape), list(out_shape)
            try:
                cfg["ranks"] = check_tt_shapes(in_shape, out_shape, ranks, in_f, nf)
            except ValueError as exc:
                raise ValueError(
                    f"{exc} (the TT part has the last {nf} of {out_f} output columns, "
                    f"alpha={alpha})"
                ) from None
        return cfg

    def reset_parameters(self) -> None:
        """From-scratch init (see class notes); the factorized part uses its own init."""
        if self.dense is not None:
            nn.init.normal_(self.dense.weight, std=self.in_features**-0.5)
            init_bias_like_linear(self.dense.bias, self.in_features)

    @staticmethod
    def num_params(
        in_features: int,
        out_features: int,
        alpha: float,
        kind: str = "tt",
        rank: int | None = None,
        ranks: int | Sequence[int] | None = None,
        in_shape: Sequence[int] | None = None,
        out_shape: Sequence[int] | None = None,
        num_cores: int = 3,
        bias: bool = True,
    ) -> int:
        """Exact count: ``N_d (in + 1) +`` the factorized part's count (with its bias)."""
        cfg = HybridLinear._config(
            in_features,
            out_features,
            alpha,
            kind,
            rank,
            ranks,
            in_shape,
            out_shape,
            num_cores,
        )
        nd, nf = cfg["num_dense"], cfg["num_fact"]
        total = nd * in_features + (nd if bias else 0)
        if nf:
            if kind == "tt":
                total += TTLinear.num_params(cfg["in_shape"], cfg["out_shape"], cfg["ranks"], bias)
            else:
                total += LowRankLinear.num_params(in_features, nf, cfg["rank"], bias)
        return total

    @classmethod
    def from_linear(
        cls,
        linear: nn.Linear,
        alpha: float,
        kind: str = "tt",
        rank: int | None = None,
        ratio: float | None = None,
        energy: float | None = None,
        ranks: int | Sequence[int] | None = None,
        in_shape: Sequence[int] | None = None,
        out_shape: Sequence[int] | None = None,
        num_cores: int = 3,
    ) -> HybridLinear:
        """Copy the first ``N_d`` rows of a trained layer, factorize the rest (SVD / TT-SVD).

        ``rank`` / ``ratio`` / ``energy`` apply to ``kind="lowrank"`` (exactly one);
        ``ranks`` (default: exact) and the shapes to ``kind="tt"``.
        """
        weight = linear.weight
        out_f, in_f = weight.shape
        nd = dense_columns(alpha, out_f)
        has_bias = linear.bias is not None
        rest = nn.Linear(in_f, out_f - nd, bias=has_bias)
        part = None
        if out_f - nd:
            with torch.no_grad():
                rest = rest.to(device=weight.device, dtype=weight.dtype)
                rest.weight.copy_(weight[nd:])
                if has_bias:
                    rest.bias.copy_(linear.bias[nd:])
            if kind == "lowrank":
                part = LowRankLinear.from_linear(rest, rank=rank, ratio=ratio, energy=energy)
                rank = part.rank
            elif kind == "tt":
                if in_shape is None:
                    in_shape = factorize_dim(in_f, num_cores)
                part = TTLinear.from_linear(rest, in_shape, out_shape, ranks, len(in_shape))
                ranks, out_shape = part.rank, part.out_shape
        layer = cls(
            in_f,
            out_f,
            alpha,
            kind,
            rank=rank,
            ranks=ranks,
            in_shape=in_shape,
            out_shape=out_shape,
            num_cores=num_cores,
            bias=has_bias,
        )
        layer.to(device=weight.device, dtype=weight.dtype)
        with torch.no_grad():
            if layer.dense is not None:
                layer.dense.weight.copy_(weight[:nd])
                if has_bias:
                    layer.dense.bias.copy_(linear.bias[:nd])
        if part is not None:
            layer.factorized = part
        total = float(weight.detach().double().pow(2).sum())
        if total > 0 and part is not None:
            lost = (1.0 - part.kept_energy) * float(weight[nd:].detach().double().pow(2).sum())
            layer.kept_energy = 1.0 - lost / total
        else:
            layer.kept_energy = 1.0
        return layer

    def to_dense(self) -> torch.Tensor:
        """The equivalent dense weight ``(out, in)``: dense rows first."""
        parts = []
        if self.dense is not None:
            parts.append(self.dense.weight)
        if self.factorized is not None:
            parts.append(self.factorized.to_dense())
        return torch.cat(parts, 0)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """Apply the layer.

        Parameters
        ----------
        x : torch.Tensor
            ``(..., in)``.

        Returns
        -------
        torch.Tensor
            ``(..., out)``: columns ``[:N_d]`` dense, ``[N_d:]`` factorized.
        """
        lead = x.shape[:-1]
        x = x.reshape(-1, self.in_features)  # [... x in] -> [N x in]
        parts = []
        if self.dense is not None:
            parts.append(self.dense(x))  # [N x in] -> [N x N_d]
        if self.factorized is not None:
            parts.append(self.factorized(x))  # [N x in] -> [N x (out - N_d)]
        y = parts[0] if len(parts) == 1 else torch.cat(parts, -1)
        return y.view(*lead, self.out_features)

    def extra_repr(self) -> str:
        return (
            f"in_features={self.in_features}, out_features={self.out_features}, "
            f"alpha={self.alpha}, num_dense={self.num_dense}, kind={self.kind!r}"
        )
