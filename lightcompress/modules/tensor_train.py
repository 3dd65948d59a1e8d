"""Tensor-train (TT) matrices (Hypoformer; core layout of TedNet ``tnbar/tednet``).

A weight ``W`` of shape ``(prod n, prod m)`` is stored as ``d >= 2`` cores

- first ``(m1, n1, r1)``,
- middle ``(m_i, n_i, r(i-1), r_i)``,
- last ``(m_d, n_d, r(d-1))``,

with ``W[(j1..jd), (i1..id)] = G1[i1, j1, :] G2[i2, j2, :, :] ... Gd[id, jd, :]`` where both
the row (output) index ``(j1..jd)`` and the column (input) index ``(i1..id)`` are row-major.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import torch
from torch import nn

from lightcompress.modules.lowrank import init_bias_like_linear

__all__ = [
    "TTLinear",
    "check_tt_shapes",
    "factorize_dim",
    "max_tt_ranks",
    "normalize_tt_ranks",
    "pad_factorize",
    "tt_num_params",
    "tt_svd",
    "tt_to_dense",
]


def _prime_factors(n: int) -> list[int]:
    out, p = [], 2
    while p * p <= n:
        while n % p == 0:
            out.append(p)
            n //= p
        p += 1
    if n > 1:
        out.append(n)
    return out


def _divisors(n: int) -> list[int]:
    small = [d for d in range(1, math.isqrt(n) + 1) if n % d == 0]
    return sorted(set(small + [n // d for d in small]))


def factorize_dim(n: int, num_cores: int, allow_ones: bool = False) -> list[int]:
    """Split ``n`` into ``num_cores`` integer factors that are as balanced as possible.

    Among all non-decreasing factorizations the one with the smallest largest factor wins
    (ties: the largest smallest factor). E.g. ``512, 3 -> [8, 8, 8]``,
    ``1536, 3 -> [8, 12, 16]``.

    Parameters
    ----------
    n : int
        The dimension, ``>= 1``.
    num_cores : int
        Number of factors, ``>= 1``.
    allow_ones : bool
        Whether factors equal to 1 are allowed. By default they are not: a mode of size 1
        makes its core degenerate, so ``n`` must have at least ``num_cores`` prime factors.

    Returns
    -------
    list of int
        ``num_cores`` factors in non-decreasing order with product ``n``.

    Raises
    ------
    ValueError
        If ``n`` has fewer than ``num_cores`` prime factors (counted with multiplicity) and
        ``allow_ones`` is False; e.g. a prime ``n`` cannot be split into 2 factors > 1.
        Pad the dimension (see :func:`pad_factorize`) or pass ``allow_ones=True``.
    """
    if n < 1 or num_cores < 1:
        raise ValueError(f"need n >= 1 and num_cores >= 1, got n={n}, num_cores={num_cores}")
    primes = _prime_factors(n)
    if not allow_ones and len(primes) < num_cores:
        raise ValueError(
            f"cannot split {n} into {num_cores} factors > 1: its prime factorization "
            f"{'x'.join(map(str, primes)) or '1'} has only {len(primes)} factor(s). Use fewer "
            "cores, pad the dimension (pad_factorize), or allow factors of 1 (allow_ones=True)"
        )
    divisors = _divisors(n)
    best: tuple | None = None

    def search(rest: int, k: int, lo: int, acc: list[int]) -> None:
        nonlocal best
        if k == 1:
            if rest >= lo:
                cand = acc + [rest]
                key = (max(cand), -min(cand))
                if best is None or key < best[0]:
                    best = (key, cand)
            return
        for d in divisors:
            if d < lo or (d == 1 and not allow_ones):
                continue
            if d**k > rest:  # the remaining factors are >= d
                break
            if rest % d == 0:
                search(rest // d, k - 1, d, acc + [d])

    search(n, num_cores, 1, [])
    assert best is not None
    return best[1]


def pad_factorize(n: int, num_cores: int) -> list[int]:
    """Balanced factors whose product is the smallest found ``>= n`` (for padded vocabularies).

    Starts from ``ceil(n ** (1 / num_cores))`` for every factor and lowers factors one at a
    time (largest first) while the product stays ``>= n``. E.g. ``10152, 3 -> [21, 22, 22]``
    (product 10164).

    Parameters
    ----------
    n : int
        The size to cover, ``>= 1``.
    num_cores : int
        Number of factors, ``>= 1``.

    Returns
    -------
    list of int
        Non-decreasing factors, each ``>= 1``, with ``prod >= n``.
    """
    if n < 1 or num_cores < 1:
        raise ValueError(f"need n >= 1 and num_cores >= 1, got n={n}, num_cores={num_cores}")
    f = max(1, math.ceil(round(n ** (1.0 / num_cores), 9)))
    while f**num_cores < n:
        f += 1
    factors = [f] * num_cores
    changed = True
    while changed:
        changed = False
        for i in range(num_cores):
            if factors[i] > 1 and math.prod(factors) // factors[i] * (factors[i] - 1) >= n:
                factors[i] -= 1
                changed = True
                break
    return sorted(factors)


def max_tt_ranks(in_shape: Sequence[int], out_shape: Sequence[int]) -> list[int]:
    """Largest useful TT ranks: ``r_k = min(prod_{i<=k} m_i n_i, prod_{i>k} m_i n_i)``.

    At these ranks the TT-SVD is exact for any matrix.

    Parameters
    ----------
    in_shape, out_shape : sequence of int
        ``[m1..md]`` and ``[n1..nd]``.

    Returns
    -------
    list of int
        ``d - 1`` ranks.
    """
    modes = [m * n for m, n in zip(in_shape, out_shape)]
    return [
        min(math.prod(modes[: k + 1]), math.prod(modes[k + 1 :])) for k in range(len(modes) - 1)
    ]


def normalize_tt_ranks(ranks: int | Sequence[int], num_cores: int) -> list[int]:
    """Broadcast an int rank to ``num_cores - 1`` ranks; check a list's length."""
    if isinstance(ranks, int):
        return [int(ranks)] * (num_cores - 1)
    ranks = [int(r) for r in ranks]
    if len(ranks) != num_cores - 1:
        raise ValueError(
            f"{num_cores} TT cores need {num_cores - 1} ranks, got {len(ranks)}: {ranks}"
        )
    return ranks


