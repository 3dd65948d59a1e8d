"""Model size under the masks (DA-WID Eq. 22) and fusion into an ordinary smaller model (Sec. 3.4).

**Size.** The size of the model fusion would give is counted block by block
(:func:`lightcompress.wid.fused.block_params`): a block whose input has ``a`` kept dimensions
(the previous LayerNorm site's, or the embedding width for a stack's first block) and whose site
keeps ``b`` has the residual matrix ``(a + 1) b``, its LayerNorm ``2 b``, the attention's
``(a + 1) sum_h qk_h + (a_kv + 1) (sum_h qk_h + sum_h v_h) + b sum_h v_h`` or the FFN's
``(a + 1) f + f b``, where each head's widths are multiplied by its head and layer gates. With
every gate replaced by its probability of being non-zero (``1 - cdf(0)``, products of
independent gates as in CoFi) this is the *expected* size ``E[P]`` that the Lagrangian drives;
with the final masks it is exactly the fused model's non-embedding parameter count. Sparsity is
``1 - size / teacher`` with the teacher's non-embedding parameter count (embeddings excluded as
the paper counts, following CoFi). Eq. 22 of the paper counts the residual term as
``sum_k M_out^k M_in^k``; the residual matrix the fused model really holds is ``a x b`` and that
is what is counted here (the paper's Limitations section: at 5M these matrices are more than half
of the model).

**Fusion.** Each stack is walked block by block carrying the map ``x = P y + p`` from the fused
model's hidden state ``y`` to the training model's ``x`` (``P = C_out[:, keep]`` and ``p`` the
site's bias; the identity at the embedding). Then ``W' = R[keep_out] W P`` with ``R =
diag(z) C_in`` (Eq. 17-18), per-head compactors and masks multiplied into ``W_Q``, ``W_K``,
``W_V``, ``W_O``, the FFN's kept intermediate dimensions index-selected, every output bias moved
into the residual's bias, and the LayerNorm's weight set to the kept mask values. The fused
model's outputs equal the training model's in evaluation mode (tests/test_wid.py).
"""

from __future__ import annotations

import torch

from lightcompress.errors import ConfigError
from lightcompress.wid.fused import block_params
from lightcompress.wid.masked import LayerNormSite, MaskedAttention, MaskedFFN

__all__ = [
    "FusionError",
    "expected_size",
    "final_shapes",
    "fold_linear",
    "fuse_state",
    "shapes_params",
    "stacks",
]


class FusionError(ConfigError):
    """Masks that leave no model (every head, every layer or every dimension removed)."""


def stacks(model):
    """``[(name, d, layers, prefix), ...]``: each stack of a training model (its name in the
    shapes JSON, embedding width, layer list and state-dict prefix), from ``model.wid_stacks()``."""
    return model.wid_stacks()


def _blocks(layers):
    return [b for layer in layers for b in layer.blocks]


def _attention_widths(sub: MaskedAttention, expected: bool):
    h, dh = sub.num_heads, sub.head_dim
    if expected:
        qk = sub.gate_qk.score().view(h, dh).sum(1)
        v = sub.gate_vo.score().view(h, dh).sum(1)
        hs = sub.gate_head.score() * sub.gate_layer.score()
        return hs * qk, hs * v
    qk = (sub.gate_qk.final().view(h, dh) > 0).sum(1)
    v = (sub.gate_vo.final().view(h, dh) > 0).sum(1)
    alive = (sub.gate_head.final() > 0) & (sub.gate_layer.final() > 0) & (v > 0)
    return [int(q) for q, a in zip(qk, alive) if a], [int(x) for x, a in zip(v, alive) if a]


def _site_width(block, expected: bool, d: int):
    if block.plain:
        return d
    if expected:
        return block.site.gate.score().sum()
    return int((block.site.gate.final() > 0).sum())


def final_shapes(model) -> dict:
    """The fused model's shapes (the ``--dawid-shapes`` JSON) under the final masks."""
    result = {}
    enc_out = None
    for name, d, layers, _ in stacks(model):
        out_layers, a = [], d
        for layer in layers:
            out_layers.append([])
            for block in layer.blocks:
                b = _site_width(block, False, d)
                shape = {"kind": block.kind, "in": a, "out": b}
                if block.plain:
                    shape["plain"] = True
                if isinstance(block.sub, MaskedAttention):
                    qk, v = _attention_widths(block.sub, False)
                    shape.update(qk=qk, v=v)
                    if block.kind == "cross_attn":
                        shape["kv"] = enc_out
                else:
                    keep = (block.sub.gate_ffn.final() > 0) & (block.sub.gate_layer.final() > 0)
                    shape["ffn"] = int(keep.sum())
                out_layers[-1].append(shape)
                a = b
        result[name] = {"embed_dim": d, "layers": out_layers}
        if name == "encoder":
            enc_out = a
    check_shapes(result)
    return result


