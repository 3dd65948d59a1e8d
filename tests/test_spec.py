"""The compression spec: parsing, validation errors, init and convert on a toy model."""

import pytest
import torch
from torch import nn

from lightcompress.modules import (
    CompressionSpec,
    CPLinear,
    HTTEmbedding,
    HybridLinear,
    LowRankEmbedding,
    LowRankLinear,
    SpecError,
    TTLinear,
    count_params,
)


class Attn(nn.Module):
    def __init__(self, d):
        super().__init__()
        self.q_proj, self.k_proj, self.v_proj = (
            nn.Linear(d, d),
            nn.Linear(d, d),
            nn.Linear(d, d),
        )
        self.out_proj = nn.Linear(d, d)


class Layer(nn.Module):
    def __init__(self, d=16, ffn=32):
        super().__init__()
        self.self_attn = Attn(d)
        self.fc1, self.fc2 = nn.Linear(d, ffn), nn.Linear(ffn, d)
        self.layer_norm = nn.LayerNorm(d)

    def forward(self, x):
        a = self.self_attn
        x = x + a.out_proj(a.q_proj(x) + a.k_proj(x) + a.v_proj(x))
        return self.layer_norm(x + self.fc2(torch.relu(self.fc1(x))))


class Toy(nn.Module):
    """A two-layer encoder with the names fairseq uses."""

    def __init__(self, vocab=40, d=16):
        super().__init__()
        self.encoder = nn.Module()
        self.encoder.embed_tokens = nn.Embedding(vocab, d, padding_idx=1)
        self.encoder.layers = nn.ModuleList([Layer(d) for _ in range(2)])
        self.output_projection = nn.Linear(d, vocab, bias=False)

    def forward(self, tokens):
        x = self.encoder.embed_tokens(tokens)
        for layer in self.encoder.layers:
            x = layer(x)
        return self.output_projection(x)


def n_params(model):
    return sum(p.numel() for p in model.parameters())


SPEC = (
    "encoder.layers.*.fc1, encoder.layers.*.fc2 = lowrank(rank=4);"
    "*.self_attn.[qk]_proj = lowrank(ratio=2)\n"
    "*.self_attn.v_proj = htt(alpha=0.5, in_shape=4x4, out_shape=2x4, ranks=4)  # fused elsewhere\n"
    "*.out_proj = cp(rank=3, heads=4); output_projection = dense;"
    "encoder.embed_tokens = lowrank_embedding(rank=5)"
)


def test_parse_reads_patterns_kinds_and_typed_params():
    spec = CompressionSpec.parse(SPEC)
    assert [r.kind for r in spec.rules] == [
        "lowrank",
        "lowrank",
        "htt",
        "cp",
        "dense",
        "lowrank_embedding",
    ]
    assert spec.rules[0].patterns == ("encoder.layers.*.fc1", "encoder.layers.*.fc2")
    assert spec.rules[1].params == {"ratio": 2}
    assert spec.rules[2].params == {
        "alpha": 0.5,
        "in_shape": [4, 4],
        "out_shape": [2, 4],
        "ranks": 4,
    }
    assert CompressionSpec.parse(spec.to_text()) == spec


def test_python_structures_give_the_same_spec_as_text():
    text = CompressionSpec.parse("*.fc1=lowrank(rank=4); *.v_proj=htt(alpha=0.5,ranks=4x4)")
    as_dict = CompressionSpec.from_obj(
        {
            "*.fc1": "lowrank(rank=4)",
            "*.v_proj": {"kind": "htt", "alpha": 0.5, "ranks": [4, 4]},
        }
    )
    as_list = CompressionSpec.from_obj(
        [
            {"pattern": "*.fc1", "kind": "lowrank", "params": {"rank": 4}},
            ("*.v_proj", "htt(alpha=0.5,ranks=4x4)"),
        ]
    )
    assert text == as_dict == as_list


def test_init_replaces_matched_modules_and_the_model_still_runs():
    model = Toy()
    report = CompressionSpec.parse(SPEC).apply(model, mode="init")
    layer = model.encoder.layers[0]
    assert isinstance(layer.fc1, LowRankLinear) and layer.fc1.rank == 4
    assert isinstance(layer.self_attn.q_proj, LowRankLinear) and layer.self_attn.q_proj.rank == 4
    assert isinstance(layer.self_attn.v_proj, HybridLinear)
    assert isinstance(layer.self_attn.out_proj, CPLinear)
    assert isinstance(model.encoder.embed_tokens, LowRankEmbedding)
    assert isinstance(model.output_projection, nn.Linear)
    assert len(report) == 2 * 6 + 2
    assert report.params_after == sum(r.params_after for r in report)
    assert n_params(model) == n_params(Toy()) - report.params_before + report.params_after
    tokens = torch.randint(0, 40, (3, 5))
    model(tokens).sum().backward()
    assert "fc1" in report.format()


def test_validate_predicts_the_params_of_apply_without_modifying():
    model = Toy()
    spec = CompressionSpec.parse(SPEC)
    predicted = spec.validate(model)
    assert isinstance(model.encoder.layers[0].fc1, nn.Linear)
    applied = spec.apply(model)
    assert [(r.name, r.params_after) for r in predicted] == [
        (r.name, r.params_after) for r in applied
    ]