def check_tt_shapes(
    in_shape: Sequence[int],
    out_shape: Sequence[int],
    ranks: int | Sequence[int],
    in_features: int | None = None,
    out_features: int | None = None,
) -> list[int]:
    """Validate a TT-matrix configuration and return the rank list.

    Raises
    ------
    ValueError
        With a message naming the offending shape: fewer than 2 cores, different numbers of
        input and output modes, a mode < 1, a product that differs from ``in_features`` /
        ``out_features``, or a rank outside ``[1, max_tt_ranks]``.
    """
    in_shape, out_shape = list(in_shape), list(out_shape)
    d = len(in_shape)
    if d < 2 or len(out_shape) != d:
        raise ValueError(
            f"TT needs in_shape and out_shape of the same length >= 2, got in_shape={in_shape}, "
            f"out_shape={out_shape}"
        )
    if min(in_shape + out_shape) < 1:
        raise ValueError(f"TT modes must be >= 1, got in_shape={in_shape}, out_shape={out_shape}")
    if in_features is not None and math.prod(in_shape) != in_features:
        raise ValueError(
            f"in_shape {'x'.join(map(str, in_shape))} has product {math.prod(in_shape)}, "
            f"but in_features is {in_features}"
        )
    if out_features is not None and math.prod(out_shape) != out_features:
        raise ValueError(
            f"out_shape {'x'.join(map(str, out_shape))} has product {math.prod(out_shape)}, "
            f"but out_features is {out_features}"
        )
    ranks = normalize_tt_ranks(ranks, d)
    limit = max_tt_ranks(in_shape, out_shape)
    for k, (r, lim) in enumerate(zip(ranks, limit)):
        if not 1 <= r <= lim:
            raise ValueError(
                f"TT rank r{k + 1}={r} must be in [1, {lim}] for in_shape={in_shape}, "
                f"out_shape={out_shape} (max ranks {limit})"
            )
    return ranks


