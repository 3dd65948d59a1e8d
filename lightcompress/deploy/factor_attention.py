"""Attention of low-rank maps computed in their factors' space, for the ONNX decoder step.

When an attention's maps are low rank (``x v^T u^T + b``, rank ``r`` under the head width
``d``: LightFormer's factorized attention; Smartformer's CP maps are such maps too, see
:func:`cp_first`), its products can be regrouped so that what a
decoder step reads and keeps per hypothesis is ``r`` wide instead of ``H x d``. The same
attention, the products associated differently (float rounding apart):

**Self-attention.** With ``h_q = x v_q^T`` (and ``h_k``, ``h_v``: one stacked product), the
score of head ``i`` is ``s (h_q u_q,i^T + b_q,i) . (h_k u_k,i^T + b_k,i)``; the terms that do not
depend on the key are the same for every key of a query and cancel in the softmax, so the
scores are ``q'_i . h_k`` with ``q'_i = h_q W_i + c_i``, ``W_i = s u_q,i^T u_k,i``
(``r_q x r_k``), ``c_i = s b_q,i u_k,i``. The key cache holds ``h_k`` (``r_k`` wide, shared by
the heads) instead of the heads' keys; the value cache ``h_v``: since a head's weights sum to 1,
its output is ``(P_i h_v) u_v,i^T + b_v,i``, and the output map's blocks fold into
``Z_i = u_v,i^T O_i`` (``O_i``: the rows of the output map's first factor, or of its dense
weight, that read head ``i``), with the bias ``b_v O``.

**Cross-attention.** The encoder's keys and values are fixed for a sentence, so the query's
second factor and the output map's first factor move to them, once per sentence:
``ck_i = s k_i u_q,i`` (``[S x r_q]``), ``cv_i = v_i O_i`` (``[S x r_o]``), and the query bias's
score ``s b_q,i . k_i`` joins the padding mask (``cross_b``, per head). A step computes
``h_q = x v_q^T`` and ``sum_i softmax(h_q ck_i^T + cross_b_i) cv_i``, then the output map's
second factor.

Both only where they do not make the work larger: every map of the attention low rank (the
output map may be dense for the self-attention), the key and value ranks (the query and output
ranks for the cross-attention) at most the head width. :func:`self_plan` / :func:`cross_plan`
say whether a layer's attention qualifies; the step and the encoder graph
(:mod:`lightcompress.deploy.onnx_graphs`) compute it. :func:`low_rank_lookup`: the step's lookup
of a low-rank input table, its scale folded into the second factor.
"""

from __future__ import annotations

import weakref

import torch
import torch.nn.functional as F
from torch import Tensor, nn

__all__ = ["cp_first", "cross_plan", "layout", "low_rank_lookup", "map_factors", "self_plan"]


def map_factors(m):
    """``(first, second, bias)`` of a map whose weights the export may regroup: a map whose
    kind declares two factors (a low-rank map ``x v^T u^T + b``: ``(v, u, b)``; the kind
    registry's ``factors``), a CP map (:func:`cp_first`), a dense one (``(None, W, b)``), else
    None."""
    from lightcompress.modules.cp import CPLinear
    from lightcompress.modules.registry import two_factors

    factors = two_factors(m)
    if factors is not None:
        return factors[0], factors[1], getattr(m, "bias", None)
    if type(m) is CPLinear:
        return cp_first(m), m.w0, m.bias
    if type(m) is nn.Linear:
        return None, m.weight, m.bias
    return None


_CP_FIRST: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()


def cp_first(m) -> Tensor:
    """A CP map (Smartformer's ``z = sum_h (x_h w2) * w1_h``, then ``w0``) as the low-rank map it
    is: ``x M^T w0^T + b`` with ``M[r, (h, j)] = w1[h, r] w2[j, r]`` (``[R x in]``, the
    Khatri-Rao product of its two input-side factors). The same products; in the graphs the
    first factor is one matrix product (regrouped with the others that read the same input,
    and in the factors' space above) instead of a product, a ``Mul`` and a ``ReduceSum``. It
    stores ``R x in`` weights where the map has ``R x (h + in / h)``. One tensor per map (kept
    while its factors are unchanged: the export keys regrouped weights by identity)."""
    key = tuple((w.data_ptr(), w._version) for w in (m.w1, m.w2))
    held = _CP_FIRST.get(m)
    if held is None or held[0] != key:
        first = (m.w1.t()[:, :, None] * m.w2.t()[:, None, :]).reshape(m.rank, -1).detach()
        held = _CP_FIRST[m] = (key, first)
    return held[1]


