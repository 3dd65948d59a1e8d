"""Unit tests of the factorized layers and embeddings against dense ``nn.Linear``/``Embedding``."""

import math

import pytest
import torch
import torch.nn.functional as F
from torch import nn

from lightcompress.modules import (
    CPLinear,
    HTTEmbedding,
    HybridLinear,
    LowRankEmbedding,
    LowRankLinear,
    TTLinear,
    cp_to_dense,
    dense_columns,
    factorize_dim,
    max_tt_ranks,
    pad_factorize,
    ratio_rank,
    resolve_rank,
    svd_factors,
)

IN, OUT = 24, 30  # small shapes: 24 = 2x3x4, 30 = 5x3x2


@pytest.fixture(autouse=True)
def _seed():
    torch.manual_seed(0)


def dense_linear(in_f=IN, out_f=OUT, bias=True):
    lin = nn.Linear(in_f, out_f, bias=bias)
    with torch.no_grad():
        lin.weight.normal_()
        if bias:
            lin.bias.normal_()
    return lin


def cp_dense_linear(rank=3, heads=4, d_k=6, out_f=12):
    """A dense layer whose weight is exactly a rank-``rank`` CP tensor."""
    w = cp_to_dense(torch.randn(out_f, rank), torch.randn(heads, rank), torch.randn(d_k, rank))
    lin = nn.Linear(heads * d_k, out_f)
    with torch.no_grad():
        lin.weight.copy_(w)
    return lin


# name -> (factory(dense) -> full-rank transfer, factory() -> from scratch, num_params(...))
FULL_RANK = {
    "lowrank": lambda lin: LowRankLinear.from_linear(lin, rank=min(IN, OUT)),
    "tt": lambda lin: TTLinear.from_linear(lin, [2, 3, 4], [5, 3, 2]),
    "htt": lambda lin: HybridLinear.from_linear(lin, 0.4, "tt", in_shape=[2, 3, 4]),
    "hmf": lambda lin: HybridLinear.from_linear(lin, 0.4, "lowrank", rank=18),
    "hybrid_all_dense": lambda lin: HybridLinear.from_linear(lin, 1.0, "tt"),
    "hybrid_all_tt": lambda lin: HybridLinear.from_linear(lin, 0.0, "tt", in_shape=[2, 3, 4]),
}

SCRATCH = {
    "lowrank": (
        lambda: LowRankLinear(IN, OUT, 5),
        lambda: LowRankLinear.num_params(IN, OUT, 5),
    ),
    "lowrank_nobias": (
        lambda: LowRankLinear(IN, OUT, 5, bias=False),
        lambda: LowRankLinear.num_params(IN, OUT, 5, bias=False),
    ),
    "tt_3cores": (
        lambda: TTLinear([2, 3, 4], [5, 3, 2], [3, 4]),
        lambda: TTLinear.num_params([2, 3, 4], [5, 3, 2], [3, 4]),
    ),
    "tt_2cores": (
        lambda: TTLinear([4, 6], [6, 5], 7),
        lambda: TTLinear.num_params([4, 6], [6, 5], 7),
    ),
    "tt_4cores": (
        lambda: TTLinear([2, 2, 2, 3], [2, 3, 5, 1], [2, 3, 2]),
        lambda: TTLinear.num_params([2, 2, 2, 3], [2, 3, 5, 1], [2, 3, 2]),
    ),
    "htt": (
        lambda: HybridLinear(IN, OUT, 0.4, "tt", ranks=3, in_shape=[2, 3, 4]),
        lambda: HybridLinear.num_params(IN, OUT, 0.4, "tt", ranks=3, in_shape=[2, 3, 4]),
    ),
    "hmf": (
        lambda: HybridLinear(IN, OUT, 0.5, "lowrank", rank=4),
        lambda: HybridLinear.num_params(IN, OUT, 0.5, "lowrank", rank=4),
    ),
    "cp": (
        lambda: CPLinear(IN, OUT, 5, heads=4),
        lambda: CPLinear.num_params(IN, OUT, 5, heads=4),
    ),
}