def test_convert_at_full_rank_reproduces_the_dense_model():
    torch.manual_seed(0)
    model = Toy()
    tokens = torch.randint(0, 40, (3, 5))
    ref = model(tokens)
    spec = CompressionSpec.parse(
        "*.fc1,*.fc2=lowrank(rank=16); *.q_proj=tt(in_shape=4x4, out_shape=4x4, ranks=16);"
        "*.k_proj=hmf(alpha=0.25, rank=12); *.v_proj=htt(alpha=0.5, in_shape=4x4, "
        "out_shape=2x4, ranks=8); encoder.embed_tokens=htt_embedding(alpha=0.5, "
        "vocab_shape=5x8, dim_shape=2x4, ranks=10)"
    )
    report = spec.apply(model, mode="convert")
    assert isinstance(model.encoder.layers[1].self_attn.q_proj, TTLinear)
    assert isinstance(model.encoder.embed_tokens, HTTEmbedding)
    assert all(r.kept_energy == pytest.approx(1.0, abs=1e-5) for r in report)
    torch.testing.assert_close(model(tokens), ref, atol=1e-4, rtol=1e-4)


def test_convert_with_energy_reports_the_rank_used():
    model = Toy()
    report = CompressionSpec.parse("*.fc1=lowrank(energy=0.8)").apply(model, mode="convert")
    for rec in report:
        assert rec.kept_energy >= 0.8 and 1 <= rec.rank <= 16
        assert rec.params_after == LowRankLinear.num_params(16, 32, rec.rank)


def test_first_matching_rule_wins():
    model = Toy()
    CompressionSpec.parse("encoder.layers.0.fc1=dense; *.fc1=lowrank(rank=2)").apply(model)
    assert isinstance(model.encoder.layers[0].fc1, nn.Linear)
    assert isinstance(model.encoder.layers[1].fc1, LowRankLinear)


def test_count_params_dispatches_to_the_layer_formulas():
    assert count_params("lowrank", 512, 512, ratio=2) == 128 * 1024 + 512
    assert count_params("dense", 16, 32) == 16 * 32 + 32
    assert count_params("cp", 16, 16, rank=3, heads=4) == CPLinear.num_params(16, 16, 3, 4)
    assert count_params("htt", 16, 16, alpha=0.5, ranks=4, in_shape=[4, 4]) == (
        HybridLinear.num_params(16, 16, 0.5, "tt", ranks=4, in_shape=[4, 4])
    )
    assert count_params("lowrank_embedding", 40, 16, rank=5) == 5 * 56


# Each invalid spec raises ONE SpecError whose message names the offending part.
INVALID = {
    "unknown_kind": ("*.fc1=svd(rank=2)", "unknown kind 'svd'"),
    "unknown_param": (
        "*.fc1=lowrank(rank=2, alpha=0.5)",
        r"unknown parameter\(s\) \['alpha'\]",
    ),
    "missing_param": ("*.v_proj=htt(alpha=0.5)", r"missing parameter\(s\) \['ranks'\]"),
    "two_rank_sources": ("*.fc1=lowrank(rank=2, ratio=2)", "exactly one of"),
    "no_rank_source": ("*.fc1=lowrank", "exactly one of"),
    "rank_zero": ("*.fc1=lowrank(rank=0)", "rank=0 must be an integer >= 1"),
    "rank_too_large": ("*.fc1=lowrank(rank=17)", r"rank 17 .* invalid for a 32x16"),
    "alpha_out_of_range": (
        "*.v_proj=hmf(alpha=1.5, rank=2)",
        "alpha=1.5 must be a number in",
    ),
    "core_shape_product": (
        "*.q_proj=tt(in_shape=4x8, out_shape=4x4, ranks=2)",
        "in_shape 4x8 has product 32, but in_features is 16",
    ),
    "tt_rank_too_large": (
        "*.q_proj=tt(in_shape=4x4, out_shape=4x4, ranks=99)",
        "TT rank r1=99",
    ),
    "matches_nothing": (
        "decoder.*.fc1=lowrank(rank=2)",
        "'decoder.*.fc1' .* matches no module",
    ),
    "shadowed_by_earlier_rule": (
        "*.fc1=dense; encoder.*.fc1=lowrank(rank=2)",
        "already claimed",
    ),
    "wrong_type": (
        "encoder.layers.*=lowrank(rank=2)",
        "TransformerEncoderLayer|Layer\\)",
    ),
    "embedding_kind_on_linear": (
        "*.fc1=lowrank_embedding(rank=2)",
        "replaces an nn.Embedding",
    ),
    "linear_only_kind_on_embedding": (
        "encoder.embed_tokens=cp(rank=2, heads=2)",
        "kind 'cp' has no form for an nn.Embedding",
    ),
    "energy_from_scratch": ("*.fc1=lowrank(energy=0.9)", "mode='convert'"),
    "cp_heads_divide": ("*.q_proj=cp(rank=2, heads=3)", "divisible by heads=3"),
    "bad_value": ("*.fc1=lowrank(rank=abc)", "rank='abc'"),
    "no_equals": ("*.fc1 lowrank", "has no '='"),
}


@pytest.mark.parametrize("case", sorted(INVALID))
def test_invalid_spec_raises_spec_error_naming_the_bad_part(case):
    text, message = INVALID[case]
    model = Toy()
    before = {n: type(m) for n, m in model.named_modules()}
    with pytest.raises(SpecError, match=message) as info:
        CompressionSpec.parse(text).validate(model)
    rule = text.split(";")[-1].strip()
    assert rule.split("=")[0].strip() in str(info.value)  # names the rule
    assert before == {n: type(m) for n, m in model.named_modules()}


def test_module_level_errors_name_the_module():
    with pytest.raises(SpecError, match=r"module 'encoder.layers.0.fc1' \(nn.Linear 16->32\)"):
        CompressionSpec.parse("*.fc1=lowrank(rank=17)").validate(Toy())


def test_apply_validates_everything_before_replacing_anything():
    model = Toy()
    with pytest.raises(SpecError):
        CompressionSpec.parse("*.fc1=lowrank(rank=2); *.fc2=lowrank(rank=99)").apply(model)
    assert all(isinstance(layer.fc1, nn.Linear) for layer in model.encoder.layers)
