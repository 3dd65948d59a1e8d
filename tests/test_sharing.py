"""Layer-sharing schedules (LightFormer groups, Subformer Table 2), parameter tying, and the one
counter of unique parameters (by identity, and by storage for real tensors; meta-safe)."""

import io

import pytest
import torch
from torch import nn

from lightcompress.modules import (
    all_except_last,
    all_shared,
    count_unique_params,
    every_k,
    group_schedule,
    num_unique,
    sandwich_schedule,
    tie_layers,
)
from lightcompress.modules.sharing import unique_parameters


def test_group_schedule_makes_contiguous_groups():
    assert group_schedule(6, 3) == [0, 0, 1, 1, 2, 2]
    assert group_schedule(18, 6) == [g for g in range(6) for _ in range(3)]
    assert group_schedule(7, 3) == [0, 0, 0, 1, 1, 2, 2]  # numpy.array_split sizes
    with pytest.raises(ValueError):
        group_schedule(3, 4)


def test_sandwich_shares_all_but_the_first_and_last_layer():
    assert sandwich_schedule(6) == [0, 1, 1, 1, 1, 2]
    assert sandwich_schedule(2) == [0, 1]


def test_subformer_table2_variants():
    assert all_shared(4) == [0, 0, 0, 0]
    assert all_except_last(4) == [0, 0, 0, 1]
    assert every_k(6, 2) == [0, 0, 1, 1, 2, 2]  # [1, 2], [3, 4], [5, 6]
    assert every_k(5, 2) == [0, 0, 1, 1, 2]
    assert num_unique(sandwich_schedule(8)) == 3


class Block(nn.Module):
    def __init__(self, d=8):
        super().__init__()
        self.fc1 = nn.Linear(d, 2 * d)
        self.fc2 = nn.Linear(2 * d, d)
        self.layer_norm = nn.LayerNorm(d)


def per_layer_params(d=8):
    return sum(p.numel() for p in Block(d).parameters())


def test_tied_layers_share_the_same_parameter_objects_and_count_once():
    layers = nn.ModuleList([Block() for _ in range(6)])
    tie_layers(layers, group_schedule(6, 2))
    assert layers[0].fc1.weight is layers[2].fc1.weight
    assert layers[3].fc2.bias is layers[5].fc2.bias
    assert layers[0].fc1.weight is not layers[3].fc1.weight
    assert count_unique_params(layers) == 2 * per_layer_params()


def test_share_filter_keeps_layer_norms_independent_like_subformer():
    layers = nn.ModuleList([Block() for _ in range(6)])
    tie_layers(layers, sandwich_schedule(6), share=lambda name: "layer_norm" not in name)
    assert layers[1].fc1.weight is layers[4].fc1.weight
    assert layers[1].layer_norm.weight is not layers[4].layer_norm.weight
    norm = sum(p.numel() for p in layers[0].layer_norm.parameters())
    expected = 3 * per_layer_params() + 3 * norm  # 3 unique layers + 3 extra LayerNorms
    assert count_unique_params(layers) == expected


def test_ties_survive_a_state_dict_round_trip():
    layers = nn.ModuleList([Block() for _ in range(4)])
    tie_layers(layers, all_shared(4))
    buf = io.BytesIO()
    torch.save(layers.state_dict(), buf)
    fresh = nn.ModuleList([Block() for _ in range(4)])
    tie_layers(fresh, all_shared(4))  # ties are re-made at build time
    buf.seek(0)
    fresh.load_state_dict(torch.load(buf))
    assert fresh[0].fc1.weight is fresh[3].fc1.weight
    torch.testing.assert_close(fresh[3].fc1.weight, layers[0].fc1.weight)
    with torch.no_grad():
        fresh[0].fc1.weight.add_(1.0)
    assert torch.equal(fresh[0].fc1.weight, fresh[3].fc1.weight)


def test_gradients_of_tied_layers_accumulate_into_one_parameter():
    layers = nn.ModuleList([Block() for _ in range(3)])
    tie_layers(layers, all_shared(3))
    x = torch.randn(2, 8)
    for layer in layers:
        x = layer.fc2(layer.fc1(x))
    x.sum().backward()
    params = list(layers.parameters())  # deduplicated
    assert len(params) == len(list(Block().parameters()))
    grads = [layers[0].fc1.weight.grad, layers[2].fc2.bias.grad]
    assert all(g is not None and g.abs().sum() > 0 for g in grads)


def test_count_unique_params_counts_storage_shared_tensors_once():
    a, b = nn.Linear(4, 4), nn.Linear(4, 4)
    b.weight = nn.Parameter(a.weight.data)  # same storage, different Parameter object
    model = nn.ModuleList([a, b])
    assert count_unique_params(model) == 16 + 4 + 4


# --- counting unique parameters: meta, tied and shared -------------------------------------


def test_distinct_tensors_of_equal_shape_on_the_meta_device_are_all_counted():
    # meta tensors have no storage (all report address 0): only identity may merge them
    model = nn.Sequential(nn.Linear(4, 4), nn.Linear(4, 4)).to("meta")
    assert count_unique_params(model) == 40
    real = nn.Sequential(nn.Linear(4, 4), nn.Linear(4, 4))
    assert count_unique_params(real) == 40


def test_a_module_used_twice_counts_once_on_real_and_meta_tensors():
    for device in ("cpu", "meta"):
        layer = nn.Linear(4, 4, device=device)
        assert count_unique_params(nn.Sequential(layer, layer, nn.Linear(4, 4))) == 40


def test_tied_weights_count_once_on_the_meta_device():
    with torch.device("meta"):
        emb = nn.Embedding(10, 4)
        out = nn.Linear(4, 10, bias=False)
    out.weight = emb.weight  # tied output projection
    model = nn.ModuleDict({"embed_tokens": emb, "output_projection": out})
    assert count_unique_params(model) == 40
    groups = unique_parameters(model)
    assert len(groups) == 1
    assert groups[0][1] == ["embed_tokens.weight", "output_projection.weight"]


def test_tie_layers_counts_the_same_on_meta_and_real_tensors():
    counts = {}
    for device in ("cpu", "meta"):
        with torch.device(device):
            layers = nn.ModuleList([Block() for _ in range(6)])
        tie_layers(layers, group_schedule(6, 3))
        counts[device] = count_unique_params(layers)
    assert counts["cpu"] == counts["meta"] == 3 * per_layer_params()


def test_views_of_one_storage_are_distinct_unless_they_are_the_same_view():
    m = nn.Module()
    base = torch.zeros(8)
    m.a = nn.Parameter(base[:4])
    m.b = nn.Parameter(base[4:])  # the other half of the same storage: distinct values
    m.c = nn.Parameter(base[:4])  # the same view as ``a``: the same values
    assert count_unique_params(m) == 8
    assert [names for _, names in unique_parameters(m)] == [["a", "c"], ["b"]]


def test_trainable_only_skips_frozen_parameters():
    model = nn.Sequential(nn.Linear(4, 4), nn.Linear(4, 4))
    model[0].requires_grad_(False)
    assert count_unique_params(model, trainable_only=True) == 20
    assert count_unique_params(model) == 40