@pytest.mark.parametrize("kind", sorted(FULL_RANK))
def test_full_rank_transfer_reproduces_the_dense_layer(kind):
    lin = dense_linear()
    layer = FULL_RANK[kind](lin)
    x = torch.randn(5, 3, IN)  # fairseq's T x B x C
    torch.testing.assert_close(layer(x), lin(x), atol=1e-4, rtol=1e-4)
    torch.testing.assert_close(layer.to_dense(), lin.weight, atol=1e-4, rtol=1e-4)
    assert layer.kept_energy == pytest.approx(1.0, abs=1e-6)
    assert (layer.in_features, layer.out_features) == (IN, OUT)


def test_cp_transfer_at_an_exact_cp_rank_reproduces_the_dense_layer():
    lin = cp_dense_linear(rank=3)
    layer = CPLinear.from_linear(lin, rank=3, heads=4)
    x = torch.randn(7, 2, 24)
    torch.testing.assert_close(layer(x), lin(x), atol=1e-3, rtol=1e-3)
    assert layer.kept_energy > 1 - 1e-8


@pytest.mark.parametrize("kind", sorted(SCRATCH))
def test_num_params_formula_equals_the_parameter_count(kind):
    build, formula = SCRATCH[kind]
    layer = build()
    assert formula() == sum(p.numel() for p in layer.parameters())


@pytest.mark.parametrize("kind", sorted(SCRATCH))
def test_forward_equals_x_times_dense_weight_plus_bias(kind):
    layer = SCRATCH[kind][0]()
    x = torch.randn(4, 3, layer.in_features)
    ref = x @ layer.to_dense().T
    bias = getattr(layer, "bias", None)
    if isinstance(layer, HybridLinear):
        parts = [p.bias for p in (layer.dense, layer.factorized) if p is not None]
        bias = torch.cat(parts)
    if bias is not None:
        ref = ref + bias
    out = layer(x)
    assert out.shape == (4, 3, layer.out_features)
    torch.testing.assert_close(out, ref, atol=1e-5, rtol=1e-4)


@pytest.mark.parametrize("kind", sorted(SCRATCH))
def test_gradients_reach_every_factor(kind):
    layer = SCRATCH[kind][0]()
    layer(torch.randn(6, layer.in_features)).pow(2).sum().backward()
    for name, p in layer.named_parameters():
        assert p.grad is not None and p.grad.abs().sum() > 0, name


@pytest.mark.parametrize(
    "build",
    [
        lambda: LowRankLinear(256, 128, 16),
        lambda: TTLinear([8, 8, 4], [4, 8, 4], [8, 8]),
        lambda: CPLinear(256, 128, 16, heads=8),
    ],
    ids=["lowrank", "tt", "cp"],
)
def test_from_scratch_init_has_lecun_variance_one_over_in_features(build):
    torch.manual_seed(1)
    var = torch.stack([build().to_dense().var() for _ in range(4)]).mean().item()
    assert var * 256 == pytest.approx(1.0, rel=0.25)


def test_lowrank_transfer_uses_the_balanced_svd_split():
    lin = dense_linear()
    layer = LowRankLinear.from_linear(lin, rank=4)
    u, v, kept = svd_factors(lin.weight, 4)
    torch.testing.assert_close(layer.u.norm(dim=0), layer.v.norm(dim=1))
    torch.testing.assert_close(layer.to_dense(), u @ v)
    s = torch.linalg.svdvals(lin.weight)
    assert kept == pytest.approx(float((s[:4] ** 2).sum() / (s**2).sum()), rel=1e-5)
    assert layer.rank == 4 and layer.kept_energy == pytest.approx(kept)


def test_ratio_rank_is_floor_mn_over_p_m_plus_n():
    # LightFormer Appendix C, Eq. 12
    assert ratio_rank(512, 512, 2) == math.floor(512 * 512 / (2 * 1024)) == 128
    assert ratio_rank(1024, 512, 3) == math.floor(1024 * 512 / (3 * 1536))
    assert resolve_rank(512, 2048, ratio=4) == math.floor(512 * 2048 / (4 * 2560))