def tt_num_params(in_shape: Sequence[int], out_shape: Sequence[int], ranks: Sequence[int]) -> int:
    """Number of core entries: ``sum_k r(k-1) m_k n_k r_k`` with ``r0 = rd = 1``."""
    full = [1] + list(ranks) + [1]
    return sum(full[k] * m * n * full[k + 1] for k, (m, n) in enumerate(zip(in_shape, out_shape)))


def tt_to_dense(cores: Sequence[torch.Tensor]) -> torch.Tensor:
    """Contract TT cores (TedNet layout) into the dense ``(prod n, prod m)`` weight."""
    t = cores[0]  # [m1 x n1 x r1]
    for core in cores[1:-1]:
        # [M x N x r] , [m x n x r x s] -> [M m x N n x s] (row-major multi-indices)
        a, b, _ = t.shape
        m, n, _, s = core.shape
        t = torch.einsum("abr,cdrs->acbds", t, core).reshape(a * m, b * n, s)
    a, b, _ = t.shape
    m, n, _ = cores[-1].shape
    w_t = torch.einsum("abr,cdr->acbd", t, cores[-1]).reshape(a * m, b * n)
    return w_t.t()  # [in x out] -> [out x in]


def tt_columns(cores: Sequence[torch.Tensor], ids: torch.Tensor) -> torch.Tensor:
    """Columns ``ids`` of :func:`tt_to_dense` ``(cores)``, as rows ``[len(ids) x prod n]``, from
    the cores alone: each id's multi-index over the input modes (row-major) picks one slice of
    every core, and the slices are contracted per id. Costs ``len(ids)`` small products instead
    of the whole matrix (a lookup in a TT-factorized table; ONNX: Gather, Mod, Div, Einsum)."""
    in_shape = [int(c.shape[0]) for c in cores]
    idx, rest = [], ids
    for m in reversed(in_shape[1:]):  # row-major: the last mode varies fastest
        idx.append(torch.remainder(rest, m))
        rest = torch.div(rest, m, rounding_mode="floor")
    idx.append(rest)
    idx.reverse()
    t = cores[0].index_select(0, idx[0])  # [T x n1 x r1]
    for core, i in zip(cores[1:-1], idx[1:-1]):
        c = core.index_select(0, i)  # [T x n x r x s]
        t = torch.einsum("tar,tbrs->tabs", t, c)
        t = t.reshape(-1, int(t.shape[1]) * int(t.shape[2]), int(t.shape[3]))  # [T x N n x s]
    t = torch.einsum("tar,tcr->tac", t, cores[-1].index_select(0, idx[-1]))  # [T x N x n_d]
    return t.reshape(-1, int(t.shape[1]) * int(t.shape[2]))


