"""Data-aware compactor initialisation (DA-WID Sec. 3.2, Eq. 8-12, Appendix A).

Every function takes features with one row per calibration token and returns compactors whose
rows are ordered by importance (the first ``k`` rows span the best rank-``k`` approximation), so
a mask that keeps ``k`` dimensions keeps the principal components. WID's identity
initialisation (the ablation) is :func:`identity_compactors`.

- LayerNorm sites (Eq. 10-12): ``U`` from ``SVD(X)`` of the LayerNorm's input ``X`` (d x N);
  ``C_in = U^T``, ``C_out = diag(gamma) U`` with bias ``beta`` (Eq. 12: ``LN(X) ~ gamma U
  LN^(U^T X) + beta``).
- Query/key (Eq. 8, Appendix A.1, DRONE's solution): with ``Q = W_Q X = U_Q S_Q V_Q^T`` and
  ``K = W_K X = U_K S_K V_K^T``, ``M = S_Q U_Q^T U_K S_K = U_M S_M V_M^T``;
  ``C_Q = S_M^1/2 U_M^T S_Q^-1 U_Q^T`` and ``C_K = S_M^1/2 V_M^T S_K^-1 U_K^T``. Then
  ``C_Q^T C_K = I`` (the attention scores are unchanged) and keeping the first ``k`` rows of
  both gives the best rank-``k`` approximation of the score matrix ``Q^T K``. (The paper prints
  ``V_M`` where ``V_M^T`` is meant: only that choice gives ``C_Q^T C_K = I``.)
- Value/output (Eq. 9, Appendix A.2, the paper's "easily implementable" solution): ``U`` from
  ``SVD(W_V X S)``, the per-head attention outputs; ``C_V = U^T``, ``C_O = U``.

Plain PyTorch, no fairseq import.
"""

from __future__ import annotations

import torch

__all__ = [
    "identity_compactors",
    "qk_compactors",
    "site_compactors",
    "vo_compactors",
]

_RCOND = 1e-6  # singular values below rcond * largest are treated as rcond * largest


def _check(features: torch.Tensor, width: int, what: str) -> torch.Tensor:
    if features.dim() != 2 or features.shape[1] != width:
        raise ValueError(
            f"{what}: expected features of shape (N, {width}), got {tuple(features.shape)}"
        )
    if features.shape[0] < width:
        raise ValueError(
            f"{what}: {features.shape[0]} calibration tokens cannot span width {width} "
            "(give at least as many calibration tokens as the widest dimension)"
        )
    return features.detach().to(torch.float64)


def _left_vectors(features: torch.Tensor):
    """``U, S`` of ``features^T`` (d x N): columns of U are principal directions."""
    u, s, _ = torch.linalg.svd(features.T, full_matrices=False)
    return u, s


def _safe_inverse(s: torch.Tensor) -> torch.Tensor:
    floor = float(s.max()) * _RCOND if s.numel() and float(s.max()) > 0 else 1.0
    return 1.0 / s.clamp_min(floor)


def site_compactors(features: torch.Tensor, gamma: torch.Tensor, beta: torch.Tensor):
    """``(C_in, C_out, bias)`` of a LayerNorm site from its input features (N, d) (Eq. 10-12)."""
    d = gamma.numel()
    x = _check(features, d, "LayerNorm site")
    u, _ = _left_vectors(x)  # [d x d]
    c_in = u.T
    c_out = gamma.detach().to(torch.float64)[:, None] * u
    return c_in.float(), c_out.float(), beta.detach().clone().float()


def qk_compactors(queries: torch.Tensor, keys: torch.Tensor):
    """``(C_Q, C_K)`` of one head from its queries (N_q, d_h) and keys (N_k, d_h) (Eq. 8, 19-20)."""
    dh = queries.shape[1]
    q = _check(queries, dh, "query/key compactor")
    k = _check(keys, dh, "query/key compactor")
    uq, sq = _left_vectors(q)
    uk, sk = _left_vectors(k)
    m = sq[:, None] * (uq.T @ uk) * sk[None, :]  # [d_h x d_h]
    um, sm, vmh = torch.linalg.svd(m)
    root = sm.sqrt()
    c_q = root[:, None] * um.T * _safe_inverse(sq)[None, :] @ uq.T
    c_k = root[:, None] * vmh * _safe_inverse(sk)[None, :] @ uk.T
    return c_q.float(), c_k.float()


def vo_compactors(contexts: torch.Tensor):
    """``(C_V, C_O)`` of one head from its attention outputs ``W_V X S`` (N, d_h) (Eq. 9, 21)."""
    dh = contexts.shape[1]
    u, _ = _left_vectors(_check(contexts, dh, "value/output compactor"))
    return u.T.float(), u.float()


def identity_compactors(d: int):
    """WID's initialisation: an identity matrix (d x d)."""
    return torch.eye(d)