def test_energy_rank_keeps_the_smallest_rank_reaching_the_threshold():
    s = torch.tensor([3.0, 2.0, 1.0, 0.5])  # squares 9, 4, 1, 0.25 -> total 14.25
    assert resolve_rank(4, 4, energy=9 / 14.25, singular_values=s) == 1
    assert resolve_rank(4, 4, energy=0.64, singular_values=s) == 2
    assert resolve_rank(4, 4, energy=1.0, singular_values=s) == 4
    lin = dense_linear()
    layer = LowRankLinear.from_linear(lin, energy=0.9)
    assert layer.kept_energy >= 0.9
    sv = torch.linalg.svdvals(lin.weight)
    prev = float((sv[: layer.rank - 1] ** 2).sum() / (sv**2).sum())
    assert prev < 0.9


@pytest.mark.parametrize("rank", [0, -1, 25])
def test_invalid_rank_raises_naming_the_layer_shape(rank):
    with pytest.raises(ValueError, match="30x24"):
        LowRankLinear.from_linear(dense_linear(), rank=rank)


def test_tt_forward_contracts_cores_in_tednet_layout():
    layer = TTLinear([2, 3, 4], [5, 3, 2], [3, 4])
    shapes = [tuple(c.shape) for c in layer.cores]
    assert shapes == [(2, 5, 3), (3, 3, 3, 4), (4, 2, 4)]
    g1, g2, g3 = layer.cores
    # W[(j1 j2 j3), (i1 i2 i3)] = G1[i1, j1, :] G2[i2, j2, :, :] G3[i3, j3, :]
    w = torch.einsum("ajr,bkrs,cls->jklabc", g1, g2, g3).reshape(30, 24)
    torch.testing.assert_close(layer.to_dense(), w)


def test_tt_svd_truncation_keeps_less_energy_and_fewer_params():
    lin = dense_linear()
    full = TTLinear.from_linear(lin, [2, 3, 4], [5, 3, 2])
    small = TTLinear.from_linear(lin, [2, 3, 4], [5, 3, 2], ranks=[3, 3])
    assert full.rank == max_tt_ranks([2, 3, 4], [5, 3, 2]) == [10, 8]
    assert 0 < small.kept_energy < 1
    err = (small.to_dense() - lin.weight).pow(2).sum() / lin.weight.pow(2).sum()
    assert small.kept_energy == pytest.approx(1 - err.item(), abs=1e-5)
    assert sum(p.numel() for p in small.parameters()) < sum(p.numel() for p in full.parameters())


def test_tt_shapes_must_multiply_to_the_layer_size():
    with pytest.raises(ValueError, match="in_shape 2x3x5 has product 30, but in_features is 24"):
        TTLinear.from_linear(dense_linear(), [2, 3, 5], [5, 3, 2])
    with pytest.raises(ValueError, match="rank"):
        TTLinear([2, 3], [5, 3], [100])


def test_factorize_dim_is_balanced_and_explains_impossible_splits():
    assert factorize_dim(512, 3) == [8, 8, 8]
    assert factorize_dim(1536, 3) == [8, 12, 16]
    assert math.prod(factorize_dim(2048, 4)) == 2048
    assert factorize_dim(13, 2, allow_ones=True) == [1, 13]
    with pytest.raises(ValueError, match="cannot split 13 into 2 factors > 1"):
        factorize_dim(13, 2)
    assert pad_factorize(10152, 3) == [21, 22, 22]


