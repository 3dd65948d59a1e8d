"""Low-rank matrix factorization (LightFormer LMF): ``W ~ U V``.

A dense ``nn.Linear`` with weight ``W`` of shape ``(out, in)`` is replaced by two factors
``U`` ``(out, r)`` and ``V`` ``(r, in)``; the bias stays on the output. Transfer from a trained
layer uses the truncated SVD with the balanced split ``U = U_r sqrt(S_r)``,
``V = sqrt(S_r) V_r^T`` (computed in float32).
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import nn

__all__ = [
    "LowRankLinear",
    "TwoLinear",
    "energy_rank",
    "init_bias_like_linear",
    "ratio_rank",
    "resolve_rank",
    "svd_factors",
]


def init_bias_like_linear(bias: torch.Tensor | None, in_features: int) -> None:
    """Initialise ``bias`` in place as ``nn.Linear`` does: ``U(-1/sqrt(in), 1/sqrt(in))``."""
    if bias is not None:
        bound = 1.0 / math.sqrt(in_features) if in_features > 0 else 0.0
        nn.init.uniform_(bias, -bound, bound)


def ratio_rank(m: int, n: int, ratio: float) -> int:
    """Rank that compresses an ``m x n`` matrix by ``ratio`` (LightFormer Appendix C, Eq. 12).

    ``k = floor(m n / (p (m + n)))``, so that ``k (m + n) <= m n / p``.

    Parameters
    ----------
    m, n : int
        Matrix shape.
    ratio : float
        Compression ratio ``p > 0`` (``2`` halves the parameter count).

    Returns
    -------
    int
        The rank ``k`` (may be 0 for very large ratios; :func:`resolve_rank` rejects that).
    """
    if not ratio > 0:
        raise ValueError(f"compression ratio must be > 0, got {ratio}")
    return math.floor(m * n / (ratio * (m + n)))


def energy_rank(singular_values: torch.Tensor, energy: float) -> int:
    """Smallest ``k`` whose leading squared singular values hold ``>= energy`` of the total.

    Parameters
    ----------
    singular_values : torch.Tensor
        ``(min(m, n),)`` singular values in descending order.
    energy : float
        Fraction in ``(0, 1]``.

    Returns
    -------
    int
        The rank ``k >= 1``.
    """
    if not 0.0 < energy <= 1.0:
        raise ValueError(f"energy threshold must be in (0, 1], got {energy}")
    s2 = singular_values.detach().double() ** 2
    total = s2.sum()
    if total <= 0:
        return 1
    cum = torch.cumsum(s2, 0) / total
    # Tolerate float rounding at energy == 1.0.
    k = int(torch.searchsorted(cum, torch.tensor(energy - 1e-12, dtype=cum.dtype)).item())
    return min(k + 1, s2.numel())


def resolve_rank(
    m: int,
    n: int,
    rank: int | None = None,
    ratio: float | None = None,
    energy: float | None = None,
    singular_values: torch.Tensor | None = None,
) -> int:
    """Turn one of ``rank`` / ``ratio`` / ``energy`` into a validated integer rank.

    Parameters
    ----------
    m, n : int
        Shape of the matrix ``(out, in)``.
    rank : int, optional
        An explicit rank.
    ratio : float, optional
        A compression ratio; see :func:`ratio_rank`.
    energy : float, optional
        A fraction of the squared singular values to keep; needs ``singular_values``.
    singular_values : torch.Tensor, optional
        ``(min(m, n),)`` singular values in descending order (for ``energy``).

    Returns
    -------
    int
        A rank in ``[1, min(m, n)]``.

    Raises
    ------
    ValueError
        If not exactly one of ``rank``, ``ratio``, ``energy`` is given, or the resulting rank
        is ``<= 0`` or ``> min(m, n)`` (the message names the shape).
    """
    given = [k for k, v in (("rank", rank), ("ratio", ratio), ("energy", energy)) if v is not None]
    if len(given) != 1:
        raise ValueError(
            f"give exactly one of rank, ratio, energy for a {m}x{n} matrix, got {given or 'none'}"
        )
    if rank is not None:
        if isinstance(rank, bool) or int(rank) != rank:
            raise ValueError(f"rank must be an integer, got {rank!r} for a {m}x{n} matrix")
        k = int(rank)
        source = f"rank={rank}"
    elif ratio is not None:
        k = ratio_rank(m, n, ratio)
        source = f"ratio={ratio} (k = floor(mn / (p (m + n))))"
    else:
        if singular_values is None:
            raise ValueError(
                f"energy={energy} needs the singular values of the trained {m}x{n} weight; "
                "use it when converting a trained layer, not for a from-scratch layer"
            )
        k = energy_rank(singular_values, energy)
        source = f"energy={energy}"
    if k <= 0 or k > min(m, n):
        raise ValueError(
            f"rank {k} from {source} is invalid for a {m}x{n} (out x in) matrix: "
            f"it must be in [1, {min(m, n)}]"
        )
    return k


@torch.no_grad()
def svd_factors(weight: torch.Tensor, rank: int) -> tuple[torch.Tensor, torch.Tensor, float]:
    """Balanced truncated-SVD factors of ``weight`` (computed in float32).

    Parameters
    ----------
    weight : torch.Tensor
        ``(m, n)`` matrix.
    rank : int
        Rank ``r`` in ``[1, min(m, n)]``.

    Returns
    -------
    u : torch.Tensor
        ``(m, r)`` = ``U_r sqrt(S_r)`` (float32).
    v : torch.Tensor
        ``(r, n)`` = ``sqrt(S_r) V_r^T`` (float32).
    kept_energy : float
        ``sum(S_r^2) / sum(S^2)``: the fraction of squared Frobenius norm kept.
    """
    m, n = weight.shape
    resolve_rank(m, n, rank=rank)
    w = weight.detach().float()
    u_full, s, vh = torch.linalg.svd(w, full_matrices=False)
    sqrt_s = s[:rank].sqrt()
    u = u_full[:, :rank] * sqrt_s
    v = sqrt_s[:, None] * vh[:rank]
    total = float((s.double() ** 2).sum())
    kept = float((s[:rank].double() ** 2).sum()) / total if total > 0 else 1.0
    return u.contiguous(), v.contiguous(), kept


class LowRankLinear(nn.Module):
    """``y = x V^T U^T + b``: a rank-``r`` replacement for ``nn.Linear(in, out)``.

    Parameters
    ----------
    in_features : int
        Input size ``n``.
    out_features : int
        Output size ``m``.
    rank : int
        Rank ``r`` in ``[1, min(m, n)]``.
    bias : bool
        Whether to learn an output bias ``(m,)``.

    Attributes
    ----------
    u : nn.Parameter
        ``(out, r)`` output factor.
    v : nn.Parameter
        ``(r, in)`` input factor.
    bias : nn.Parameter or None
        ``(out,)``.
    rank : int
        The rank used.
    kept_energy : float or None
        Fraction of squared singular values kept by :meth:`from_linear` (None from scratch).

    Notes
    -----
    From-scratch init: ``u`` and ``v`` are ``N(0, s^2)`` with ``s^4 r = 1 / in``, so the product
    has ``Var(W) = 1 / in_features`` (LeCun normal, the TedNet/TTLinear convention; nn.Linear's
    default kaiming-uniform gives ``1 / (3 in)``). The bias is ``U(-1/sqrt(in), 1/sqrt(in))`` as
    in nn.Linear.
    """

    def __init__(self, in_features: int, out_features: int, rank: int, bias: bool = True):
        super().__init__()
        self.in_features = int(in_features)
        self.out_features = int(out_features)
        self.rank = resolve_rank(self.out_features, self.in_features, rank=rank)
        self.kept_energy: float | None = None
        self.u = nn.Parameter(torch.empty(self.out_features, self.rank))
        self.v = nn.Parameter(torch.empty(self.rank, self.in_features))
        self.bias = nn.Parameter(torch.empty(self.out_features)) if bias else None
        self.reset_parameters()

    def reset_parameters(self) -> None:
        """From-scratch init with ``Var(W) = 1 / in_features`` (see class notes)."""
        std = (1.0 / (self.in_features * self.rank)) ** 0.25
        nn.init.normal_(self.u, std=std)
        nn.init.normal_(self.v, std=std)
        init_bias_like_linear(self.bias, self.in_features)

    @staticmethod
    def num_params(in_features: int, out_features: int, rank: int, bias: bool = True) -> int:
        """Exact parameter count: ``r (in + out) + out`` (the last term if ``bias``)."""
        return rank * (in_features + out_features) + (out_features if bias else 0)

    @classmethod
    def from_linear(
        cls,
        linear: nn.Linear,
        rank: int | None = None,
        ratio: float | None = None,
        energy: float | None = None,
    ) -> LowRankLinear:
        """Factorize a trained ``nn.Linear`` by truncated SVD (copies the bias).

        Parameters
        ----------
        linear : nn.Linear
            Layer with weight ``(out, in)``.
        rank, ratio, energy
            Exactly one; see :func:`resolve_rank`.

        Returns
        -------
        LowRankLinear
            On the layer's device and dtype, with ``rank`` and ``kept_energy`` set.
        """
        weight = linear.weight
        m, n = weight.shape
        s = None
        if energy is not None:
            s = torch.linalg.svdvals(weight.detach().float())
        k = resolve_rank(m, n, rank=rank, ratio=ratio, energy=energy, singular_values=s)
        u, v, kept = svd_factors(weight, k)
        layer = cls(n, m, k, bias=linear.bias is not None)
        layer.to(device=weight.device, dtype=weight.dtype)
        with torch.no_grad():
            layer.u.copy_(u)
            layer.v.copy_(v)
            if linear.bias is not None:
                layer.bias.copy_(linear.bias)
        layer.kept_energy = kept
        return layer

    def to_dense(self) -> torch.Tensor:
        """The equivalent dense weight ``U V``, shape ``(out, in)``."""
        return self.u @ self.v

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """Apply the layer.

        Parameters
        ----------
        x : torch.Tensor
            ``(..., in)``, e.g. fairseq's ``T x B x C``.

        Returns
        -------
        torch.Tensor
            ``(..., out)``.
        """
        lead = x.shape[:-1]
        x = x.reshape(-1, self.in_features)  # [... x in] -> [N x in]
        h = F.linear(x, self.v)  # [N x in] -> [N x r]
        y = F.linear(h, self.u, self.bias)  # [N x r] -> [N x out]
        return y.view(*lead, self.out_features)

    def as_linears(self) -> TwoLinear:
        """The same map as ``Linear(in, r, bias=False)`` then ``Linear(r, out)`` (float32
        copies), which dynamic int8 quantization packs."""
        first = nn.Linear(self.in_features, self.rank, bias=False)
        second = nn.Linear(self.rank, self.out_features, bias=self.bias is not None)
        with torch.no_grad():
            first.weight.copy_(self.v)
            second.weight.copy_(self.u)
            if self.bias is not None:
                second.bias.copy_(self.bias)
        return TwoLinear(first, second).to(self.u.dtype)

    def extra_repr(self) -> str:
        return (
            f"in_features={self.in_features}, out_features={self.out_features}, "
            f"rank={self.rank}, bias={self.bias is not None}"
        )


class TwoLinear(nn.Module):
    """``second(first(x))``: a low-rank map as two ``nn.Linear`` (quantizable)."""

    def __init__(self, first: nn.Linear, second: nn.Linear):
        super().__init__()
        self.first = first
        self.second = second
        self.in_features = first.in_features
        self.out_features = second.out_features

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.second(self.first(x))  # [... x in] -> [... x r] -> [... x out]