def _low_rank(m):
    """``(v, u, b)`` of a low-rank map, else None."""
    f = map_factors(m)
    return None if f is None or f[0] is None else f


class SelfPlan:
    """The regrouped weights of one self-attention (parameters of ``owner``: a weight shared by
    several layers stays one initializer)."""

    def __init__(self, owner, attn, parts, out):
        h, d = attn.num_heads, attn.head_dim
        (vq, uq, bq), (vk, uk, _bk), (vv, uv, bv) = parts  # (b_k: cancels in the softmax)
        rq, rk, rv = vq.shape[0], vk.shape[0], vv.shape[0]
        s = attn.scaling
        self.heads, self.ranks = h, (rq, rk, rv)
        # (the tensors the regrouped weights are made of: layers that share them share these)
        key = ("factor-self", *map(id, (vq, uq, bq, vk, uk, vv, uv, bv, out[1], out[2])))
        self.first = owner._weight(key + ("first",), lambda: torch.cat([vq, vk, vv]))
        uq_h, uk_h = uq.reshape(h, d, rq), uk.reshape(h, d, rk)

        def w_q():  # [H*rk x rq]: F.linear's weight of h_q -> (q'_0 ... q'_H-1)
            return (s * uq_h.transpose(1, 2) @ uk_h).permute(0, 2, 1).reshape(h * rk, rq)

        self.w_q = owner._weight(key + ("w_q",), w_q)
        self.c_q = None
        if bq is not None:
            self.c_q = owner._weight(
                key + ("c_q",), lambda: (s * bq.reshape(h, 1, d) @ uk_h).reshape(h * rk)
            )
        vo, uo, bo = out
        o_t = (uo.t() if vo is None else vo.t()).reshape(h, d, -1)  # [H x d x C or r_o]
        uv_h = uv.reshape(h, d, rv)
        self.w_z = owner._weight(
            key + ("w_z",), lambda: (uv_h.transpose(1, 2) @ o_t).reshape(h * rv, -1).t()
        )
        z0 = None if bv is None else bv @ o_t.reshape(h * d, -1)
        if vo is None:  # a dense output map: its bias joins b_v's
            z0 = bo if z0 is None else (z0 if bo is None else z0 + bo)
            self.second = None
        else:
            self.second = (uo, bo)
        self.b_z = None if z0 is None else owner._weight(key + ("b_z",), lambda: z0)

    def step(self, x: Tensor, past_k: Tensor, past_v: Tensor, order: Tensor):
        """``x [N x C]`` -> the attention's output ``[N x C]`` and the grown caches
        ``[N x 1 x t+1 x r]``."""
        h, (rq, rk, rv) = self.heads, self.ranks
        hq, hk, hv = F.linear(x, self.first).split([rq, rk, rv], dim=-1)
        q = F.linear(hq, self.w_q, self.c_q).reshape(-1, h, 1, rk)
        k = torch.cat([past_k.index_select(0, order), hk.reshape(-1, 1, 1, rk)], dim=2)
        v = torch.cat([past_v.index_select(0, order), hv.reshape(-1, 1, 1, rv)], dim=2)
        p = F.softmax(torch.matmul(q, k.transpose(2, 3)).float(), dim=-1)  # [N x H x 1 x t+1]
        y = F.linear(torch.matmul(p, v).reshape(-1, h * rv), self.w_z, self.b_z)
        if self.second is not None:
            y = F.linear(y, *self.second)
        return y, k, v


def _self_parts(attn):
    from lightcompress.deploy.tt_graph import fused_qkv

    if fused_qkv(attn) is not None:  # (Hypoformer's fused map)
        return None
    parts = [_low_rank(m) for m in (attn.q_proj, attn.k_proj, attn.v_proj)]
    out = map_factors(attn.out_proj)
    if any(p is None for p in parts) or out is None:
        return None
    if max(parts[1][0].shape[0], parts[2][0].shape[0]) > attn.head_dim:
        return None
    return parts, out


def self_plan(owner, attn) -> SelfPlan | None:
    """The factor-space plan of a fairseq self-attention (its weights parameters of ``owner``,
    a :class:`~lightcompress.deploy.onnx_graphs.Regrouped`), or None where it does not
    apply."""
    parts = _self_parts(attn)
    return None if parts is None else SelfPlan(owner, attn, *parts)