def test_hybrid_output_columns_put_the_dense_part_first():
    lin = dense_linear()
    layer = HybridLinear.from_linear(lin, 0.4, "lowrank", rank=2)
    nd = dense_columns(0.4, OUT)
    assert nd == layer.num_dense == 12
    x = torch.randn(3, IN)
    torch.testing.assert_close(layer(x)[:, :nd], lin(x)[:, :nd])
    assert not torch.allclose(layer(x)[:, nd:], lin(x)[:, nd:], atol=1e-3)
    assert dense_columns(0.5, 3) == 2  # round half up
    with pytest.raises(ValueError, match="alpha"):
        HybridLinear(IN, OUT, 1.5, "tt", ranks=2)


def test_cp_set_rank_refits_and_replaces_the_parameters():
    lin = cp_dense_linear(rank=3)
    layer = CPLinear.from_linear(lin, rank=3, heads=4)
    old = layer.w0
    kept = layer.set_rank(2)
    assert layer.w0 is not old and layer.rank == 2
    assert layer.w0.shape == (12, 2) and 0 < kept < 1
    assert sum(p.numel() for p in layer.parameters()) == CPLinear.num_params(24, 12, 2, 4)


def test_layers_accept_bias_free_dense_layers():
    lin = dense_linear(bias=False)
    for layer in (
        LowRankLinear.from_linear(lin, rank=3),
        TTLinear.from_linear(lin, [4, 6]),
    ):
        assert layer.bias is None


# ---------------------------------------------------------------- embeddings

V, D, PAD = 50, 12, 1


def dense_embedding():
    emb = nn.Embedding(V, D, padding_idx=PAD)
    nn.init.normal_(emb.weight, std=D**-0.5)
    with torch.no_grad():
        emb.weight[PAD].zero_()
    return emb


EMBEDDINGS = {
    "lowrank": lambda: LowRankEmbedding(V, D, 4, padding_idx=PAD),
    "htt": lambda: HTTEmbedding(V, D, 0.5, ranks=3, padding_idx=PAD, num_cores=2),
    "htt_all_tt": lambda: HTTEmbedding(V, D, 0.0, ranks=[3, 3], padding_idx=PAD),
}


@pytest.mark.parametrize("kind", sorted(EMBEDDINGS))
def test_embedding_padding_row_is_zero_and_output_tying_works(kind):
    emb = EMBEDDINGS[kind]()
    assert (emb.num_embeddings, emb.embedding_dim, emb.padding_idx) == (V, D, PAD)
    tokens = torch.tensor([[2, PAD, 7], [PAD, 3, 4]])
    out = emb(tokens)
    assert out.shape == (2, 3, D)
    assert out[0, 1].abs().sum() == 0 and out[1, 0].abs().sum() == 0
    assert emb.weight.shape == (V, D) and emb.weight[PAD].abs().sum() == 0
    torch.testing.assert_close(out, emb.weight[tokens])
    logits = F.linear(out, emb.weight)  # tied output projection
    logits.sum().backward()
    assert all(p.grad is not None for p in emb.parameters())


@pytest.mark.parametrize("kind", sorted(EMBEDDINGS))
def test_embedding_init_matches_fairseq_variance_one_over_d(kind):
    torch.manual_seed(1)
    w = torch.cat([EMBEDDINGS[kind]().weight.detach() for _ in range(8)])
    assert w.var().item() * D == pytest.approx(1.0, rel=0.3)


def test_embedding_num_params_formulas():
    assert LowRankEmbedding.num_params(V, D, 4) == sum(
        p.numel() for p in EMBEDDINGS["lowrank"]().parameters()
    )
    assert HTTEmbedding.num_params(V, D, 0.5, 3, num_cores=2) == sum(
        p.numel() for p in EMBEDDINGS["htt"]().parameters()
    )


def test_full_rank_embedding_transfer_reproduces_the_table():
    emb = dense_embedding()
    low = LowRankEmbedding.from_embedding(emb, rank=D)
    htt = HTTEmbedding.from_embedding(emb, alpha=0.5, num_cores=2)  # maximal TT ranks
    tokens = torch.randint(0, V, (4, 5))
    for layer in (low, htt):
        torch.testing.assert_close(layer(tokens), emb(tokens), atol=1e-4, rtol=1e-4)
        assert layer.kept_energy == pytest.approx(1.0, abs=1e-6)
    assert math.prod(htt.tt.in_shape) >= V  # padded vocabulary


