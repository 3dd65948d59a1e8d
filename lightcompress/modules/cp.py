"""CP-factorized projection (Smartformer CPAC).

The ``d``-dim input is viewed as ``(h, d_k)`` (head ``a``, feature ``c``; index ``a d_k + c``)
and ``y[m] = sum_r W0[m, r] * sum_{a, c} x[a, c] W1[a, r] W2[c, r] + b[m]``, i.e. the dense
weight reshaped to ``(out, h, d_k)`` is the rank-``R`` CP tensor ``[[W0, W1, W2]]``.
"""

from __future__ import annotations

import torch
from torch import nn

from lightcompress.modules.lowrank import init_bias_like_linear

__all__ = ["CPAsLinears", "CPLinear", "cp_als", "cp_factors", "cp_to_dense"]


def _check(in_features: int, out_features: int, rank: int, heads: int) -> int:
    if isinstance(rank, bool) or int(rank) != rank or rank < 1:
        raise ValueError(
            f"CP rank must be an integer >= 1, got {rank!r} for a {out_features}x{in_features} "
            "layer"
        )
    if heads < 1 or in_features % heads:
        raise ValueError(
            f"in_features={in_features} must be divisible by heads={heads} to view the input "
            "as (heads, d_k)"
        )
    d_k = in_features // heads
    # the largest rank a (out, heads, d_k) tensor can have is at most the smallest product of
    # two of its sides: a higher CP rank only repeats components (and its ALS fit runs for
    # ever at sizes like 5,000)
    bound = min(out_features * heads, out_features * d_k, heads * d_k)
    if rank > bound:
        raise ValueError(
            f"CP rank {rank} exceeds the largest possible rank {bound} of a {out_features}x"
            f"{in_features} layer viewed as ({out_features}, {heads}, {d_k}); choose a rank "
            f"<= {bound}"
        )
    return d_k


def cp_to_dense(w0: torch.Tensor, w1: torch.Tensor, w2: torch.Tensor) -> torch.Tensor:
    """``(out, h * d_k)`` weight of CP factors ``(out, R)``, ``(h, R)``, ``(d_k, R)``."""
    out = w0.shape[0]
    return torch.einsum("mr,ar,cr->mac", w0, w1, w2).reshape(out, -1)


@torch.no_grad()
def cp_factors(
    weight: torch.Tensor,
    rank: int,
    heads: int,
    n_iter_max: int = 500,
    tol: float = 1e-10,
    random_state: int = 0,
) -> tuple[list[torch.Tensor], float]:
    """CP decomposition of ``weight`` viewed as ``(out, h, d_k)``: CP-ALS from an SVD start.

    The algorithm of tensorly's ``parafac`` (``init="svd"``: random columns, drawn from
    ``random_state``, where the rank exceeds a side), run in float64 by :func:`cp_als` in
    torch; the factors get a balanced scale.

    Parameters
    ----------
    weight : torch.Tensor
        ``(out, in)`` with ``in = h * d_k``.
    rank : int
        CP rank ``R``.
    heads : int
        ``h``.
    n_iter_max, tol, random_state
        ALS iterations at most; stop when the relative squared error changes by less than
        ``tol``; seed of the random start columns.

    Returns
    -------
    factors : list of torch.Tensor
        float32 ``W0 (out, R)``, ``W1 (h, R)``, ``W2 (d_k, R)``.
    kept_energy : float
        ``1 - ||W - W_cp||^2 / ||W||^2`` (the fit).
    """
    out_f, in_f = weight.shape
    d_k = _check(in_f, out_f, rank, heads)
    t = weight.detach().double().cpu().reshape(out_f, heads, d_k)
    # tensorly's "svd" start: the leading left singular vectors of each unfolding, random
    # columns where the rank exceeds a side; then CP-ALS (the updates of tensorly's parafac)
    # in torch: seconds for a 512-wide model where tensorly's numpy ALS took minutes per map
    gen = torch.Generator().manual_seed(int(random_state))
    start = []
    for mode in range(3):
        unfold = t.movedim(mode, 0).reshape(t.shape[mode], -1)
        u = torch.linalg.svd(unfold, full_matrices=False)[0][:, :rank]
        if u.shape[1] < rank:
            extra = torch.randn(t.shape[mode], rank - u.shape[1], generator=gen, dtype=t.dtype)
            u = torch.cat([u, extra], dim=1)
        start.append(u)
    start[0] = start[0] * t.norm() / max(float(start[0].norm()), 1e-30)
    factors, kept = cp_als(t, start, n_iter_max=n_iter_max, tol=tol)
    return [f.float().contiguous() for f in factors], kept


