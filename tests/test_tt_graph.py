"""The ONNX graphs' forms of factorized maps: tensor-train products and the fused Q/K/V split
(lightcompress.deploy.tt_graph), CP maps as low-rank maps (factor_attention.cp_first): the same
values as the modules, and what an export's graphs hold."""

from __future__ import annotations

import json
import warnings

import pytest
import torch

from lightcompress.deploy.tt_graph import (
    TT_MATRIX,
    fused_qkv_step,
    tt_in_graph,
    tt_product,
)
from lightcompress.modules.fused_qkv import FusedQKV
from lightcompress.modules.tensor_train import TTLinear


@pytest.mark.parametrize(
    "in_shape, out_shape, ranks, bias",
    [
        ([4, 8, 8], [8, 8, 9], [2, 2], True),  # Hypoformer's 256 -> 576 at the results' size
        ([4, 8], [6, 4], [3], False),  # two cores
        ([2, 3, 2, 2], [3, 2, 2, 5], [2, 4, 3], True),  # four cores, uneven modes and ranks
        ([5, 3], [1, 7], [1], True),  # an output mode of 1
    ],
)
def test_tt_product_is_the_layers_product(in_shape, out_shape, ranks, bias):
    torch.manual_seed(0)
    layer = TTLinear(in_shape, out_shape, ranks, bias=bias)
    with torch.no_grad():
        if bias:
            layer.bias.normal_()
        for rows in (1, 7):
            x = torch.randn(rows, layer.in_features)
            assert torch.allclose(tt_product(layer, x), layer(x), atol=1e-5, rtol=1e-5)


def test_tt_in_graph_patches_two_dimensional_inputs_only_and_restores_the_model():
    torch.manual_seed(0)
    model = torch.nn.Sequential(
        TTLinear([4, 8], [6, 4], [3]), torch.nn.ReLU(), TTLinear([4, 6], [2, 8], [2])
    )
    keys = list(model.state_dict())
    x2, x3 = torch.randn(5, 32), torch.randn(2, 3, 32)
    with torch.no_grad():
        before2, before3 = model(x2), model(x3)
        with tt_in_graph(model):
            # the core matrices are named buffers of each layer while the graphs are traced
            names = [n for n, _ in model.named_buffers()]
            assert names == [f"{i}.{TT_MATRIX}{k}" for i in (0, 2) for k in range(2)]
            assert torch.allclose(model(x2), before2, atol=1e-5)
            assert torch.equal(model(x3), before3)  # (other shapes: the module's own product)
        assert list(model.state_dict()) == keys
        assert not any("forward" in m.__dict__ for m in model.modules())
        try:  # restored after an error inside too
            with tt_in_graph(model):
                raise RuntimeError("tracing failed")
        except RuntimeError:
            pass
        assert list(model.state_dict()) == keys and not list(model.buffers())


@pytest.mark.parametrize("kind", ["htt", "hmf", "tt", "lowrank", "dense"])
def test_fused_qkv_step_is_eq8_split_with_the_query_scaled(kind):
    torch.manual_seed(0)
    params = {
        "htt": {"beta": 0.25, "ranks": 2},
        "hmf": {"beta": 0.25, "rank": 4},
        "tt": {"ranks": 3},
        "lowrank": {"rank": 5},
        "dense": {},
    }[kind]
    qkv = FusedQKV(32, kind, **params)
    x = torch.randn(6, 32)
    with torch.no_grad():
        q, k, v = qkv(x)
        got = fused_qkv_step(qkv, x, 0.25)
    assert [t.shape for t in got] == [torch.Size([6, 1, 32])] * 3
    for a, b in zip(got, (q * 0.25, k, v)):
        assert torch.allclose(a.reshape(6, 32), b, atol=1e-6)