@torch.no_grad()
def tt_svd(
    weight: torch.Tensor,
    in_shape: Sequence[int],
    out_shape: Sequence[int],
    ranks: int | Sequence[int],
) -> tuple[list[torch.Tensor], float]:
    """TT-SVD of a matrix into TedNet-layout cores (sequential truncated SVD, float32).

    Exact when ``ranks == max_tt_ranks(in_shape, out_shape)``. The cores are rescaled to equal
    Frobenius norms (the product is unchanged), which trains better than left-orthogonal cores.

    Parameters
    ----------
    weight : torch.Tensor
        ``(prod n, prod m)`` = ``(out, in)``.
    in_shape, out_shape : sequence of int
        ``[m1..md]``, ``[n1..nd]``.
    ranks : int or sequence of int
        ``d - 1`` TT ranks.

    Returns
    -------
    cores : list of torch.Tensor
        float32 cores ``(m1, n1, r1)``, ``(m_i, n_i, r(i-1), r_i)``, ``(m_d, n_d, r(d-1))``.
    kept_energy : float
        ``1 - ||W - W_tt||^2 / ||W||^2``.

    Raises
    ------
    ValueError
        If shapes do not match ``weight`` or a rank exceeds what the sequential unfolding can
        carry (``r_k <= r(k-1) m_k n_k``).
    """
    in_shape, out_shape = list(in_shape), list(out_shape)
    ranks = check_tt_shapes(in_shape, out_shape, ranks, weight.shape[1], weight.shape[0])
    d = len(in_shape)
    w = weight.detach().float()
    # (n1..nd, m1..md) -> (m1, n1, m2, n2, ..., md, nd)
    t = w.reshape(*out_shape, *in_shape)
    t = t.permute(*[p for k in range(d) for p in (d + k, k)]).contiguous()
    full = [1] + ranks + [1]
    cores: list[torch.Tensor] = []
    rest = t.reshape(-1)
    for k in range(d - 1):
        mat = rest.reshape(full[k] * in_shape[k] * out_shape[k], -1)
        if full[k + 1] > min(mat.shape):
            raise ValueError(
                f"TT rank r{k + 1}={full[k + 1]} exceeds the rank {min(mat.shape)} available "
                f"after truncating the previous ranks to {ranks[:k]} (in_shape={in_shape}, "
                f"out_shape={out_shape}); lower it"
            )
        u, s, vh = torch.linalg.svd(mat, full_matrices=False)
        r = full[k + 1]
        core = u[:, :r].reshape(full[k], in_shape[k], out_shape[k], r)
        core = core.permute(1, 2, 0, 3)  # [r(k-1) x m x n x r] -> [m x n x r(k-1) x r]
        cores.append(core[:, :, 0, :] if k == 0 else core)
        rest = s[:r, None] * vh[:r]
    last = rest.reshape(full[d - 1], in_shape[-1], out_shape[-1]).permute(1, 2, 0)
    cores.append(last)
    norms = [c.norm() for c in cores]
    if all(nrm > 0 for nrm in norms):
        geo = torch.exp(torch.stack([nrm.log() for nrm in norms]).mean())
        cores = [c * (geo / nrm) for c, nrm in zip(cores, norms)]
    cores = [c.contiguous() for c in cores]
    total = float(w.double().pow(2).sum())
    err = float((tt_to_dense(cores) - w).double().pow(2).sum())
    kept = 1.0 - err / total if total > 0 else 1.0
    return cores, kept