@torch.no_grad()
def cp_als(
    tensor: torch.Tensor,
    factors: list[torch.Tensor],
    n_iter_max: int = 50,
    tol: float = 1e-7,
) -> tuple[list[torch.Tensor], float]:
    """CP-ALS of a 3-way ``tensor`` started from ``factors`` (a warm start), in torch.

    The alternating least-squares updates of tensorly's ``parafac`` (``A = T_(1) (C kr B)
    (C^T C * B^T B)^+`` and its two siblings), computed with ``einsum`` on the tensor's device
    in float64, stopping when the relative fit error changes by less than ``tol``. Used by the
    rank search, where the factors of the current rank are a close start (tensorly's
    numpy ALS from an SVD start took minutes per 512 x 512 projection on a CPU).

    Returns
    -------
    factors : list of torch.Tensor
        ``(I, R)``, ``(J, R)``, ``(K, R)`` in the tensor's dtype, the scale balanced as
        :func:`cp_factors` does.
    kept_energy : float
        ``1 - ||T - [[A, B, C]]||^2 / ||T||^2``.
    """
    t = tensor.double()
    a, b, c = (f.detach().to(device=t.device, dtype=torch.float64).clone() for f in factors)
    norm2 = float(t.pow(2).sum())
    eye = torch.eye(a.shape[1], dtype=torch.float64, device=t.device)

    def solve(mttkrp, gram):
        # least squares with a tiny ridge (Gram matrices of a rank-deficient start are singular)
        return torch.linalg.solve(
            gram + 1e-12 * gram.diagonal().mean().clamp_min(1e-30) * eye, mttkrp.T
        ).T

    n_i, n_j, n_k = t.shape
    t_ij_k = t.reshape(n_i * n_j, n_k)
    t_i_jk = t.reshape(n_i, n_j * n_k)
    # Each update contracts the tensor with one factor first (I J K R multiply-adds) and the
    # other by an element-wise product: no (J K) x R Khatri-Rao matrix is formed.
    prev = None
    for _ in range(max(1, int(n_iter_max))):
        y = (t_ij_k @ c).reshape(n_i, n_j, -1)  # [I J x K] @ [K x R] -> [I x J x R]
        a = solve((y * b[None]).sum(1), (b.T @ b) * (c.T @ c))
        b = solve((y * a[:, None, :]).sum(0), (a.T @ a) * (c.T @ c))
        z = (a.T @ t_i_jk).reshape(-1, n_j, n_k)  # [R x I] @ [I x J K] -> [R x J x K]
        m_c = (z * b.T[:, :, None]).sum(1).T  # [K x R]
        c = solve(m_c, (a.T @ a) * (b.T @ b))
        # ||T - T^||^2 = ||T||^2 - 2 <T, T^> + ||T^||^2
        inner = float((m_c * c).sum())
        model2 = float(((a.T @ a) * (b.T @ b) * (c.T @ c)).sum())
        err = max(norm2 - 2 * inner + model2, 0.0) / max(norm2, 1e-300)
        if prev is not None and abs(prev - err) < tol:
            break
        prev = err
    # balance: every column's norm shared equally by the three factors (sign kept on A)
    na, nb, nc = a.norm(dim=0), b.norm(dim=0), c.norm(dim=0)
    scale = torch.pow(na * nb * nc, 1.0 / 3.0)
    safe = lambda n: torch.where(n > 0, n, torch.ones_like(n))
    a, b, c = a / safe(na) * scale, b / safe(nb) * scale, c / safe(nc) * scale
    fit = (t_i_jk - a @ (b[:, None, :] * c[None, :, :]).reshape(n_j * n_k, -1).T).pow(2).sum()
    kept = 1.0 - float(fit) / max(norm2, 1e-300)
    return [f.to(tensor.dtype) for f in (a, b, c)], kept


