"""Admin initialisation (Liu et al. 2020) on the plugin's post-LN Transformers.

Admin is chosen when the model is built (``--admin-init``); ``dense`` builds the plugin's
compressed Transformer with nothing compressed or shared, i.e. fairseq's dense Transformer with
the plugin's layers."""

import itertools
import json
import logging
import math

import pytest
import torch

import lightcompress.plugin  # noqa: F401
from lightcompress.admin import AdminResidual, admin_values, closed_form_omega
from lightcompress.measure.specs import build_random_model
from lightcompress.modules import count_unique_params

logging.disable(logging.WARNING)


def dense(layers=(2, 2), extra=(), admin="none", profile=None):
    """A dense, unshared post-LN transformer built by the plugin with ``--admin-init admin``."""
    args = [
        "--lc-factorize",
        "none",
        "--lc-encoder-groups",
        "0",
        "--admin-init",
        admin,
        *(["--admin-profile-file", str(profile)] if profile else []),
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
        "--encoder-layers",
        str(layers[0]),
        "--decoder-layers",
        str(layers[1]),
        "--dropout",
        "0",
        *extra,
    ]
    return build_random_model("lightformer", 40, args)


def batch(seed=0, bsz=4, length=9):
    g = torch.Generator().manual_seed(seed)
    src = torch.randint(4, 40, (bsz, length), generator=g)
    src[:, -1] = 2
    prev = torch.randint(4, 40, (bsz, 6), generator=g)
    prev[:, 0] = 2
    return src, torch.full((bsz,), length), prev


def test_closed_form_is_admin_torch_value():
    assert closed_form_omega(24) == pytest.approx(math.sqrt(25 / math.log(25) - 1))
    assert closed_form_omega(6) == pytest.approx(1.6116, abs=1e-4)


def test_closed_form_omegas_are_parameters_saved_and_counted():
    torch.manual_seed(0)
    before = count_unique_params(dense((3, 2)))
    model = dense((3, 2), admin="closed-form")
    values = admin_values(model)
    # one d-vector per residual: 2 per encoder layer, 3 per decoder layer
    assert count_unique_params(model) == before + 32 * (3 * 2 + 2 * 3)
    assert values["encoder.layers.0.self_attn"] == pytest.approx(closed_form_omega(6))
    assert values["decoder.layers.1.encoder_attn"] == pytest.approx(closed_form_omega(6))
    keys = model.state_dict().keys()
    assert "encoder.layers.2.admin.omega.ffn" in keys
    assert not any("residual_connection" in k for k in keys)
    # x_i = LN(x_(i-1) * omega + f(x_(i-1))): the layer's residual hook is exactly that
    layer = model.encoder.layers[0]
    x, res = torch.randn(3, 2, 32), torch.randn(3, 2, 32)
    layer.admin.start(["self_attn", "ffn"])
    torch.testing.assert_close(
        layer.residual_connection(x, res), res * values["encoder.layers.0.self_attn"] + x
    )


def test_profile_sets_omegas_on_first_training_batch_and_writes_them(tmp_path):
    torch.manual_seed(0)
    path = tmp_path / "profile.json"
    model = dense((3, 2), admin="profile", profile=path)
    src, lengths, prev = batch()
    model.train()
    model(src, lengths, prev)
    values = json.loads(path.read_text())
    assert len(values) == 3 * 2 + 2 * 3
    # the ratio starts at 1.0 per stack and grows along the stack
    assert values["encoder.layers.0.self_attn"] == 1.0
    assert values["decoder.layers.0.self_attn"] == 1.0
    enc = [values[f"encoder.layers.{i}.{s}"] for i in range(3) for s in ("self_attn", "ffn")]
    assert all(b > a for a, b in itertools.pairwise(enc))
    for name, v in values.items():
        layer, sub = name.rsplit(".", 1)
        omega = model.get_submodule(layer).admin.omega[sub]
        assert torch.allclose(omega, torch.full_like(omega, v))
    # a second batch does not re-profile
    snapshot = {k: v.clone() for k, v in model.state_dict().items() if "omega" in k}
    model(*batch(seed=1))
    assert all(torch.equal(v, model.state_dict()[k]) for k, v in snapshot.items())
    # a model built with an existing profile file reads it and never profiles
    other = dense((3, 2), admin="profile", profile=path)
    read = admin_values(other)
    assert read == pytest.approx(values)
    assert all(bool(m.profiled) for m in other.modules() if isinstance(m, AdminResidual))


