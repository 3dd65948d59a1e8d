"""The kind registry: every kind registers once, with a schema, build, exact count, weight
transfer and int8 handler; the spec and the build hooks look kinds up there."""

import pytest
import torch
from torch import nn

from lightcompress.modules import CompressionSpec, SpecPlan, count_params
from lightcompress.modules.registry import (
    ALIASES,
    KINDS,
    QUANTIZE,
    Shape,
    SpecError,
    canonical_kind,
    get_variant,
)

# (kind, target, shape, params at which from_dense is exact)
EXACT = [
    ("lowrank", "linear", Shape(16, 12), {"rank": 12}),
    ("tt", "linear", Shape(16, 12), {"ranks": 0, "in_shape": [4, 4], "out_shape": [3, 4]}),
    ("htt", "linear", Shape(16, 12), {"alpha": 0.25, "ranks": 0, "in_shape": [4, 4]}),
    ("hmf", "linear", Shape(16, 12), {"alpha": 0.5, "rank": 6}),
    ("cp", "linear", Shape(16, 8), {"rank": 32, "heads": 4}),
    ("identity", "linear", Shape(8, 8), {}),
    ("dense", "linear", Shape(16, 12), {}),
    ("lowrank", "embedding", Shape(30, 8, False, 1), {"rank": 8}),
    ("htt", "embedding", Shape(30, 8, False, 1), {"alpha": 0.5, "ranks": 0, "num_cores": 2}),
    ("tt", "embedding", Shape(30, 8, False, 1), {"ranks": 0}),
    ("dense", "qkv", Shape(8, 24), {}),
    ("htt", "qkv", Shape(8, 24), {"alpha": 0.25, "ranks": 0, "num_cores": 2}),
    ("hmf", "qkv", Shape(8, 24), {"alpha": 0.25, "rank": 8}),
    ("tt", "qkv", Shape(8, 24), {"ranks": 0, "num_cores": 2}),
    ("lowrank", "qkv", Shape(8, 24), {"rank": 8}),
]


def _dense(target, shape):
    torch.manual_seed(0)
    if target == "embedding":
        return nn.Embedding(shape.in_features, shape.out_features, padding_idx=shape.padding_idx)
    if target == "qkv":
        d = shape.in_features
        return tuple(nn.Linear(d, d) for _ in range(3))
    return nn.Linear(shape.in_features, shape.out_features, bias=shape.bias)


def _apply(target, module, x):
    if target == "qkv":
        return (
            torch.cat(module(x), -1)
            if not isinstance(module, tuple)
            else torch.cat([m(x) for m in module], -1)
        )
    return module(x)


@pytest.mark.parametrize("kind,target,shape,params", EXACT, ids=[f"{k}-{t}" for k, t, *_ in EXACT])
def test_every_variant_counts_exactly_and_transfers_exactly_at_full_rank(
    kind, target, shape, params
):
    variant = get_variant(kind, target)
    variant.check(params)
    built = variant.build(shape, params)
    assert variant.num_params(shape, params) == sum(p.numel() for p in built.parameters())
    dense = _dense(target, shape)
    fitted = variant.from_dense(dense, params)
    if target == "embedding":
        x = torch.arange(shape.in_features)
    else:
        x = torch.randn(5, shape.in_features)
    if kind == "identity":  # drops the map: y = x
        torch.testing.assert_close(fitted(x), x)
        return
    torch.testing.assert_close(_apply(target, fitted, x), _apply(target, dense, x), atol=1e-4,
                               rtol=1e-4)  # fmt: skip


def test_one_vocabulary_aliases_of_the_first_grammar_are_bound_to_their_target():
    assert canonical_kind("lowrank_embedding") == "lowrank" and "lowrank_embedding" in ALIASES
    assert count_params("lowrank_embedding", 40, 16, rank=5) == count_params(
        "lowrank", 40, 16, target="embedding", rank=5
    )
    with pytest.raises(SpecError, match="replaces an nn.Embedding"):
        get_variant("lowrank_embedding", "linear")
    with pytest.raises(SpecError, match="kind 'cp' has no form for an nn.Embedding"):
        get_variant("cp", "embedding")
    assert set(KINDS) >= {"dense", "identity", "lowrank", "tt", "htt", "hmf", "cp"}


