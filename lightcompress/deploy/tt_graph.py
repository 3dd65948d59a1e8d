"""Tensor-train products and Hypoformer's fused Q/K/V map, as the ONNX graphs compute them.

:class:`~lightcompress.modules.tensor_train.TTLinear` contracts its input with one core after
the other by ``tensordot``; traced, each contraction becomes an ``Einsum`` between reshapes and
transposes whose target shapes are computed in the graph (``Shape``, ``Gather``, ``Slice``,
``Concat``): 74 graph nodes for a 3-core map. :func:`tt_product` computes the same product as
matrix products with constant-shape reshapes (the row count left as ``-1``): each core,
rearranged into a matrix (stored so: the same number of weights), takes the rows whose input
mode and rank it contracts, after one transpose that brings them last. For Hypoformer's
256-wide map (cores ``4 x 8 x 8 -> 8 x 8 x 9``, ranks 2) that is 23 nodes instead of 74, and
0.45x the time at 5 rows, 0.8x at 160 and 480 (ONNX Runtime, one thread, the map alone).

:func:`fused_qkv_step` splits a fused Q/K/V map (Eq. 8: ``q = [Q1 | Q2]``, the dense and the
factorized part's thirds) with two reshapes, one concatenation, the query's scale and one
split, where :func:`~lightcompress.modules.fused_qkv.split_qkv` traces to seven slices and four
concatenations. The same products in both, float rounding apart.
"""

from __future__ import annotations

import contextlib
import math
import types

import torch
from torch import Tensor, nn

__all__ = ["TT_MATRIX", "fused_qkv", "fused_qkv_step", "tt_in_graph", "tt_product"]


TT_MATRIX = "onnx_tt_matrix"
"""The name of :func:`tt_product`'s core matrices while a graph is traced (``<map>.onnx_tt_matrix0``
...): ``lightcompress-export-onnx --int8`` leaves their products in float32, as it left the
contractions (a core is not a map, and its products are tiny: quantized, the Hypoformer's export
ran 1.10x the old one at batch 1 against 1.20x with float32 products, each in its own side-by-side
run, and changed 4 of 320 outputs at batch 32)."""


def _tt_matrices(layer) -> list[Tensor]:
    """Core ``k`` as the ``[(m_k r_(k-1)) x (n_k r_k)]`` matrix of :func:`tt_product`'s
    contraction ``k`` (while :func:`tt_in_graph` traces: buffers of the layer, so that they are
    named initializers of the graph)."""
    held = [getattr(layer, f"{TT_MATRIX}{k}", None) for k in range(len(layer.cores))]
    if all(h is not None for h in held):
        return held
    mats = []
    for k, core in enumerate(layer.cores):
        m, n = core.shape[0], core.shape[1]
        if core.dim() == 3 and k == 0:  # (m1, n1, r1)
            mats.append(core.reshape(m, -1))
        elif core.dim() == 3:  # the last: (m_d, n_d, r_(d-1))
            mats.append(core.permute(0, 2, 1).reshape(m * core.shape[2], n))
        else:  # (m_k, n_k, r_(k-1), r_k)
            r0, r1 = core.shape[2], core.shape[3]
            mats.append(core.permute(0, 2, 1, 3).reshape(m * r0, n * r1))
    return mats


def tt_product(layer, x: Tensor) -> Tensor:
    """``layer(x)`` of a :class:`~lightcompress.modules.tensor_train.TTLinear` on ``x`` ``[R x
    in]``, as matrix products (module notes).

    The state before contraction ``k`` is ``[R, m_k, (m_(k+1)..m_d), (n_1..n_(k-1)),
    r_(k-1)]``; one transpose brings ``m_k`` next to ``r_(k-1)``, and the product with core
    ``k``'s matrix leaves ``[R, (m_(k+1)..m_d), (n_1..n_k), r_k]``."""
    ms, ns = layer.in_shape, layer.out_shape
    rank = [1] + list(layer.rank) + [1]
    mats = _tt_matrices(layer)
    y = x.reshape(-1, ms[0], math.prod(ms[1:])).transpose(1, 2)  # [R x (m2..md) x m1]
    y = torch.matmul(y.reshape(-1, ms[0]), mats[0])  # [(R m2..md) x (n1 r1)]
    done = ns[0]  # n_1..n_(k-1)
    for k in range(1, len(ms)):
        rest = math.prod(ms[k + 1 :]) * done
        y = y.reshape(-1, ms[k], rest, rank[k]).transpose(1, 2)  # [R x rest x m_k x r_(k-1)]
        y = torch.matmul(y.reshape(-1, ms[k] * rank[k]), mats[k])  # [(R rest) x (n_k r_k)]
        done *= ns[k]
    y = y.reshape(-1, layer.out_features)
    return y if layer.bias is None else y + layer.bias


@contextlib.contextmanager
def tt_in_graph(model: nn.Module):
    """While tracing ``model``: every ``TTLinear`` of it computes two-dimensional inputs by
    :func:`tt_product` (other inputs as before), its core matrices held as buffers
    (:data:`TT_MATRIX`); all removed afterwards."""
    from lightcompress.modules.tensor_train import TTLinear

    patched = []
    try:
        for module in model.modules():
            if isinstance(module, TTLinear) and "forward" not in module.__dict__:
                own = type(module).forward

                def forward(self, x, _own=own):
                    return tt_product(self, x) if x.dim() == 2 else _own(self, x)

                mats = [m.detach().contiguous() for m in _tt_matrices(module)]
                patched.append(module)
                module.forward = types.MethodType(forward, module)
                for k, mat in enumerate(mats):
                    module.register_buffer(f"{TT_MATRIX}{k}", mat)
        yield
    finally:
        for module in patched:
            del module.forward
            for k in range(len(module.cores)):
                module._buffers.pop(f"{TT_MATRIX}{k}", None)


def fused_qkv(attn):
    """Hypoformer's fused Q/K/V map of an attention (``qkv_proj``), or None."""
    from lightcompress.modules.fused_qkv import FusedQKV

    qkv = getattr(attn, "qkv_proj", None)
    return qkv if isinstance(qkv, FusedQKV) else None


def fused_qkv_step(qkv, x: Tensor, scaling: float) -> tuple[Tensor, Tensor, Tensor]:
    """``(q * scaling, k, v)`` of a fused map on ``x`` ``[R x d]``, each ``[R x 1 x d]``
    (the graphs reshape them into heads next): each part's output read as ``[R x 3 x width]``
    (its q, k and v thirds), the parts joined along the width, one scale and one split."""
    from lightcompress.modules.hybrid import HybridLinear

    proj, d = qkv.proj, qkv.dim
    if isinstance(proj, HybridLinear):
        parts = [p for p in (proj.dense, proj.factorized) if p is not None]
        y = torch.cat([p(x).reshape(-1, 3, p.out_features // 3) for p in parts], dim=-1)
    else:  # one map (dense or factorized as a whole): [q | k | v]
        y = proj(x).reshape(-1, 3, d)
    if scaling != 1.0:
        y = y * torch.tensor([[scaling], [1.0], [1.0]])
    return tuple(y.split(1, dim=1))