def test_profile_file_missing_a_layer_is_refused(tmp_path):
    path = tmp_path / "p.json"
    path.write_text(json.dumps({"encoder.layers.0.self_attn": 1.0}))
    with pytest.raises(ValueError, match="no value"):
        dense(admin="profile", profile=path)


def test_pre_ln_is_refused():
    with pytest.raises(ValueError, match="post-LN"):
        dense(
            extra=["--encoder-normalize-before", "--decoder-normalize-before"], admin="closed-form"
        )


def _output_change(model, seed=0, eps=0.01):
    """E|f(x, w) - f(x, w + delta)|^2 for a relative weight perturbation (Liu et al. Fig. 5)."""
    src, lengths, _ = batch()
    model.eval()
    with torch.no_grad():
        base = model.encoder(src, src_lengths=lengths)["encoder_out"][0]
        g = torch.Generator().manual_seed(seed)
        for name, p in model.named_parameters():
            if p.dim() == 2 and "embed" not in name:
                p.add_(eps * p.std() * torch.randn(p.shape, generator=g))
        moved = model.encoder(src, src_lengths=lengths)["encoder_out"][0]
    return float((moved - base).pow(2).mean())


def test_closed_form_admin_bounds_output_change_of_a_12_layer_post_ln_encoder():
    """Post-LN's output change under a small weight update grows with depth; with Admin it is
    clearly smaller at 12 layers and grows about half as fast from 2 to 12 layers."""
    change = {}
    for admin in ("none", "closed-form"):
        for depth in (2, 12):
            torch.manual_seed(0)
            model = dense((depth, 1), admin=admin)
            change[admin, depth] = _output_change(model)
    growth_plain = change["none", 12] / change["none", 2]
    growth_admin = change["closed-form", 12] / change["closed-form", 2]
    assert growth_plain > 3.0, change
    assert growth_admin < 0.6 * growth_plain, change
    assert change["closed-form", 12] < 0.5 * change["none", 12], change


def _branch_shares(model):
    """beta_i = Var(f_i) / Var(x_(i-1) omega_i + f_i) for every encoder residual, in order."""
    shares = []
    for layer in model.encoder.layers:
        orig = layer.residual_connection

        def record(x, residual, orig=orig):
            out = orig(x, residual)
            shares.append(float(x.detach().var() / out.detach().var()))
            return out

        object.__setattr__(layer, "residual_connection", record)
    model.train()
    model(*batch(seed=3))
    return shares


def test_profiled_admin_makes_deep_sublayers_depend_less_on_their_residual_branch():
    """Admin's design (Liu et al. 2020): omega_i grows with depth, so the share of the residual
    branch in x_i shrinks along the stack, while in post-LN it does not shrink."""
    torch.manual_seed(0)
    plain = dense((12, 1))
    torch.manual_seed(0)
    admin = dense((12, 1), admin="profile")
    p = _branch_shares(plain)
    a = _branch_shares(admin)  # the first training batch is the profiling batch
    assert len(p) == len(a) == 24
    assert a[0] == pytest.approx(p[0], rel=1e-5)  # omega_1 = 1: the first sublayer is unchanged

    def mean(xs):
        return sum(xs) / len(xs)

    # post-LN: the last four sublayers lean on their branch as much as the first four
    assert mean(p[-4:]) > 0.5 * mean(p[:4]), p
    # Admin: much less, and far less than post-LN at the same depth
    assert mean(a[-4:]) < 0.5 * mean(a[:4]), a
    assert mean(a[-4:]) < 0.3 * mean(p[-4:]), (a, p)
    assert all(x < y for x, y in zip(a[4:], p[4:])), (a, p)


def test_profile_file_gets_the_users_umask(tmp_path):
    """The profile used to be written with mode 0600 (mkstemp); it follows the umask now."""
    import os

    from lightcompress.admin import write_profile

    old = os.umask(0o022)
    try:
        write_profile(str(tmp_path / "p.json"), {"encoder.layers.0.self_attn": 1.0})
    finally:
        os.umask(old)
    assert (tmp_path / "p.json").stat().st_mode & 0o777 == 0o644
