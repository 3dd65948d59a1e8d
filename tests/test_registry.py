"""The kind registry: every kind registers once, with a schema, build, exact count, weight
transfer and int8 handler; the spec and the build hooks look kinds up there."""

import pytest
import torch
from torch import nn

from lightcompress.errors import SpecError
from lightcompress.modules import CompressionSpec, SpecPlan, count_params
from lightcompress.modules.registry import (
    ALIASES,
    KINDS,
    QUANTIZE,
    Shape,
    canonical_kind,
    get_variant,
)

# (kind, target, shape, params at which from_dense is exact)
EXACT = [
    ("lowrank", "linear", Shape(16, 12), {"rank": 12}),
    ("tt", "linear", Shape(16, 12), {"ranks": 0, "in_shape": [4, 4], "out_shape": [3, 4]}),
    ("htt", "linear", Shape(16, 12), {"alpha": 0.25, "ranks": 0, "in_shape": [4, 4]}),
    ("hmf", "linear", Shape(16, 12), {"alpha": 0.5, "rank": 6}),
    # (rank 16: the largest rank of an (8, 4, 4) tensor; a higher CP rank is refused)
    ("cp", "linear", Shape(16, 8), {"rank": 16, "heads": 4}),
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
    torch.testing.assert_close(
        _apply(target, fitted, x), _apply(target, dense, x), atol=1e-4, rtol=1e-4
    )


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
    from lightcompress.measure.specs import build_random_model
    from lightcompress.modules import LowRankLinear

    tiny = [
        "--encoder-layers",
        "2",
        "--decoder-layers",
        "1",
        "--encoder-embed-dim",
        "16",
        "--decoder-embed-dim",
        "16",
        "--encoder-ffn-embed-dim",
        "32",
        "--decoder-ffn-embed-dim",
        "32",
        "--encoder-attention-heads",
        "2",
        "--decoder-attention-heads",
        "2",
        "--lc-encoder-groups",
        "0",
    ]
    model = build_random_model(
        "lightformer", 30, [*tiny, "--lc-spec", "encoder.layers.1.fc1 = lowrank(rank=3)"]
    )
    assert isinstance(model.encoder.layers[1].fc1, LowRankLinear)
    assert type(model.encoder.layers[0].fc1) is nn.Linear
    with pytest.raises(Exception, match="encoder.layers.5"):
        build_random_model(
            "lightformer", 30, [*tiny, "--lc-spec", "encoder.layers.5.fc1 = lowrank(rank=3)"]
        )


def _read(path):
    with open(path) as f:
        return f.read()


def test_every_architecture_the_recipes_and_readmes_name_is_a_preset():
    """The recipe headers and READMEs name architectures of the one presets table (a renamed
    or removed preset fails here, not after days of training)."""
    import glob
    import os
    import re

    from fairseq.models import ARCH_MODEL_NAME_REGISTRY, ARCH_MODEL_REGISTRY

    from lightcompress.models.presets import PRESETS

    root = os.path.join(os.path.dirname(__file__), "..")
    files = [
        f
        for pattern in ("examples/**/*.sh", "examples/**/*.md", "README.md", "docs/**/*.md")
        for f in glob.glob(os.path.join(root, pattern), recursive=True)
        if not f.endswith("demo.sh")  # its run directories are named lightformer_svd etc.
    ]
    names = {
        m.group(1): f
        for f in files
        for m in re.finditer(r"\b((?:lightformer|hypoformer|subformer)(?:_[a-z0-9]+)*)\b", _read(f))
    }
    not_archs = {
        "lightformer_svd",
        "lightformer_random",
        "lightformer_random_total",
        "lightformer_spec_text",
        "hypoformer_spec_text",
        "hypoformer_kd",  # a run of lab/results/
        "lightformer_keep_depth",  # a row of lab/results/converged.py
        "subformer_fairseq_init",  # ... another row of it
        "subformer_bert_init",  # ... and another
        "subformer_toy",  # lab/results/subformer_toy.sh
        "subformer_init",  # lab/results/device/subformer_init.sh
        "lightformer_init",  # its SVD student's converted checkpoint (lightformer_init.pt)
        "lightformer_shallow",  # remeasure.sh's shallow-decoder LightFormer run ...
        "lightformer_shallow_init",  # ... and its converted checkpoint
        "lightformer_rank",  # examples/translation/dawid/lightformer_rank.py
    }  # run names, functions, files
    assert len(names) > 30
    unknown = {
        n: os.path.relpath(f, root)
        for n, f in names.items()
        if n not in PRESETS and n not in ARCH_MODEL_REGISTRY and n not in not_archs
    }
    assert not unknown, unknown
    for name, preset in PRESETS.items():
        assert ARCH_MODEL_NAME_REGISTRY[name] == preset.model
        assert preset.doc


def test_cp_transfer_is_reachable_from_the_converter_cli(tmp_path):
    """lightcompress-convert fits CP factors (Smartformer's CPAC projections) through a spec
    rule: every registered transfer (SVD, TT-SVD, CP) is reachable from the command line."""
    from fairseq import options

    from lightcompress.convert.cli import cli_main
    from lightcompress.convert.core import build_fairseq_model
    from lightcompress.modules import CPLinear

    tiny = [
        "--encoder-layers",
        "2",
        "--decoder-layers",
        "1",
        "--encoder-embed-dim",
        "16",
        "--decoder-embed-dim",
        "16",
        "--encoder-ffn-embed-dim",
        "32",
        "--decoder-ffn-embed-dim",
        "32",
        "--encoder-attention-heads",
        "2",
        "--decoder-attention-heads",
        "2",
        "--dropout",
        "0",
    ]
    argv = [
        "/tmp/none",
        "--task",
        "translation",
        "--arch",
        "transformer",
        "-s",
        "de",
        "-t",
        "en",
        "--share-all-embeddings",
        *tiny,
    ]
    targs = options.parse_args_and_arch(options.get_training_parser(), argv)
    torch.manual_seed(0)
    teacher = build_fairseq_model(targs, 30).eval()
    from lightcompress.modules import cp_to_dense

    with torch.no_grad():  # projections that are exact CP rank-3 tensors over (heads, d_k)
        for layer in teacher.encoder.layers:
            for name in ("q_proj", "k_proj", "v_proj"):
                lin = getattr(layer.self_attn, name)
                lin.weight.copy_(
                    cp_to_dense(torch.randn(16, 3), torch.randn(2, 3), torch.randn(8, 3)) / 4
                )
    path = tmp_path / "teacher.pt"
    torch.save({"args": targs, "model": teacher.state_dict(), "optimizer_history": []}, path)
    out = tmp_path / "cp.pt"
    spec = "encoder.layers.*.self_attn.[qkv]_proj = cp(rank=3, heads=2)"  # exact at rank 3
    assert (
        cli_main(
            [
                "-i",
                str(path),
                "-o",
                str(out),
                "-a",
                "lightformer",
                "--quiet",
                *tiny,
                "--lc-encoder-groups",
                "0",
                "--lc-spec",
                spec,
            ]
        )
        == 0
    )
    state = torch.load(out)
    student = build_fairseq_model(state["args"], 30).eval()
    student.load_state_dict(state["model"], strict=True)
    assert isinstance(student.encoder.layers[0].self_attn.q_proj, CPLinear)
    g = torch.Generator().manual_seed(0)
    src = torch.randint(4, 30, (2, 6), generator=g)
    src[:, -1] = 2
    prev = torch.randint(4, 30, (2, 4), generator=g)
    prev[:, 0] = 2
    lengths = torch.full((2,), 6)
    with torch.no_grad():
        torch.testing.assert_close(
            student(src, lengths, prev)[0], teacher(src, lengths, prev)[0], atol=1e-3, rtol=1e-3
        )