# (lightcompress-compress takes the target as --sparsity or --ratio, not fairseq's flag)
LOWER = (
    "lower --dawid-target-sparsity (lightcompress-compress: a lower --sparsity, or a "
    "smaller --ratio or larger --params)"
)


def check_shapes(shapes: dict) -> None:
    """Refuse masks that leave no usable model (FusionError, one line)."""
    for name in shapes:
        if name not in ("encoder", "decoder"):
            continue
        for i, layer in enumerate(shapes[name]["layers"]):
            for s in layer:
                if s["out"] < 1:
                    raise FusionError(
                        f"the masks remove every hidden dimension of {name} layer {i} "
                        f"({s['kind']}); " + LOWER
                    )
        blocks = [s for layer in shapes[name]["layers"] for s in layer]
        if not any((s.get("v") or s.get("ffn")) for s in blocks):
            raise FusionError(f"the masks remove every layer of the {name}; " + LOWER)
    if not any(s.get("v") for layer in shapes["encoder"]["layers"] for s in layer):
        raise FusionError("the masks remove every encoder self-attention head; " + LOWER)
    decoder = shapes.get("decoder", {"layers": []})["layers"]
    cross = [s for layer in decoder for s in layer if s["kind"] == "cross_attn"]
    if cross and not any(s.get("v") for s in cross):
        raise FusionError(
            "the masks remove every encoder-decoder attention head (the decoder would ignore the "
            "source); " + LOWER
        )


def expected_size(model):
    """``E[P]``, the expected non-embedding parameter count of the blocks (a differentiable
    scalar), with every gate at ``1 - cdf(0)`` (ones for gates not active)."""
    total = 0.0
    enc_out = None
    for name, d, layers, _ in stacks(model):
        a = d
        for block in _blocks(layers):
            b = _site_width(block, True, d)
            n = (a + 1) * b + 2 * b
            if isinstance(block.sub, MaskedAttention):
                qk, v = _attention_widths(block.sub, True)
                kv = enc_out if block.kind == "cross_attn" else a
                n = n + (a + 1) * qk.sum() + (kv + 1) * (qk.sum() + v.sum()) + b * v.sum()
            else:
                f = (block.sub.gate_ffn.score() * block.sub.gate_layer.score()).sum()
                n = n + (a + 1) * f + f * b
            total = total + n
            a = b
        if name == "encoder":
            enc_out = a
    return total


def shapes_params(shapes: dict) -> int:
    """Exact parameter count of the fused blocks of ``shapes``."""
    return sum(
        block_params(s)
        for part in ("encoder", "decoder")
        if part in shapes
        for layer in shapes[part]["layers"]
        for s in layer
    )


# --------------------------------------------------------------------------------------------
# fusion
# --------------------------------------------------------------------------------------------


def _d(t: torch.Tensor) -> torch.Tensor:
    return t.detach().to(torch.float64)


def _fuse_attention(sub: MaskedAttention, P, p, Pkv, pkv, R):
    """Weights of the fused attention for the heads kept: dict of float64 tensors and the bias
    its output adds (to be moved into the residual)."""
    h, dh = sub.num_heads, sub.head_dim
    z_qk = sub.gate_qk.final().view(h, dh).double()
    z_vo = sub.gate_vo.final().view(h, dh).double()
    z_head, z_layer = sub.gate_head.final().double(), sub.gate_layer.final().double()[0]
    wq, bq = _d(sub.q_proj.weight), _d(sub.q_proj.bias)
    wk, bk = _d(sub.k_proj.weight), _d(sub.k_proj.bias)
    wv, bv = _d(sub.v_proj.weight), _d(sub.v_proj.bias)
    wo, bo = _d(sub.out_proj.weight), _d(sub.out_proj.bias)
    scale = dh**-0.5
    q_rows, qb, k_rows, kb, v_rows, vb, o_cols = [], [], [], [], [], [], []
    for i in range(h):
        sl = slice(i * dh, (i + 1) * dh)
        keep_v = z_vo[i] > 0
        if not (z_head[i] > 0 and z_layer > 0 and keep_v.any()):
            continue
        keep_qk = z_qk[i] > 0
        cq, ck, cv, co = _d(sub.c_q[i]), _d(sub.c_k[i]), _d(sub.c_v[i]), _d(sub.c_o[i])
        zq = (z_qk[i] * scale)[:, None]
        q_rows.append((zq * (cq @ wq[sl] @ P))[keep_qk])
        qb.append((zq[:, 0] * (cq @ (wq[sl] @ p + bq[sl])))[keep_qk])
        k_rows.append((ck @ wk[sl] @ Pkv)[keep_qk])
        kb.append((ck @ (wk[sl] @ pkv + bk[sl]))[keep_qk])
        zv = z_vo[i][:, None]
        v_rows.append((zv * (cv @ wv[sl] @ Pkv))[keep_v])
        vb.append((zv[:, 0] * (cv @ (wv[sl] @ pkv + bv[sl])))[keep_v])
        o_cols.append((R @ wo[:, sl] @ co[:, keep_v]) * (z_head[i] * z_layer))
    weights = {}
    if v_rows:
        if sum(r.shape[0] for r in q_rows):
            weights["q_proj.weight"], weights["q_proj.bias"] = torch.cat(q_rows), torch.cat(qb)
            weights["k_proj.weight"], weights["k_proj.bias"] = torch.cat(k_rows), torch.cat(kb)
        weights["v_proj.weight"], weights["v_proj.bias"] = torch.cat(v_rows), torch.cat(vb)
        weights["out_proj.weight"] = torch.cat(o_cols, dim=1)
    return weights, R @ bo * z_layer


