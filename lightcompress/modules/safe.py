"""Subformer's plain-PyTorch pieces: head rule, sandwich projections, SAFE output reduction.

The SAFE block itself (a width-``r`` Transformer layer whose FFN ends at ``d_model``) is a
subclass of fairseq's layer in :mod:`lightcompress.models.subformer_layers`, because it must share
fairseq's attention and incremental-decoding state; everything around it lives here.

Shapes follow fairseq: ``T x B x C`` inside the stacks, ``B x T x C`` at the output layer.
"""

from __future__ import annotations

import torch
from torch import nn

__all__ = [
    "OutputReduction",
    "QueryProjectedAttention",
    "SandwichProjection",
    "bert_init_",
    "bert_init_model_",
    "fairseq_token_tables_",
    "safe_num_params",
    "subformer_heads",
]


def subformer_heads(dim: int) -> int:
    """Number of attention heads of a Subformer block of width ``dim`` (the authors' rule).

    Heads of 64 dimensions; above 1024 heads of 128; widths that are not a multiple of 64
    get about 10 heads (``dim // (dim // 10)``), and 640 gets 8 heads of 80.

    >>> [subformer_heads(d) for d in (192, 256, 320, 350, 512, 640, 768, 1024, 2048)]
    [3, 4, 5, 10, 8, 8, 12, 16, 16]
    """
    if dim < 1:
        raise ValueError(f"width must be positive, got {dim}")
    if dim == 640:
        return 8
    if dim % 64 == 0:
        return dim // (128 if dim > 1024 else 64)
    return dim // max(1, dim // 10)


class SandwichProjection(nn.Sequential):
    """``Linear(d_in, d_out) -> Dropout(p) -> LayerNorm(d_out)`` between model and sandwich width.

    Subformer projects up once before the shared middle layers and down once before the last
    layer (``p = 0.05`` in the authors' code).

    Parameters
    ----------
    in_dim, out_dim : int
    dropout : float

    Shapes: ``(..., in_dim) -> (..., out_dim)``.
    """

    def __init__(self, in_dim: int, out_dim: int, dropout: float = 0.05):
        super().__init__(nn.Linear(in_dim, out_dim), nn.Dropout(dropout), nn.LayerNorm(out_dim))
        self.in_dim, self.out_dim = in_dim, out_dim


class OutputReduction(nn.Module):
    """Decoder output ``d_model -> r`` before the tied ``V x r`` table (SAFE models).

    ``kind="linear"``: one ``Linear(d, r)`` (what the authors' code builds and what reproduces
    the paper's parameter counts). ``kind="mlp"``: the paper's two-layer MLP
    ``W2 (W1 x + b1) + b2`` with ``W1: d -> 2r``, ``W2: 2r -> r`` (no nonlinearity, as written).

    Shapes: ``(B, T, d) -> (B, T, r)``.
    """

    KINDS = ("linear", "mlp")

    def __init__(self, model_dim: int, reduction_dim: int, kind: str = "linear"):
        super().__init__()
        if kind not in self.KINDS:
            raise ValueError(f"output reduction must be one of {self.KINDS}, got {kind!r}")
        self.kind = kind
        if kind == "linear":
            self.proj = nn.Linear(model_dim, reduction_dim)
        else:
            self.proj = nn.Sequential(
                nn.Linear(model_dim, 2 * reduction_dim),
                nn.Linear(2 * reduction_dim, reduction_dim),
            )

    def forward(self, x):
        return self.proj(x)


