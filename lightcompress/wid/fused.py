"""The layers of a fused DA-WID model: an ordinary post-LN Transformer layer whose widths differ
from layer to layer and from head to head (DA-WID Sec. 3.4, Eq. 17-18).

A block maps its input ``y`` (width ``a``, the previous LayerNorm's kept dimensions) to::

    LN_b(W_R y + b_R + sublayer(y))        # width b; W_R: the residual matrix where widths differ

Attention heads have their own query/key width and value width (the kept dimensions of their
compactors); the projections are concatenated over heads and split by a fixed index map, heads
padded with zeros to the widest one (zeros do not change the scores or the outputs). The
``1/sqrt(d_h)`` scaling and every mask value are folded into the weights, and every bias of a
sublayer's output is folded into ``b_R``. Step-by-step decoding keeps keys and values per head in
fairseq's incremental state.

The shape of a block is a dict (the ``--dawid-shapes`` JSON of the fused model)::

    {"kind": "self_attn" | "cross_attn" | "ffn", "in": a, "out": b, "kv": a_kv (cross only),
     "qk": [per-head query/key widths], "v": [per-head value widths], "ffn": f,
     "plain": true for the decoder's last block (the teacher's LayerNorm, width d)}
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from fairseq.incremental_decoding_utils import with_incremental_state
from torch import Tensor, nn

__all__ = [
    "FusedAttention",
    "FusedBlock",
    "FusedDecoderLayer",
    "FusedEncoderLayer",
    "FusedFFN",
    "block_params",
]


def _pad_index(widths: list[int]) -> tuple[Tensor, int]:
    """Index into ``[concat of heads | one zero column]`` giving ``[H x m]`` (m = max width)."""
    m = max(widths) if widths else 0
    total = sum(widths)
    idx, start = [], 0
    for w in widths:
        idx += list(range(start, start + w)) + [total] * (m - w)
        start += w
    return torch.tensor(idx, dtype=torch.long), m


def _unpad_index(widths: list[int]) -> Tensor:
    """Positions of the real entries in ``[H x m]`` flattened, in concatenation order."""
    m = max(widths) if widths else 0
    return torch.tensor(
        [h * m + j for h, w in enumerate(widths) for j in range(w)], dtype=torch.long
    )


@with_incremental_state
class FusedAttention(nn.Module):
    """Multi-head attention with per-head widths (module docstring).

    Parameters
    ----------
    in_dim, kv_dim, out_dim : int
        Widths of the query input, the key/value input and the output.
    qk, v : list of int
        Per-head query/key and value widths (a head with query/key width 0 attends uniformly).
    dropout : float
        Attention-probability dropout.
    """

    def __init__(self, in_dim, kv_dim, out_dim, qk, v, dropout=0.0, self_attention=True):
        super().__init__()
        if len(qk) != len(v) or not v:
            raise ValueError("an attention block needs at least one head and one width per head")
        self.num_heads = len(v)
        self.qk, self.v = list(qk), list(v)
        self.self_attention = self_attention
        self.dropout_p = float(dropout)
        sqk, sv = sum(qk), sum(v)
        self.q_proj = nn.Linear(in_dim, sqk) if sqk else None
        self.k_proj = nn.Linear(kv_dim, sqk) if sqk else None
        self.v_proj = nn.Linear(kv_dim, sv)
        self.out_proj = nn.Linear(sv, out_dim, bias=False)
        qk_idx, self.m_qk = _pad_index(self.qk)
        v_idx, self.m_v = _pad_index(self.v)
        self.register_buffer("qk_index", qk_idx, persistent=False)
        self.register_buffer("v_index", v_idx, persistent=False)
        self.register_buffer("v_unpad", _unpad_index(self.v), persistent=False)

    def _split(self, x: Tensor, index: Tensor, m: int) -> Tensor:
        # [T x B x sum(w)] -> [B x H x T x m], zero padded
        t, b, _ = x.shape
        x = torch.cat([x, x.new_zeros(t, b, 1)], dim=-1).index_select(-1, index)
        return x.view(t, b, self.num_heads, m).permute(1, 2, 0, 3)

    def _project_kv(self, key: Tensor):
        v = self._split(self.v_proj(key), self.v_index, self.m_v)
        if self.k_proj is None:
            return None, v
        return self._split(self.k_proj(key), self.qk_index, self.m_qk), v

    def forward(
        self,
        query: Tensor,
        key: Tensor | None,
        key_padding_mask: Tensor | None = None,
        incremental_state=None,
        attn_mask: Tensor | None = None,
        static_kv: bool = False,
        need_weights: bool = False,
    ):
        """query (Tq, B, in_dim), key (Tk, B, kv_dim) -> ((Tq, B, out_dim), weights [H x B x Tq x Tk] or None)."""
        tq, bsz, _ = query.shape
        saved = (
            self.get_incremental_state(incremental_state, "attn_state")
            if incremental_state is not None
            else None
        )
        if saved is not None and static_kv:
            k, v = saved.get("prev_key"), saved["prev_value"]
        else:
            k, v = self._project_kv(key)
            if saved is not None and not static_kv:  # self-attention: append this step
                prev_v = saved["prev_value"]
                v = torch.cat([prev_v, v], dim=2)
                if k is not None:
                    k = torch.cat([saved["prev_key"], k], dim=2)
        if incremental_state is not None:
            state = {"prev_value": v}
            if k is not None:
                state["prev_key"] = k
            self.set_incremental_state(incremental_state, "attn_state", state)
        tk = v.size(2)
        if k is not None:
            q = self._split(self.q_proj(query), self.qk_index, self.m_qk)
            scores = q @ k.transpose(-1, -2)  # [B x H x Tq x Tk]
        else:
            scores = query.new_zeros(bsz, self.num_heads, tq, tk)
        if attn_mask is not None:
            scores = scores + attn_mask
        if key_padding_mask is not None:
            scores = scores.masked_fill(key_padding_mask[:, None, None, :].bool(), float("-inf"))
        probs = F.softmax(scores.float(), dim=-1).type_as(scores)
        dropped = F.dropout(probs, self.dropout_p, self.training)
        ctx = dropped @ v  # [B x H x Tq x m_v]
        ctx = ctx.permute(2, 0, 1, 3).reshape(tq, bsz, self.num_heads * self.m_v)
        out = self.out_proj(ctx.index_select(-1, self.v_unpad))
        weights = probs.transpose(0, 1) if need_weights else None  # [H x B x Tq x Tk]
        return out, weights

    def reorder_incremental_state(self, incremental_state, new_order: Tensor):
        saved = self.get_incremental_state(incremental_state, "attn_state")
        if saved is not None:
            saved = {key: value.index_select(0, new_order) for key, value in saved.items()}
            self.set_incremental_state(incremental_state, "attn_state", saved)
        return incremental_state


class FusedFFN(nn.Module):
    """``fc2(act(fc1(y)))`` with ``fc2`` bias-free (its bias lives in the residual)."""

    def __init__(self, in_dim, ffn_dim, out_dim, activation_fn, activation_dropout=0.0):
        super().__init__()
        self.fc1 = nn.Linear(in_dim, ffn_dim)
        self.fc2 = nn.Linear(ffn_dim, out_dim, bias=False)
        self.activation_fn = activation_fn
        self.activation_dropout = float(activation_dropout)

    def forward(self, x):
        a = F.dropout(self.activation_fn(self.fc1(x)), self.activation_dropout, self.training)
        return self.fc2(a)


class FusedBlock(nn.Module):
    """``LN(residual(y) + dropout(sublayer(y)))`` for one block shape (module docstring)."""

    def __init__(
        self,
        shape: dict,
        activation_fn=None,
        dropout=0.0,
        attention_dropout=0.0,
        activation_dropout=0.0,
        eps=1e-5,
    ):
        super().__init__()
        self.kind = shape["kind"]
        a, b = int(shape["in"]), int(shape["out"])
        self.dropout = float(dropout)
        self.residual = nn.Linear(a, b)
        self.layer_norm = nn.LayerNorm(b, eps=eps)
        self.sub = None
        if self.kind == "ffn":
            if int(shape.get("ffn", 0)) > 0:
                self.sub = FusedFFN(a, int(shape["ffn"]), b, activation_fn, activation_dropout)
        elif shape.get("v"):
            kv = int(shape.get("kv", a))
            self.sub = FusedAttention(
                a, kv, b, shape["qk"], shape["v"], attention_dropout, self.kind == "self_attn"
            )

    def forward(self, y, *args, **kwargs):
        """Returns (output, attention weights or None)."""
        h = self.residual(y)
        attn = None
        if self.sub is not None:
            if self.kind == "ffn":
                out = self.sub(y)
            else:
                out, attn = self.sub(y, *args, **kwargs)
            h = h + F.dropout(out, self.dropout, self.training)
        return self.layer_norm(h), attn


def block_params(shape: dict) -> int:
    """Exact parameter count of a :class:`FusedBlock` of ``shape``."""
    a, b = int(shape["in"]), int(shape["out"])
    n = (a + 1) * b + 2 * b  # residual + LayerNorm
    if shape["kind"] == "ffn":
        f = int(shape.get("ffn", 0))
        return n + ((a + 1) * f + f * b if f else 0)
    if not shape.get("v"):
        return n
    kv = int(shape.get("kv", a))
    sqk, sv = sum(shape["qk"]), sum(shape["v"])
    return n + (a + 1) * sqk + (kv + 1) * sqk + (kv + 1) * sv + sv * b


class FusedEncoderLayer(nn.Module):
    """fairseq's encoder-layer interface over fused blocks (self-attention, FFN)."""

    def __init__(self, shapes: list[dict], **kw):
        super().__init__()
        self.blocks = nn.ModuleList([FusedBlock(s, **kw) for s in shapes])

    def forward(self, x, encoder_padding_mask=None, attn_mask=None):
        x, _ = self.blocks[0](x, x, key_padding_mask=encoder_padding_mask, attn_mask=attn_mask)
        x, _ = self.blocks[1](x)
        return x


class FusedDecoderLayer(nn.Module):
    """fairseq's decoder-layer interface over fused blocks (self-attn, cross-attn, FFN), with
    incremental decoding."""

    def __init__(self, shapes: list[dict], **kw):
        super().__init__()
        self.blocks = nn.ModuleList([FusedBlock(s, **kw) for s in shapes])

    def forward(
        self,
        x,
        encoder_out=None,
        encoder_padding_mask=None,
        incremental_state=None,
        self_attn_mask=None,
        self_attn_padding_mask=None,
        need_attn=False,
        need_head_weights=False,
        **unused,
    ):
        x, _ = self.blocks[0](
            x,
            x,
            key_padding_mask=self_attn_padding_mask,
            incremental_state=incremental_state,
            attn_mask=self_attn_mask,
        )
        x, attn = self.blocks[1](
            x,
            encoder_out,
            key_padding_mask=encoder_padding_mask,
            incremental_state=incremental_state,
            static_kv=True,
            need_weights=need_attn or need_head_weights,
        )
        x, _ = self.blocks[2](x)
        return x, attn, None