def test_htt_table_is_built_once_in_eval_and_invalidated_by_train_and_steps():
    emb = HTTEmbedding(V, D, 0.5, ranks=3, padding_idx=PAD, num_cores=2)
    tokens = torch.tensor([[2, 3, 4]])
    emb.eval()
    with torch.no_grad():
        first = emb(tokens)
        emb(tokens)
        F.linear(first, emb.weight)
    assert emb.table_builds == 1
    emb.train()
    opt = torch.optim.SGD(emb.parameters(), lr=0.1)
    emb(tokens).sum().backward()
    opt.step()
    emb.eval()
    with torch.no_grad():
        after_train = emb(tokens)
    assert not torch.allclose(first, after_train)
    builds = emb.table_builds
    # an optimizer step in eval mode (in-place update) also invalidates the cache
    emb.zero_grad()
    with torch.enable_grad():
        emb(tokens).sum().backward()
    opt.step()
    with torch.no_grad():
        after_step = emb(tokens)
        emb(tokens)
    assert emb.table_builds == builds + 2  # one differentiable build, one cached rebuild
    assert not torch.allclose(after_train, after_step)
    torch.testing.assert_close(after_step, emb.to_dense()[tokens])


@pytest.mark.parametrize(
    "in_shape,out_shape,ranks",
    [
        ([5, 4], [3, 2], [2]),
        ([2, 3, 4], [2, 2, 3], [3, 2]),
        ([3, 2, 2, 3], [2, 1, 2, 2], [2, 3, 2]),
    ],
)
def test_tt_columns_are_the_dense_matrixs_columns(in_shape, out_shape, ranks):
    """The columns of a TT matrix picked per id from its cores are those of the contracted
    matrix (row-major multi-indices over the input modes), for 2, 3 and 4 cores."""
    from lightcompress.modules.tensor_train import TTLinear, tt_columns, tt_to_dense

    torch.manual_seed(0)
    cores = list(TTLinear(in_shape, out_shape, ranks, bias=False).cores)
    dense = tt_to_dense(cores)  # [out x in]
    ids = torch.tensor([0, math.prod(in_shape) - 1, 7, 7, 3, 11])
    torch.testing.assert_close(tt_columns(cores, ids), dense[:, ids].t(), atol=1e-6, rtol=1e-5)
    assert tt_columns(cores, ids[:0]).shape == (0, math.prod(out_shape))


@pytest.mark.parametrize("alpha", [0.0, 0.5, 1.0])
def test_htt_lookup_from_the_factors_is_the_tables_rows(alpha):
    """``lookup`` (what the ONNX export traces) gives the rows of the table without building it:
    dense part, TT part or both; padding rows zero; any shape of tokens."""
    torch.manual_seed(0)
    emb = HTTEmbedding(V, D, alpha, ranks=3, padding_idx=PAD, num_cores=2).eval()
    with torch.no_grad():
        emb.dense is None or emb.dense[PAD].fill_(1.0)  # (lookup zeroes it, as the table does)
        for tokens in (
            torch.tensor([PAD, 2, V - 1, 2]),
            torch.randint(0, V, (3, 4)),
            torch.tensor([[PAD, 5], [6, PAD]]),
        ):
            builds = emb.table_builds
            rows = emb.lookup(tokens)
            assert emb.table_builds == builds  # (no table built)
            torch.testing.assert_close(rows, emb(tokens), atol=1e-6, rtol=1e-5)
            assert rows.shape == tokens.shape + (D,)
            assert not rows[tokens == PAD].any()


def test_modules_package_is_plain_pytorch_without_fairseq_imports():
    import ast
    import pathlib

    import lightcompress.modules as pkg

    for path in pathlib.Path(pkg.__file__).parent.glob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom):
                names = [node.module or ""]
            else:
                continue
            assert not any(n.split(".")[0] == "fairseq" for n in names), path.name