class QueryProjectedAttention(nn.Module):
    """Cross-attention at the encoder's width for a decoder layer of another width.

    Subformer's wide sandwich layers (``d_s``) attend to the encoder output (``d``): the query
    goes through ``Linear(d_s, d) + LayerNorm(d)``, the attention runs at width ``d`` and its
    output comes back through ``Linear(d, d_s) + LayerNorm(d_s)``; the residual stays in
    ``d_s``.

    Parameters
    ----------
    attention : nn.Module
        Called as ``attention(query=q, key=k, value=v, **kwargs) -> (out, weights)`` with
        ``q`` of width ``attn_dim`` (fairseq's ``MultiheadAttention``).
    query_dim, attn_dim : int

    Shapes: query ``(T, B, query_dim)`` -> ``(T, B, attn_dim)`` -> output ``(T, B, query_dim)``.
    """

    def __init__(self, attention: nn.Module, query_dim: int, attn_dim: int):
        super().__init__()
        self.attention = attention
        self.project_query = nn.Sequential(nn.Linear(query_dim, attn_dim), nn.LayerNorm(attn_dim))
        self.project_back = nn.Sequential(nn.Linear(attn_dim, query_dim), nn.LayerNorm(query_dim))

    def forward(self, query, key, value, **kwargs):
        out, weights = self.attention(
            query=self.project_query(query), key=key, value=value, **kwargs
        )
        return self.project_back(out), weights


def bert_init_(module: nn.Module) -> None:
    """BERT initialisation of one module (use with ``model.apply``), in place.

    ``nn.Linear`` / ``nn.Embedding`` weights ~ N(0, 0.02), biases 0, the padding row of an
    embedding 0. LayerNorms keep gamma = 1, beta = 0. Attention projections are
    ``nn.Linear`` and are covered.
    """
    if isinstance(module, nn.Linear):
        nn.init.normal_(module.weight, mean=0.0, std=0.02)
        if module.bias is not None:
            nn.init.zeros_(module.bias)
    elif isinstance(module, nn.Embedding):
        nn.init.normal_(module.weight, mean=0.0, std=0.02)
        if module.padding_idx is not None:
            module.weight.data[module.padding_idx].zero_()


def bert_init_model_(model: nn.Module) -> nn.Module:
    """:func:`bert_init_` over every submodule of ``model``, padding rows zeroed last.

    ``model.apply`` visits modules in order, so a Linear visited after an embedding whose table it
    shares (a tied output projection) re-draws the table, padding row included; the padding rows
    of all embeddings are therefore zeroed once every module is initialised.
    """
    model.apply(bert_init_)
    with torch.no_grad():
        for m in model.modules():
            if isinstance(m, nn.Embedding) and m.padding_idx is not None:
                m.weight[m.padding_idx].zero_()
    return model


def fairseq_token_tables_(tables) -> None:
    """Re-draw each token table of ``tables`` (``nn.Embedding``; a table given twice, shared,
    once) as fairseq's ``Embedding`` draws it, N(0, dim^-1/2) with the padding row 0, in place:
    after fairseq's ``sqrt(dim)`` scaling its tokens start at unit scale against the sinusoidal
    positions (RMS 0.71), whatever the table's width."""
    seen = set()
    for emb in tables:
        if not isinstance(emb, nn.Embedding) or id(emb.weight) in seen:
            continue
        seen.add(id(emb.weight))
        with torch.no_grad():
            emb.weight.normal_(0.0, emb.embedding_dim**-0.5)
            if emb.padding_idx is not None:
                emb.weight[emb.padding_idx].zero_()


def safe_num_params(vocab: int, reduction_dim: int, model_dim: int, causal: bool = False) -> int:
    """Parameters of the SAFE embedding: ``V x r`` table plus the width-``r`` block.

    Attention ``4 r^2 + 4 r``, LayerNorm(r) ``2 r``, FFN ``r^2 + r + r d + d``,
    LayerNorm(d) ``2 d`` (the paper's footnote counts the weights as ``5 r^2 + r d``).
    ``causal`` does not change the count (the decoder block has no cross-attention).
    """
    del causal
    r, d = reduction_dim, model_dim
    block = (4 * r * r + 4 * r) + 2 * r + (r * r + r) + (r * d + d) + 2 * d
    return vocab * r + block