class CrossPlan:
    """The regrouped weights of one cross-attention: the encoder's part (:meth:`keys_values`)
    and the step's (:meth:`step`)."""

    def __init__(self, owner, attn, q, out):
        h, d = attn.num_heads, attn.head_dim
        (vq, uq, bq), (vo, uo, bo) = q, out
        s = attn.scaling
        self.heads, self.rank_q, self.rank_o = h, vq.shape[0], vo.shape[0]
        key = ("factor-cross", *map(id, (vq, uq, bq, vo)))
        self.v_q = vq
        self.u_q = owner._weight(key + ("u_q",), lambda: s * uq.reshape(h, d, -1))
        self.b_q = None
        if bq is not None:
            self.b_q = owner._weight(key + ("b_q",), lambda: s * bq.reshape(h, d, 1))
        self.v_o = owner._weight(key + ("v_o",), lambda: vo.t().reshape(h, d, -1))
        self.second = (uo, bo)

    def keys_values(self, k: Tensor, v: Tensor, enc_bias: Tensor):
        """The encoder's ``k``, ``v`` ``[B x H x S x d]`` and mask ``[B x 1 x 1 x S]`` ->
        ``ck [B x H x S x r_q]``, ``cv [B x H x S x r_o]``, ``cross_b [B x H x 1 x S]``."""
        ck = torch.matmul(k, self.u_q)
        cv = torch.matmul(v, self.v_o)
        if self.b_q is None:  # (an Add, not an Expand: the same graph for both cases)
            return ck, cv, enc_bias + torch.zeros(1, self.heads, 1, 1)
        return ck, cv, enc_bias + torch.matmul(k, self.b_q).transpose(2, 3)

    def step(self, x: Tensor, ck: Tensor, cv: Tensor, cb: Tensor, sentence_rows) -> Tensor:
        """``x [N x C]`` (``beam`` hypotheses per sentence) -> the attention's output."""
        hq = sentence_rows(F.linear(x, self.v_q), 1, self.rank_q).transpose(1, 2)
        p = F.softmax((torch.matmul(hq, ck.transpose(2, 3)) + cb).float(), dim=-1)
        y = torch.matmul(p, cv).sum(dim=1)  # [B x beam x r_o]
        return F.linear(y.reshape(-1, self.rank_o), *self.second)


def _cross_parts(layer):
    from lightcompress.modules.safe import QueryProjectedAttention

    attn = getattr(layer, "encoder_attn", None)
    if attn is None or isinstance(attn, QueryProjectedAttention):  # (Subformer's: as it is)
        return None
    q, out = _low_rank(attn.q_proj), _low_rank(attn.out_proj)
    if q is None or out is None or max(q[0].shape[0], out[0].shape[0]) > attn.head_dim:
        return None
    return q, out


def cross_plan(owner, layer) -> CrossPlan | None:
    """The factor-space plan of a decoder layer's cross-attention, or None where it does not
    apply."""
    parts = _cross_parts(layer)
    return None if parts is None else CrossPlan(owner, layer.encoder_attn, *parts)


def layout(layer) -> dict:
    """What the export's ``config.json`` records of a decoder layer's factor-space attention:
    ``k_cache`` / ``v_cache`` (the self-attention caches' ``[heads, width]`` per hypothesis)
    and ``cross_factors`` (the encoder's cross-attention outputs are ``ck``, ``cv`` and a
    per-head ``cross_b``); empty for a layer computed as fairseq does."""
    out: dict = {}
    parts = _self_parts(layer.self_attn)
    if parts is not None:
        out["k_cache"], out["v_cache"] = [1, parts[0][1][0].shape[0]], [1, parts[0][2][0].shape[0]]
    if _cross_parts(layer) is not None:
        out["cross_factors"] = True
    return out


def low_rank_lookup(owner, dec):
    """The decoder step's lookup of a low-rank input table (LightFormer's ``u v``), or None for
    another table: ``prev -> u[prev] (s v)``, the embedding scale ``s`` folded into a copy of
    ``v`` (``r x C``, a parameter of ``owner``), without fairseq's padding mask: a previous
    token is never PAD (the first is EOS, and PAD is scored -inf, as in fairseq, so it is never
    chosen). Two kernels a step (gather, product) instead of six."""
    from lightcompress.modules.embeddings import LowRankEmbedding

    emb = dec.embed_tokens
    if type(emb) is not LowRankEmbedding:
        return None
    scale = float(dec.embed_scale)
    v = owner._weight(("embed-v", id(emb.v), scale), lambda: emb.v * scale)
    return lambda prev: torch.matmul(F.embedding(prev, emb.u), v)