class CPLinear(nn.Module):
    """CP-factorized replacement for ``nn.Linear(h * d_k, out)`` (CPAC).

    Parameters
    ----------
    in_features : int
        Input size ``h * d_k``.
    out_features : int
        Output size.
    rank : int
        CP rank ``R >= 1``.
    heads : int
        ``h``; ``in_features`` must be divisible by it.
    bias : bool
        Whether to learn an output bias ``(out,)``.

    Attributes
    ----------
    w0 : nn.Parameter
        ``(out, R)``.
    w1 : nn.Parameter
        ``(h, R)``.
    w2 : nn.Parameter
        ``(d_k, R)``.
    bias : nn.Parameter or None
        ``(out,)``.
    rank : int
        ``R``.
    kept_energy : float or None
        Fit of the last CP decomposition (from :meth:`from_linear` or :meth:`set_rank`).

    Notes
    -----
    From-scratch init: the three factors are ``N(0, s^2)`` with ``s^6 R = 1 / in_features`` so
    that ``Var(W) = 1 / in_features``; bias ``U(-1/sqrt(in), 1/sqrt(in))`` as nn.Linear.
    """

    def __init__(
        self,
        in_features: int,
        out_features: int,
        rank: int,
        heads: int,
        bias: bool = True,
    ):
        super().__init__()
        self.in_features = int(in_features)
        self.out_features = int(out_features)
        self.heads = int(heads)
        self.head_dim = _check(self.in_features, self.out_features, rank, self.heads)
        self.rank = int(rank)
        self.kept_energy: float | None = None
        self.w0 = nn.Parameter(torch.empty(self.out_features, self.rank))
        self.w1 = nn.Parameter(torch.empty(self.heads, self.rank))
        self.w2 = nn.Parameter(torch.empty(self.head_dim, self.rank))
        self.bias = nn.Parameter(torch.empty(self.out_features)) if bias else None
        self.reset_parameters()

    def reset_parameters(self) -> None:
        """From-scratch init with ``Var(W) = 1 / in_features``."""
        std = (1.0 / (self.in_features * self.rank)) ** (1.0 / 6.0)
        for p in (self.w0, self.w1, self.w2):
            nn.init.normal_(p, std=std)
        init_bias_like_linear(self.bias, self.in_features)

    @staticmethod
    def num_params(
        in_features: int, out_features: int, rank: int, heads: int, bias: bool = True
    ) -> int:
        """Exact count: ``R (out + h + d_k) + out`` (the last term if ``bias``)."""
        d_k = _check(in_features, out_features, rank, heads)
        return rank * (out_features + heads + d_k) + (out_features if bias else 0)

    @classmethod
    def from_linear(
        cls,
        linear: nn.Linear,
        rank: int,
        heads: int,
        n_iter_max: int = 500,
        tol: float = 1e-10,
        random_state: int = 0,
    ) -> CPLinear:
        """CP decomposition of a trained ``nn.Linear`` (copies the bias); see :func:`cp_factors`."""
        weight = linear.weight
        out_f, in_f = weight.shape
        layer = cls(in_f, out_f, rank, heads, bias=linear.bias is not None)
        factors, kept = cp_factors(weight, rank, heads, n_iter_max, tol, random_state)
        layer.to(device=weight.device, dtype=weight.dtype)
        with torch.no_grad():
            for p, f in zip((layer.w0, layer.w1, layer.w2), factors):
                p.copy_(f)
            if linear.bias is not None:
                layer.bias.copy_(linear.bias)
        layer.kept_energy = kept
        return layer

    @torch.no_grad()
    def set_rank(
        self,
        new_rank: int,
        n_iter_max: int = 500,
        tol: float = 1e-10,
        random_state: int = 0,
        warm_start: bool = False,
    ) -> float:
        """Re-fit the factors at ``new_rank`` to the current dense weight and replace them.

        By default a fresh CP decomposition (:func:`cp_factors`, tensorly). ``warm_start``
        starts :func:`cp_als` from the current factors instead, on their device: the
        ``new_rank`` components of largest norm when the rank shrinks, all of them plus small
        random ones (seeded by ``random_state``) when it grows.

        ``w0``, ``w1``, ``w2`` become NEW ``nn.Parameter`` objects (on the same device/dtype):
        an optimizer holding the old ones must be rebuilt, and ties made by
        :func:`~lightcompress.modules.sharing.tie_layers` must be re-made.

        Returns
        -------
        float
            The fit ``1 - ||W - W_cp||^2 / ||W||^2``.
        """
        _check(self.in_features, self.out_features, new_rank, self.heads)
        ref = self.w0
        if warm_start:
            factors, kept = cp_als(
                self.to_dense().reshape(self.out_features, self.heads, self.head_dim),
                self._start_factors(int(new_rank), random_state),
                n_iter_max,
                tol,
            )
        else:
            factors, kept = cp_factors(
                self.to_dense(), new_rank, self.heads, n_iter_max, tol, random_state
            )
        for name, f in zip(("w0", "w1", "w2"), factors):
            p = nn.Parameter(
                f.to(device=ref.device, dtype=ref.dtype),
                requires_grad=ref.requires_grad,
            )
            setattr(self, name, p)
        self.rank = int(new_rank)
        self.kept_energy = kept
        return kept

    def _start_factors(self, rank: int, seed: int) -> list[torch.Tensor]:
        cur = [self.w0.detach().double(), self.w1.detach().double(), self.w2.detach().double()]
        norms = cur[0].norm(dim=0) * cur[1].norm(dim=0) * cur[2].norm(dim=0)
        if rank <= self.rank:
            keep = torch.argsort(norms, descending=True)[:rank]
            return [f[:, keep] for f in cur]
        g = torch.Generator().manual_seed(seed)
        extra = rank - self.rank
        small = float(norms.mean().clamp_min(1e-12)) ** (1.0 / 3.0) * 1e-2
        out = []
        for f in cur:
            noise = torch.randn(f.shape[0], extra, generator=g, dtype=torch.float64) * small
            out.append(torch.cat([f, noise.to(f.device)], dim=1))
        return out

    def resize(self, new_rank: int) -> None:
        """Give the layer uninitialised factors of rank ``new_rank`` (values to be loaded).

        Used when a checkpoint holds this layer at another rank (a rank search changed it):
        the model is built from its flags at the initial rank, then resized to the saved
        shapes before ``load_state_dict``. The parameters are new objects, at the same
        positions of the module's parameter list.
        """
        _check(self.in_features, self.out_features, new_rank, self.heads)
        for name in ("w0", "w1", "w2"):
            old = getattr(self, name)
            shape = (old.shape[0], int(new_rank))
            setattr(self, name, nn.Parameter(old.new_empty(shape), old.requires_grad))
        self.rank = int(new_rank)
        self.kept_energy = None

    def to_dense(self) -> torch.Tensor:
        """The equivalent dense weight ``(out, h * d_k)``."""
        return cp_to_dense(self.w0, self.w1, self.w2)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """Apply the layer.

        Parameters
        ----------
        x : torch.Tensor
            ``(..., h * d_k)``.

        Returns
        -------
        torch.Tensor
            ``(..., out)``.
        """
        lead = x.shape[:-1]
        x = x.reshape(-1, self.heads, self.head_dim)  # [... x in] -> [N x h x d_k]
        t = x @ self.w2  # [N x h x d_k] -> [N x h x R]
        z = (t * self.w1).sum(1)  # [N x h x R] -> [N x R]
        y = nn.functional.linear(z, self.w0, self.bias)  # [N x R] -> [N x out]
        return y.view(*lead, self.out_features)

    def as_linears(self) -> CPAsLinears:
        """The same map with its two matrix products as ``nn.Linear`` (quantizable)."""
        return CPAsLinears(self)

    def extra_repr(self) -> str:
        return (
            f"in_features={self.in_features}, out_features={self.out_features}, "
            f"rank={self.rank}, heads={self.heads}, bias={self.bias is not None}"
        )


class CPAsLinears(nn.Module):
    """A :class:`CPLinear` with its two matrix products as ``nn.Linear`` (quantizable); the
    element-wise head weighting ``w1`` stays float32."""

    def __init__(self, layer: CPLinear):
        super().__init__()
        self.heads, self.head_dim = layer.heads, layer.head_dim
        self.in_features, self.out_features = layer.in_features, layer.out_features
        rank = layer.rank
        self.mode = nn.Linear(self.head_dim, rank, bias=False)
        self.out = nn.Linear(rank, self.out_features, bias=layer.bias is not None)
        with torch.no_grad():
            self.mode.weight.copy_(layer.w2.t())
            self.out.weight.copy_(layer.w0)
            if layer.bias is not None:
                self.out.bias.copy_(layer.bias)
        self.register_buffer("w1", layer.w1.detach().clone())

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        lead = x.shape[:-1]
        x = x.reshape(-1, self.heads, self.head_dim)  # [... x in] -> [N x h x d_k]
        z = (self.mode(x) * self.w1).sum(1)  # [N x h x R] -> [N x R]
        return self.out(z).view(*lead, self.out_features)