def test_hypoformer_export_computes_tt_products_as_float_matrix_products(tmp_path):
    """The encoder's and the step's TT maps: one float32 ``MatMul`` per core (no ``Einsum``,
    none quantized by ``--int8 all``), and each fused Q/K/V map split once."""
    import onnx

    from lightcompress.deploy.onnx_export import export_onnx
    from lightcompress.measure.specs import build_random_model

    torch.manual_seed(0)
    flags = [
        "--encoder-layers",
        "2",
        "--decoder-layers",
        "1",
        "--encoder-embed-dim",
        "32",
        "--decoder-embed-dim",
        "32",
        "--encoder-ffn-embed-dim",
        "64",
        "--decoder-ffn-embed-dim",
        "64",
        "--encoder-attention-heads",
        "2",
        "--decoder-attention-heads",
        "2",
        "--hypo-embed-rank",
        "2",
        "--hypo-ffn-rank",
        "8",
    ]
    model, task, _ = build_random_model("hypoformer_iwslt_de_en", 40, flags, True, return_task=True)
    model.eval()
    export_onnx(model, task, str(tmp_path / "onnx"), int8="all")
    with open(tmp_path / "onnx" / "config.json") as f:
        assert json.load(f)["format"] == "lightcompress-onnx"
    for part, layers in (("encoder", model.encoder.layers), ("decoder", model.decoder.layers)):
        cores = sum(len(m.cores) for m in layers.modules() if isinstance(m, TTLinear))
        fused = sum(isinstance(m, FusedQKV) for m in layers.modules())
        assert cores and fused == len(layers)
        nodes = onnx.load(str(tmp_path / "onnx" / f"{part}.onnx"), load_external_data=False)
        nodes = nodes.graph.node
        # (the HTT table's lookup contracts its cores' columns: tensor_train.tt_columns)
        assert not [n for n in nodes if n.op_type == "Einsum" and "embed_tokens" not in n.name]
        tt = [n for n in nodes if any(TT_MATRIX in i for i in n.input)]
        assert [n.op_type for n in tt] == ["MatMul"] * cores
        # (fairseq's split traces to slices and concatenations of each part's thirds)
        assert not [n for n in nodes if n.op_type in ("Slice", "Concat") and "qkv" in n.name]
        assert sum(n.op_type == "Split" and len(n.output) == 3 for n in nodes) >= fused
        assert any(n.op_type == "MatMulInteger" for n in nodes)  # (the other maps: int8)


def test_a_cp_map_is_the_low_rank_map_of_its_khatri_rao_first_factor():
    from lightcompress.deploy.factor_attention import cp_first, map_factors
    from lightcompress.modules.cp import CPLinear

    torch.manual_seed(0)
    m = CPLinear(24, 20, rank=5, heads=3)
    x = torch.randn(7, 24)
    with torch.no_grad():
        first, second, bias = map_factors(m)
        assert first.shape == (5, 24) and second is m.w0 and bias is m.bias
        y = torch.nn.functional.linear(torch.nn.functional.linear(x, first), second, bias)
        assert torch.allclose(y, m(x), atol=1e-5)
        assert cp_first(m) is first  # (one tensor per map: regrouped weights are keyed by it)
        m.w1.mul_(2.0)  # changed factors: a new first factor
        assert cp_first(m) is not first and torch.allclose(cp_first(m), 2 * first)


def test_a_traced_htt_output_table_is_built_from_its_factors_even_when_cached(tmp_path):
    """A Hypoformer's output layer is its HTT table, tied. In eval mode under no_grad the table
    is cached; traced, it is built from the dense part and the TT cores in the graph, so that
    the export stores the factors (a traced cache was an 8 MB V x d constant of a 19 MB export)
    and ONNX Runtime folds the table when it loads the graph: the same logits."""
    import numpy as np
    import onnx
    import onnxruntime as ort

    from lightcompress.integration import TiedOutputProjection
    from lightcompress.modules.embeddings import HTTEmbedding

    torch.manual_seed(0)
    vocab, dim = 300, 64
    emb = HTTEmbedding(vocab, dim, 0.5, 4, padding_idx=1).eval()

    class Scores(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.emb, self.proj = emb, TiedOutputProjection(emb)

        def forward(self, x):
            return self.proj(x)

        def train(self, mode=True):
            # the exporter switches the module to eval mode (which drops the cache) before it
            # traces; the export of a model then runs its encoder eagerly before it traces the
            # decoder step: the table cached again (as here) when the table is shared
            super().train(mode)
            if not mode:
                with torch.no_grad():
                    _ = emb.weight
            return self

    x = torch.randn(3, dim)
    scores = Scores().eval()
    with torch.no_grad():
        builds = emb.table_builds
        ref = scores(x)  # (the table built and cached)
        assert emb.table_builds == builds and emb._cache is not None  # (cached by eval())
        path = str(tmp_path / "scores.onnx")
        with warnings.catch_warnings():  # (the padding row's index: a constant, as it should be)
            warnings.simplefilter("ignore", torch.jit.TracerWarning)
            torch.onnx.export(
                scores,
                (x,),
                path,
                input_names=["x"],
                dynamo=False,
                do_constant_folding=False,
                dynamic_axes={"x": {0: "n"}},
            )
    graph = onnx.load(path).graph
    stored = [tuple(i.dims) for i in graph.initializer] + [
        tuple(a.t.dims) for n in graph.node if n.op_type == "Constant" for a in n.attribute
    ]
    assert (vocab, dim) not in stored and (dim, vocab) not in stored
    assert (vocab, emb.dense.shape[1]) in stored  # (the dense part: a parameter)
    session = ort.InferenceSession(path, providers=["CPUExecutionProvider"])
    got = session.run(None, {"x": x.numpy()})[0]
    np.testing.assert_allclose(got, ref.numpy(), rtol=1e-4, atol=1e-5)