def test_ranks_zero_means_the_maximal_tt_ranks_everywhere():
    from lightcompress.modules import max_tt_ranks

    kw = get_variant("tt", "linear").kwargs(Shape(16, 12), {"ranks": 0})
    assert kw["in_shape"] == [2, 2, 4] and kw["out_shape"] == [2, 2, 3]
    assert kw["ranks"] == max_tt_ranks([2, 2, 4], [2, 2, 3]) == [4, 12]
    rule = CompressionSpec.parse("*.fc1 = tt(ranks=0)").rules[0]
    assert rule.params == {"ranks": 0}
    with pytest.raises(SpecError, match="ranks=-1"):
        CompressionSpec.parse("*.fc1 = tt(ranks=-1)")


@pytest.mark.parametrize("kind", ["lowrank", "cp"])
def test_int8_handlers_come_from_the_registry_and_compute_the_same_map(kind):
    variant = get_variant(kind, "linear")
    params = {"rank": 4} if kind == "lowrank" else {"rank": 4, "heads": 2}
    layer = variant.build(Shape(8, 6), params)
    assert QUANTIZE[type(layer)] is variant.int8
    x = torch.randn(3, 8)
    torch.testing.assert_close(variant.int8(layer)(x), layer(x), atol=1e-5, rtol=1e-5)


def test_plan_fuses_qkv_only_when_no_rule_names_the_separate_projections():
    spec = CompressionSpec.parse("*.self_attn.qkv_proj = htt(alpha=0.25, ranks=2)")
    plan = SpecPlan(spec)
    assert plan.rule_peek("encoder.layers.0.self_attn.q_proj") is None
    assert plan.rule_peek("encoder.layers.0.self_attn.qkv_proj").kind == "htt"
    fused = plan.qkv("encoder.layers.0.self_attn.qkv_proj", 16)
    assert type(fused).__name__ == "FusedQKV" and fused.num_dense == 4
    assert plan.finish()[0].kind == "htt"


def test_plan_reports_a_pattern_that_matched_no_path():
    plan = SpecPlan(CompressionSpec.parse("*.fc1 = lowrank(rank=2); *.fc3 = lowrank(rank=2)"))
    assert plan.linear("encoder.layers.0.fc1", 8, 16) is not None
    assert plan.linear("encoder.layers.0.fc2", 16, 8) is None  # no rule: dense
    with pytest.raises(SpecError, match="'\\*.fc3' .* matches no module"):
        plan.finish()


def test_a_compressed_model_is_built_compressed_by_its_hooks():
    """The spec decides at build time: no dense layer is replaced afterwards, and a rule on
    a path the model does not have fails the build with the pattern named."""
    from lightcompress.measure.params import build_model_without_data
    from lightcompress.modules import LowRankLinear

    tiny = ["--encoder-layers", "2", "--decoder-layers", "1", "--encoder-embed-dim", "16",
            "--decoder-embed-dim", "16", "--encoder-ffn-embed-dim", "32",
            "--decoder-ffn-embed-dim", "32", "--encoder-attention-heads", "2",
            "--decoder-attention-heads", "2", "--lc-encoder-groups", "0"]  # fmt: skip
    model = build_model_without_data(
        "lightformer", 30, [*tiny, "--lc-spec", "encoder.layers.1.fc1 = lowrank(rank=3)"]
    )
    assert isinstance(model.encoder.layers[1].fc1, LowRankLinear)
    assert type(model.encoder.layers[0].fc1) is nn.Linear
    with pytest.raises(Exception, match="encoder.layers.5"):
        build_model_without_data(
            "lightformer", 30, [*tiny, "--lc-spec", "encoder.layers.5.fc1 = lowrank(rank=3)"]
        )