def _fuse_ffn(sub: MaskedFFN, P, p, R):
    z_f, z_layer = sub.gate_ffn.final().double(), sub.gate_layer.final().double()[0]
    w1, b1 = _d(sub.fc1.weight), _d(sub.fc1.bias)
    w2, b2 = _d(sub.fc2.weight), _d(sub.fc2.bias)
    keep = (z_f > 0) & (z_layer > 0)
    weights = {}
    if keep.any():
        weights["fc1.weight"] = (w1 @ P)[keep]
        weights["fc1.bias"] = (w1 @ p + b1)[keep]
        weights["fc2.weight"] = (R @ w2[:, keep]) * (z_f[keep] * z_layer)[None, :]
    return weights, R @ b2 * z_layer


def fuse_state(model) -> tuple[dict, dict, dict]:
    """``(shapes, tensors, folds)``: the fused model's shapes, the weights of its layers named
    as in the fused model (``encoder.layers.0.blocks.1.sub.fc1.weight``...), and per stack the
    map ``(P, p)`` from its last hidden state to the training model's (for the heads)."""
    shapes = final_shapes(model)
    tensors, folds = {}, {}
    enc_fold = None
    for name, d, layers, prefix0 in stacks(model):
        P, p = torch.eye(d, dtype=torch.float64), torch.zeros(d, dtype=torch.float64)
        for i, layer in enumerate(layers):
            for j, block in enumerate(layer.blocks):
                prefix = f"{prefix0}{i}.blocks.{j}."
                if block.plain:
                    R = torch.eye(d, dtype=torch.float64)
                    ln_w, ln_b = _d(block.site.weight), _d(block.site.bias)
                    nextP = torch.eye(d, dtype=torch.float64)
                    nextp = torch.zeros(d, dtype=torch.float64)
                else:
                    site: LayerNormSite = block.site
                    z = site.gate.final().double()
                    keep = z > 0
                    R = z[keep][:, None] * _d(site.c_in)[keep]
                    ln_w, ln_b = z[keep], torch.zeros(int(keep.sum()), dtype=torch.float64)
                    nextP, nextp = _d(site.c_out)[:, keep], _d(site.bias)
                res_w, res_b = R @ P, R @ p
                if isinstance(block.sub, MaskedAttention):
                    Pkv, pkv = enc_fold if block.kind == "cross_attn" else (P, p)
                    weights, out_bias = _fuse_attention(block.sub, P, p, Pkv, pkv, R)
                else:
                    weights, out_bias = _fuse_ffn(block.sub, P, p, R)
                for key, value in weights.items():
                    tensors[prefix + "sub." + key] = value
                tensors[prefix + "residual.weight"] = res_w
                tensors[prefix + "residual.bias"] = res_b + out_bias
                tensors[prefix + "layer_norm.weight"] = ln_w
                tensors[prefix + "layer_norm.bias"] = ln_b
                P, p = nextP, nextp
        folds[name] = (P, p)
        if name == "encoder":
            enc_fold = (P, p)
    return shapes, tensors, folds


def fold_linear(linear, P, p):
    """``(W P, W p + b)``: a dense layer reading the training model's hidden state rewritten to
    read the fused model's (``x = P y + p``)."""
    w = _d(linear.weight)
    b = _d(linear.bias) if linear.bias is not None else torch.zeros(w.shape[0], dtype=torch.float64)
    return w @ P, w @ p + b
