"""Factorized token embeddings with fairseq's ``nn.Embedding`` interface.

Both classes expose ``num_embeddings``, ``embedding_dim``, ``padding_idx`` and a ``weight``
property ``(V, d)`` (the full table, padding row zero) so that a decoder can tie its output
projection with ``F.linear(x, embed_tokens.weight)``. ``weight`` is a computed tensor, not an
``nn.Parameter``: assigning it to ``nn.Linear.weight`` fails, use ``F.linear`` instead.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import torch
import torch.nn.functional as F
from torch import nn

from lightcompress.modules.hybrid import dense_columns
from lightcompress.modules.lowrank import resolve_rank, svd_factors
from lightcompress.modules.tensor_train import (
    TTLinear,
    check_tt_shapes,
    factorize_dim,
    max_tt_ranks,
    pad_factorize,
    tt_columns,
    tt_num_params,
    tt_svd,
    tt_to_dense,
)

__all__ = ["HTTEmbedding", "LowRankEmbedding"]


def _zero_row(table: torch.Tensor, padding_idx: int | None) -> torch.Tensor:
    """Out-of-place: ``table`` with row ``padding_idx`` set to zero (differentiable)."""
    if padding_idx is None:
        return table
    return table.index_fill(0, torch.tensor([padding_idx], device=table.device), 0.0)


def _check_padding(num_embeddings: int, padding_idx: int | None) -> int | None:
    if padding_idx is None:
        return None
    if padding_idx < 0:
        padding_idx += num_embeddings
    if not 0 <= padding_idx < num_embeddings:
        raise ValueError(f"padding_idx must be within num_embeddings={num_embeddings}")
    return padding_idx


class LowRankEmbedding(nn.Module):
    """``E = A B``: a ``V x r`` table times an ``r x d`` projection.

    Parameters
    ----------
    num_embeddings : int
        Vocabulary size ``V``.
    embedding_dim : int
        ``d``.
    rank : int
        ``r`` in ``[1, min(V, d)]``.
    padding_idx : int, optional
        Row kept at zero in lookups and in :attr:`weight`.

    Attributes
    ----------
    u : nn.Parameter
        ``(V, r)`` table (its padding row is zero and gets no gradient).
    v : nn.Parameter
        ``(r, d)`` projection.
    rank : int
    kept_energy : float or None
        Set by :meth:`from_embedding`.

    Notes
    -----
    From-scratch init matches fairseq's ``Embedding``, ``Var(E) = 1 / d``: ``u`` and ``v`` are
    ``N(0, s^2)`` with ``s^4 r = 1 / d``; the padding row of ``u`` is zero.
    """

    def __init__(
        self,
        num_embeddings: int,
        embedding_dim: int,
        rank: int,
        padding_idx: int | None = None,
    ):
        super().__init__()
        self.num_embeddings = int(num_embeddings)
        self.embedding_dim = int(embedding_dim)
        self.padding_idx = _check_padding(self.num_embeddings, padding_idx)
        self.rank = resolve_rank(self.num_embeddings, self.embedding_dim, rank=rank)
        self.kept_energy: float | None = None
        self.u = nn.Parameter(torch.empty(self.num_embeddings, self.rank))
        self.v = nn.Parameter(torch.empty(self.rank, self.embedding_dim))
        self.reset_parameters()

    def reset_parameters(self) -> None:
        """From-scratch init with ``Var(E) = 1 / d`` and a zero padding row."""
        std = (1.0 / (self.embedding_dim * self.rank)) ** 0.25
        nn.init.normal_(self.u, std=std)
        nn.init.normal_(self.v, std=std)
        if self.padding_idx is not None:
            with torch.no_grad():
                self.u[self.padding_idx].zero_()

    @staticmethod
    def num_params(num_embeddings: int, embedding_dim: int, rank: int) -> int:
        """Exact count: ``r (V + d)``."""
        return rank * (num_embeddings + embedding_dim)

    @classmethod
    def from_embedding(
        cls,
        emb: nn.Embedding,
        rank: int | None = None,
        ratio: float | None = None,
        energy: float | None = None,
    ) -> LowRankEmbedding:
        """Truncated SVD of a trained table; see ``resolve_rank``.

        The padding row is factorized like any other row: lookups of the padding index still
        return zeros, but when the table is tied to the output projection fairseq trains that
        row as the padding token's output vector, and keeping it makes a full-rank transfer
        reproduce the dense model's logits exactly.
        """
        w = emb.weight.detach().float().clone()
        pad = _check_padding(w.shape[0], emb.padding_idx)
        s = torch.linalg.svdvals(w) if energy is not None else None
        k = resolve_rank(*w.shape, rank=rank, ratio=ratio, energy=energy, singular_values=s)
        u, v, kept = svd_factors(w, k)
        layer = cls(w.shape[0], w.shape[1], k, pad)
        layer.to(device=emb.weight.device, dtype=emb.weight.dtype)
        with torch.no_grad():
            layer.u.copy_(u)
            layer.v.copy_(v)
        layer.kept_energy = kept
        return layer

    @property
    def weight(self) -> torch.Tensor:
        """The full table ``(V, d)``, padding row zero (for output-projection tying)."""
        return _zero_row(self.u @ self.v, self.padding_idx)

    def to_dense(self) -> torch.Tensor:
        """Same as :attr:`weight`."""
        return self.weight

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        """Look up ``tokens`` ``(...)`` -> ``(..., d)``; padding positions are zero."""
        h = F.embedding(tokens, self.u, self.padding_idx)  # [B x T] -> [B x T x r]
        y = h @ self.v  # [B x T x r] -> [B x T x d]
        if self.padding_idx is not None:
            y = y.masked_fill(tokens.eq(self.padding_idx).unsqueeze(-1), 0.0)
        return y

    def extra_repr(self) -> str:
        return (
            f"{self.num_embeddings}, {self.embedding_dim}, rank={self.rank}, "
            f"padding_idx={self.padding_idx}"
        )


class HTTEmbedding(nn.Module):
    """Hybrid tensor-train embedding (Hypoformer): ``E = [E_dense | E_tt]`` over columns.

    ``E_dense`` is a ``V x D_d`` table with ``D_d = floor(alpha d + 0.5)``; ``E_tt`` is the
    ``V x (d - D_d)`` table of a TT matrix over a padded vocabulary ``V_pad = prod(vocab_shape)
    >= V`` (rows ``>= V`` are dropped).

    Parameters
    ----------
    num_embeddings : int
        ``V``.
    embedding_dim : int
        ``d``.
    alpha : float
        Dense share of the columns, in ``[0, 1]``.
    ranks : int or sequence of int
        TT ranks (ignored when ``alpha`` leaves no TT columns).
    padding_idx : int, optional
        Row kept at zero in lookups and in :attr:`weight`.
    vocab_shape : sequence of int, optional
        Vocabulary modes, ``prod >= V``; default :func:`pad_factorize` of ``V``.
    dim_shape : sequence of int, optional
        Modes of ``d - D_d``; default :func:`factorize_dim`.
    num_cores : int
        Cores used when a shape is not given.

    Attributes
    ----------
    dense : nn.Parameter or None
        ``(V, D_d)``.
    tt : TTLinear or None
        Bias-free TT matrix whose ``to_dense()`` is ``(d - D_d, V_pad)``; its transpose gives
        the TT table.

    Notes
    -----
    From-scratch init: ``Var(E) = 1 / d`` as fairseq's ``Embedding`` (normal dense part, TT
    cores scaled so that the TT table has the same variance); the padding row is zero.

    Lookups build the full table. In training mode (or whenever autograd is recording) it is
    rebuilt at every call. In eval mode under ``torch.no_grad()`` it is built once and cached;
    the cache is dropped by ``train()`` and rebuilt when any parameter changes in place
    (optimizer step, ``load_state_dict``: detected through the tensors' version counters) or
    moves (``.to()``).
    """

    def __init__(
        self,
        num_embeddings: int,
        embedding_dim: int,
        alpha: float,
        ranks: int | Sequence[int],
        padding_idx: int | None = None,
        vocab_shape: Sequence[int] | None = None,
        dim_shape: Sequence[int] | None = None,
        num_cores: int = 3,
    ):
        super().__init__()
        self.num_embeddings = int(num_embeddings)
        self.embedding_dim = int(embedding_dim)
        self.alpha = float(alpha)
        self.padding_idx = _check_padding(self.num_embeddings, padding_idx)
        cfg = self._config(
            self.num_embeddings,
            self.embedding_dim,
            alpha,
            ranks,
            vocab_shape,
            dim_shape,
            num_cores,
        )
        self.num_dense = cfg["num_dense"]
        self.kept_energy: float | None = None
        self.dense = (
            nn.Parameter(torch.empty(self.num_embeddings, self.num_dense))
            if self.num_dense
            else None
        )
        self.tt = None
        self.rank = None
        if cfg["num_tt"]:
            self.tt = TTLinear(cfg["vocab_shape"], cfg["dim_shape"], cfg["ranks"], bias=False)
            self.rank = self.tt.rank
        self._cache: torch.Tensor | None = None
        self._cache_key: tuple | None = None
        self.table_builds = 0  # how many times the full table was built (for tests/profiling)
        self.reset_parameters()

    @staticmethod
    def _config(v, d, alpha, ranks, vocab_shape, dim_shape, num_cores) -> dict:
        nd = dense_columns(alpha, d)
        nt = d - nd
        cfg = {"num_dense": nd, "num_tt": nt}
        if nt == 0:
            return cfg
        vocab_shape = list(vocab_shape) if vocab_shape is not None else pad_factorize(v, num_cores)
        if math.prod(vocab_shape) < v:
            raise ValueError(
                f"vocab_shape {'x'.join(map(str, vocab_shape))} has product "
                f"{math.prod(vocab_shape)} < num_embeddings={v}"
            )
        if dim_shape is None:
            dim_shape = factorize_dim(nt, len(vocab_shape))
        cfg["vocab_shape"], cfg["dim_shape"] = vocab_shape, list(dim_shape)
        try:
            cfg["ranks"] = check_tt_shapes(vocab_shape, dim_shape, ranks, None, nt)
        except ValueError as exc:
            raise ValueError(
                f"{exc} (dim_shape covers the last {nt} of {d} embedding columns, alpha={alpha})"
            ) from None
        return cfg

    def reset_parameters(self) -> None:
        """From-scratch init with ``Var(E) = 1 / d`` and a zero padding row."""
        var = 1.0 / self.embedding_dim
        if self.dense is not None:
            nn.init.normal_(self.dense, std=var**0.5)
            if self.padding_idx is not None:
                with torch.no_grad():
                    self.dense[self.padding_idx].zero_()
        if self.tt is not None:
            self.tt.reset_parameters(target_var=var)
        self._cache = None

    @staticmethod
    def num_params(
        num_embeddings: int,
        embedding_dim: int,
        alpha: float,
        ranks: int | Sequence[int],
        vocab_shape: Sequence[int] | None = None,
        dim_shape: Sequence[int] | None = None,
        num_cores: int = 3,
    ) -> int:
        """Exact count: ``V D_d + sum_k r(k-1) v_k e_k r_k``."""
        cfg = HTTEmbedding._config(
            num_embeddings,
            embedding_dim,
            alpha,
            ranks,
            vocab_shape,
            dim_shape,
            num_cores,
        )
        total = num_embeddings * cfg["num_dense"]
        if cfg["num_tt"]:
            total += tt_num_params(cfg["vocab_shape"], cfg["dim_shape"], cfg["ranks"])
        return total

    @classmethod
    def from_embedding(
        cls,
        emb: nn.Embedding,
        alpha: float,
        ranks: int | Sequence[int] | None = None,
        vocab_shape: Sequence[int] | None = None,
        dim_shape: Sequence[int] | None = None,
        num_cores: int = 3,
    ) -> HTTEmbedding:
        """Copy the first ``D_d`` columns; TT-SVD of the rest (zero-padded to ``V_pad`` rows).

        ``ranks=None`` uses the maximal TT ranks (exact reconstruction).
        """
        w = emb.weight.detach().float().clone()
        v, d = w.shape
        pad = _check_padding(v, emb.padding_idx)
        if pad is not None:
            w[pad] = 0
        nd = dense_columns(alpha, d)
        cores, kept_tt = None, 1.0
        if d - nd:
            if vocab_shape is None:
                vocab_shape = pad_factorize(v, num_cores)
            if dim_shape is None:
                dim_shape = factorize_dim(d - nd, len(vocab_shape))
            if ranks is None:
                ranks = max_tt_ranks(vocab_shape, dim_shape)
            table = torch.zeros(math.prod(vocab_shape), d - nd)
            table[:v] = w[:, nd:]
            cores, kept_tt = tt_svd(table.t(), vocab_shape, dim_shape, ranks)
        layer = cls(v, d, alpha, ranks if ranks is not None else 1, pad, vocab_shape, dim_shape)
        layer.to(device=emb.weight.device, dtype=emb.weight.dtype)
        with torch.no_grad():
            if layer.dense is not None:
                layer.dense.copy_(w[:, :nd])
            if cores is not None:
                for p, c in zip(layer.tt.cores, cores):
                    p.copy_(c)
        total = float(w.double().pow(2).sum())
        lost = (1.0 - kept_tt) * float(w[:, nd:].double().pow(2).sum())
        layer.kept_energy = 1.0 - lost / total if total > 0 else 1.0
        return layer

    def _build_table(self) -> torch.Tensor:
        parts = []
        if self.dense is not None:
            parts.append(self.dense)
        if self.tt is not None:
            # [d_tt x V_pad] -> [V x d_tt]
            parts.append(tt_to_dense(list(self.tt.cores)).t()[: self.num_embeddings])
        table = parts[0] if len(parts) == 1 else torch.cat(parts, 1)  # [V x d]
        self.table_builds += 1
        return _zero_row(table, self.padding_idx)

    def _key(self) -> tuple:
        return tuple((id(p), p.data_ptr(), p._version, p.dtype) for p in self.parameters())

    def train(self, mode: bool = True) -> HTTEmbedding:
        self._cache = None
        return super().train(mode)

    @property
    def weight(self) -> torch.Tensor:
        """The full table ``(V, d)``, padding row zero (cached in eval mode under no_grad).

        Traced (the ONNX export), it is built from the factors in the graph: the export stores
        the factors, not the table, and ONNX Runtime folds the table into one constant when it
        loads the graph (decoding does the same work)."""
        if self.training or torch.is_grad_enabled() or torch.jit.is_tracing():
            self._cache = None
            return self._build_table()
        key = self._key()
        if self._cache is None or self._cache_key != key:
            self._cache = self._build_table()
            self._cache_key = key
        return self._cache

    def to_dense(self) -> torch.Tensor:
        """The full table ``(V, d)`` (always rebuilt, differentiable)."""
        return self._build_table()

    def lookup(self, tokens: torch.Tensor) -> torch.Tensor:
        """``tokens`` ``(...)`` -> ``(..., d)`` from the factors, without the full table: the dense
        part's rows and the TT part's rows of those tokens alone (:func:`tt_columns`); padding
        positions zero. Equal to :meth:`forward` up to float rounding (another order of the same
        products). The ONNX export traces this, so that the export stores the factors (the
        compressed size) rather than the table a traced :meth:`forward` would fold into it."""
        flat = tokens.reshape(-1)
        parts = []
        if self.dense is not None:
            parts.append(self.dense.index_select(0, flat))
        if self.tt is not None:
            parts.append(tt_columns(list(self.tt.cores), flat))
        rows = parts[0] if len(parts) == 1 else torch.cat(parts, 1)  # [T x d]
        if self.padding_idx is not None:
            rows = rows * flat.ne(self.padding_idx).unsqueeze(1).to(rows.dtype)
        if tokens.dim() == 1:
            return rows
        return rows.reshape(tokens.shape + (self.embedding_dim,))

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        """Look up ``tokens`` ``(...)`` -> ``(..., d)``; padding positions are zero. Under the
        ONNX exporter: :meth:`lookup` (the rows from the factors)."""
        if torch.onnx.is_in_onnx_export():
            return self.lookup(tokens)
        return F.embedding(tokens, self.weight, self.padding_idx)  # [B x T] -> [B x T x d]

    def extra_repr(self) -> str:
        return (
            f"{self.num_embeddings}, {self.embedding_dim}, alpha={self.alpha}, "
            f"num_dense={self.num_dense}, padding_idx={self.padding_idx}"
        )