class TTLinear(nn.Module):
    """Tensor-train matrix replacement for ``nn.Linear(prod(in_shape), prod(out_shape))``.

    Parameters
    ----------
    in_shape : sequence of int
        ``[m1..md]``, ``d >= 2``; ``in_features = prod(in_shape)``.
    out_shape : sequence of int
        ``[n1..nd]``; ``out_features = prod(out_shape)``.
    ranks : int or sequence of int
        ``[r1..r(d-1)]`` (an int is used for every bond), each in ``[1, max_tt_ranks]``.
    bias : bool
        Whether to learn an output bias ``(out,)``.

    Attributes
    ----------
    cores : nn.ParameterList
        ``(m1, n1, r1)``, ``(m_i, n_i, r(i-1), r_i)``..., ``(m_d, n_d, r(d-1))``.
    bias : nn.Parameter or None
        ``(out,)``.
    rank : list of int
        The TT ranks.
    kept_energy : float or None
        Set by :meth:`from_linear`.

    Notes
    -----
    From-scratch init (TedNet): every core ``N(0, s^2)`` with ``s = (prod_i v_i)^(1/(2d))``,
    ``v_0 = 1/m1``, ``v_i = 1/(m_i r(i-1))``; the reconstructed ``W`` then has
    ``Var(W) = 1 / in_features`` (nn.Linear's default gives ``1 / (3 in)``). The bias is
    ``U(-1/sqrt(in), 1/sqrt(in))`` as in nn.Linear.
    """

    def __init__(
        self,
        in_shape: Sequence[int],
        out_shape: Sequence[int],
        ranks: int | Sequence[int],
        bias: bool = True,
    ):
        super().__init__()
        self.in_shape = [int(m) for m in in_shape]
        self.out_shape = [int(n) for n in out_shape]
        self.rank = check_tt_shapes(self.in_shape, self.out_shape, ranks)
        self.in_features = math.prod(self.in_shape)
        self.out_features = math.prod(self.out_shape)
        self.kept_energy: float | None = None
        full = [1] + self.rank + [1]
        d = len(self.in_shape)
        shapes = []
        for k in range(d):
            m, n = self.in_shape[k], self.out_shape[k]
            if k == 0:
                shapes.append((m, n, full[1]))
            elif k < d - 1:
                shapes.append((m, n, full[k], full[k + 1]))
            else:
                shapes.append((m, n, full[k]))
        self.cores = nn.ParameterList([nn.Parameter(torch.empty(s)) for s in shapes])
        self.bias = nn.Parameter(torch.empty(self.out_features)) if bias else None
        self.reset_parameters()

    def reset_parameters(self, target_var: float | None = None) -> None:
        """Init cores so that ``Var(W) = target_var`` (default ``1 / in_features``)."""
        d = len(self.in_shape)
        if target_var is None:
            log_prod_v = -math.log(self.in_shape[0]) - sum(
                math.log(self.in_shape[k] * self.rank[k - 1]) for k in range(1, d)
            )
        else:
            log_prod_v = math.log(target_var) - sum(math.log(r) for r in self.rank)
        std = math.exp(log_prod_v / (2 * d))
        for core in self.cores:
            nn.init.normal_(core, std=std)
        init_bias_like_linear(self.bias, self.in_features)

    @staticmethod
    def num_params(
        in_shape: Sequence[int],
        out_shape: Sequence[int],
        ranks: int | Sequence[int],
        bias: bool = True,
    ) -> int:
        """Exact count: ``sum_k r(k-1) m_k n_k r_k + out`` (the last term if ``bias``)."""
        ranks = check_tt_shapes(in_shape, out_shape, ranks)
        return tt_num_params(in_shape, out_shape, ranks) + (math.prod(out_shape) if bias else 0)

    @classmethod
    def from_linear(
        cls,
        linear: nn.Linear,
        in_shape: Sequence[int] | None = None,
        out_shape: Sequence[int] | None = None,
        ranks: int | Sequence[int] | None = None,
        num_cores: int = 3,
    ) -> TTLinear:
        """TT-SVD of a trained ``nn.Linear`` (copies the bias).

        Parameters
        ----------
        linear : nn.Linear
            Weight ``(out, in)``.
        in_shape, out_shape : sequence of int, optional
            Default: :func:`factorize_dim` of ``in`` into ``num_cores`` factors and of ``out``
            into as many factors as ``in_shape`` has.
        ranks : int or sequence of int, optional
            Default: :func:`max_tt_ranks` (exact reconstruction).
        num_cores : int
            Used only when a shape is not given.

        Returns
        -------
        TTLinear
            On the layer's device and dtype, with ``kept_energy`` set.
        """
        weight = linear.weight
        out_f, in_f = weight.shape
        in_shape = list(in_shape) if in_shape is not None else factorize_dim(in_f, num_cores)
        if out_shape is None:
            out_shape = factorize_dim(out_f, len(in_shape))
        if ranks is None:
            ranks = max_tt_ranks(in_shape, out_shape)
        check_tt_shapes(in_shape, out_shape, ranks, in_f, out_f)
        cores, kept = tt_svd(weight, in_shape, out_shape, ranks)
        layer = cls(in_shape, out_shape, ranks, bias=linear.bias is not None)
        layer.to(device=weight.device, dtype=weight.dtype)
        with torch.no_grad():
            for p, c in zip(layer.cores, cores):
                p.copy_(c)
            if linear.bias is not None:
                layer.bias.copy_(linear.bias)
        layer.kept_energy = kept
        return layer

    def to_dense(self) -> torch.Tensor:
        """The equivalent dense weight, shape ``(out, in)``."""
        return tt_to_dense(list(self.cores))

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
        res = x.reshape(-1, *self.in_shape)  # [... x in] -> [N x m1 x ... x md]
        cores = list(self.cores)
        # [N x m1 x m2.. x md] -> [N x m2.. x md x n1 x r1]
        res = torch.tensordot(res, cores[0], dims=([1], [0]))
        for core in cores[1:]:
            # [N x m_k.. x md x n1..n(k-1) x r] -> [N x m(k+1).. x md x n1..n_k x r_k]
            res = torch.tensordot(res, core, dims=([1, res.dim() - 1], [0, 2]))
        y = res.reshape(-1, self.out_features)  # [N x n1 x ... x nd] -> [N x out]
        if self.bias is not None:
            y = y + self.bias
        return y.view(*lead, self.out_features)

    def extra_repr(self) -> str:
        return (
            f"in_shape={self.in_shape}, out_shape={self.out_shape}, ranks={self.rank}, "
            f"bias={self.bias is not None}"
        )
