"""DA-WID (lightcompress.wid): data-aware compactor initialisation, hard-concrete masks under the
Lagrangian, fusion into an ordinary smaller model, and the errors for bad input. Tiny models
built without data; the fairseq-train -> fuse -> generate pipeline is in test_wid_e2e.py."""

import argparse

import harness
import pytest
import torch

import lightcompress.plugin  # noqa: F401  (registers the plugin)
from lightcompress.errors import ConfigError
from lightcompress.measure.params import count_parameters
from lightcompress.wid import fuse
from lightcompress.wid.calibrate import qk_compactors, site_compactors, vo_compactors
from lightcompress.wid.data_aware import init_data_aware
from lightcompress.wid.fused_model import fuse_model
from lightcompress.wid.model import DAWIDModel, dawid_architecture
from lightcompress.wid.teacher import check_teacher

TINY = [
    "--encoder-layers",
    2,
    "--decoder-layers",
    2,
    "--encoder-embed-dim",
    16,
    "--decoder-embed-dim",
    16,
    "--encoder-ffn-embed-dim",
    32,
    "--decoder-ffn-embed-dim",
    32,
    "--encoder-attention-heads",
    2,
    "--decoder-attention-heads",
    2,
    "--share-all-embeddings",
    "--dropout",
    0,
]
VOCAB = 30


def _teacher(seed=0, flags=()):
    from lightcompress.build import parse_model_args

    torch.manual_seed(seed)
    targs = parse_model_args("transformer", [str(a) for a in TINY + list(flags)])
    teacher = harness.build_without_data("transformer", VOCAB, [str(a) for a in TINY + list(flags)])
    teacher.eval()
    return targs, teacher


def _student(targs, teacher, levels=("dim", "head", "layer"), **flags):
    args = argparse.Namespace(dawid_init="identity", **flags)
    dawid_architecture(args)
    return DAWIDModel.from_teacher(args, targs, teacher, list(levels))


def _batch(seed=1, bsz=3, src_len=7, tgt_len=5):
    g = torch.Generator().manual_seed(seed)
    src = torch.randint(4, VOCAB, (bsz, src_len), generator=g)
    src[0, :2] = 1  # left padding, as fairseq collates sources
    prev = torch.randint(4, VOCAB, (bsz, tgt_len), generator=g)
    prev[:, 0] = 2
    prev[1, -2:] = 1
    return src, (src != 1).sum(1), prev


def _correlated(n, d, rank, seed=0, noise=0.05):
    g = torch.Generator().manual_seed(seed)
    basis = torch.randn(rank, d, generator=g) * torch.linspace(3.0, 0.5, rank)[:, None]
    return torch.randn(n, rank, generator=g) @ basis + noise * torch.randn(n, d, generator=g)


# ------------------------------------------------------------------ data-aware initialisation


@pytest.mark.parametrize("keep", [4, 8])
def test_data_aware_site_compactors_reconstruct_correlated_features_better_than_identity(keep):
    d = 16
    x = _correlated(512, d, rank=6)
    c_in, c_out, bias = site_compactors(x, torch.ones(d), torch.zeros(d))
    assert torch.allclose(
        c_in @ c_in.T, torch.eye(d), atol=1e-5
    )  # U^T U = I: nothing lost at full width
    assert torch.equal(bias, torch.zeros(d))
    data_aware = x @ c_in[:keep].T @ c_out[:, :keep].T  # (U_k U_k^T X^T)^T
    # identity (WID): keep the `keep` coordinates with the most energy (the best it can do)
    best = x.pow(2).sum(0).topk(keep).indices
    identity = torch.zeros_like(x)
    identity[:, best] = x[:, best]
    err_da = (x - data_aware).norm() / x.norm()
    err_id = (x - identity).norm() / x.norm()
    assert err_da < 0.6 * err_id, (err_da, err_id)


def test_data_aware_qk_compactors_keep_scores_and_approximate_them_better_than_identity():
    dh = 16
    q = _correlated(300, dh, rank=5, seed=1)
    k = _correlated(200, dh, rank=5, seed=2)
    c_q, c_k = qk_compactors(q, k)
    assert torch.allclose(c_q.T @ c_k, torch.eye(dh), atol=1e-4)  # scores unchanged at full width
    scores = q @ k.T
    for r in (3, 6):
        da = (q @ c_q[:r].T) @ (k @ c_k[:r].T).T
        identity = q[:, :r] @ k[:, :r].T
        err_da = (scores - da).norm() / scores.norm()
        err_id = (scores - identity).norm() / scores.norm()
        assert err_da < 0.5 * err_id, (r, err_da, err_id)


def test_data_aware_vo_compactors_project_on_the_principal_components():
    ctx = _correlated(300, 16, rank=4, seed=3)
    c_v, c_o = vo_compactors(ctx)
    assert torch.allclose(c_o @ c_v, torch.eye(16), atol=1e-5)
    da = ctx @ c_v[:4].T @ c_o[:, :4].T
    identity = ctx.clone()
    identity[:, 4:] = 0
    assert (ctx - da).norm() < 0.3 * (ctx - identity).norm()


def test_too_few_calibration_tokens_for_the_width_are_refused():
    with pytest.raises(ValueError, match="cannot span width 16"):
        site_compactors(torch.randn(10, 16), torch.ones(16), torch.zeros(16))
    targs, teacher = _teacher()
    student = _student(targs, teacher)
    src, lengths, prev = _batch()
    batches = [
        {"net_input": {"src_tokens": src, "src_lengths": lengths, "prev_output_tokens": prev}}
    ]
    with pytest.raises(ConfigError, match="calib-tokens.*cannot span"):
        init_data_aware(student, teacher, batches, n_tokens=4096)  # the batch has ~19 tokens


def test_data_aware_init_of_a_model_sets_orthogonal_site_compactors_and_keeps_attention_scores():
    targs, teacher = _teacher()
    student = _student(targs, teacher, levels=())
    batches = []
    for seed in range(8):
        src, lengths, prev = _batch(seed, bsz=8, src_len=9, tgt_len=9)
        batches.append(
            {"net_input": {"src_tokens": src, "src_lengths": lengths, "prev_output_tokens": prev}}
        )
    init_data_aware(student, teacher, batches, n_tokens=64)
    site = student.encoder.layers[0].blocks[0].site
    assert torch.allclose(site.c_in @ site.c_in.T, torch.eye(16), atol=1e-4)
    assert not torch.allclose(site.c_in, torch.eye(16))
    attn = student.decoder.layers[1].blocks[1].sub  # cross-attention
    for h in range(attn.num_heads):
        assert torch.allclose(attn.c_q[h].T @ attn.c_k[h], torch.eye(8), atol=1e-3)
        assert torch.allclose(attn.c_o[h] @ attn.c_v[h], torch.eye(8), atol=1e-4)


# ------------------------------------------------------------------ masks and the Lagrangian


def test_identity_compactors_without_masks_reproduce_the_teacher():
    targs, teacher = _teacher()
    student = _student(targs, teacher, levels=()).eval()
    src, lengths, prev = _batch()
    with torch.no_grad():
        assert torch.allclose(
            student(src, lengths, prev)[0], teacher(src, lengths, prev)[0], atol=1e-5
        )


def test_expected_sparsity_tracks_the_linearly_warmed_target_under_the_lagrangian():
    targs, teacher = _teacher()
    student = _student(
        targs, teacher, dawid_target_sparsity=0.4, dawid_sparsity_warmup=100, dawid_gate_lr_scale=1
    )
    params = [p for g in student.gates() for p in g.parameters()] + list(
        student.lagrangian.parameters()
    )
    opt = torch.optim.Adam(params, lr=0.05)
    trace = []
    for step in range(300):
        student.set_num_updates(step)
        s, t = student.expected_sparsity(), student.target_sparsity()
        trace.append((float(s), t))
        opt.zero_grad()
        student.lagrangian(s, t).backward()
        opt.step()
    assert trace[0][1] == 0.0 and trace[50][1] == pytest.approx(0.2) and trace[150][1] == 0.4
    assert trace[0][0] < 0  # no pruning yet: the residual matrices make the student larger
    assert all(abs(s - t) < 0.01 for s, t in trace[250:]), trace[250:]
    # the multipliers were trained by ascent: lambda2 grew
    assert float(student.lagrangian.lambda2) > 1.0
    # the final (deterministic) masks give a fused model near the target
    student.eval()
    shapes = fuse.final_shapes(student)
    real = 1 - (fuse.shapes_params(shapes) + student.constant_params()) / student.teacher_size()
    assert abs(real - 0.4) < 0.05, real


def test_teacher_size_is_the_teachers_non_embedding_parameter_count():
    targs, teacher = _teacher()
    counts = count_parameters(teacher)
    assert _student(targs, teacher).teacher_size() == counts["encoder"] + counts["decoder"]


def test_mask_levels_follow_the_multi_stage_schedule_and_can_be_switched_off():
    targs, teacher = _teacher()
    student = _student(
        targs, teacher, levels=("dim", "layer"), dawid_distill_updates=10, dawid_structure_updates=5
    )
    by_level = lambda: {g.level: g.active for g in student.gates()}
    student.set_num_updates(9)
    assert by_level() == {"dim": False, "head": False, "layer": False} and not student.pruning_on()
    student.set_num_updates(10)
    assert by_level() == {"dim": True, "head": False, "layer": False}
    student.set_num_updates(15)
    assert by_level() == {"dim": True, "head": False, "layer": True}  # head masks switched off


# ------------------------------------------------------------------ fusion


def _pruned_student(seed=0, flags=()):
    targs, teacher = _teacher(seed, flags)
    student = _student(targs, teacher)
    g = torch.Generator().manual_seed(seed + 7)
    with torch.no_grad():
        for gate in student.gates():
            gate.set_log_alpha(torch.randn(gate.n, generator=g) * 2 + 1)
        # whole blocks removed: one FFN and one attention head
        student.encoder.layers[1].blocks[1].sub.gate_layer.set_log_alpha(-5)
        head = student.decoder.layers[0].blocks[0].sub.gate_head
        head.set_log_alpha(torch.cat([torch.tensor([-5.0]), head.log_alpha[1:]]))
        for name, p in student.named_parameters():  # compactors away from the identity
            if name.split(".")[-1] in ("c_in", "c_out", "c_q", "c_k", "c_v", "c_o"):
                p.add_(0.2 * torch.randn(p.shape, generator=g))
    student.set_num_updates(1)  # all levels on
    return targs, teacher, student.eval()


@pytest.mark.parametrize(
    "flags", [(), ("--encoder-learned-pos", "--decoder-learned-pos", "--activation-fn", "gelu")]
)
def test_fused_model_computes_what_the_masked_model_computes(flags):
    targs, _, student = _pruned_student(flags=flags)
    fused, fargs, shapes = fuse_model(student, targs)
    assert fargs.arch == "dawid_fused"
    assert (
        shapes["encoder"]["layers"][1][1]["ffn"] == 0
        and fused.encoder.layers[1].blocks[1].sub is None
    )
    assert len(shapes["decoder"]["layers"][0][0]["v"]) <= 1
    widths = [s["out"] for layer in shapes["encoder"]["layers"] for s in layer]
    assert len(set(widths)) > 1 and max(widths) < 16  # per-layer hidden widths
    src, lengths, prev = _batch()
    with torch.no_grad():
        a = student(src, lengths, prev)[0]
        b = fused(src, lengths, prev)[0]
    assert torch.allclose(a, b, atol=1e-4 * float(a.abs().max())), float((a - b).abs().max())
    # step-by-step decoding of the fused model equals full decoding (no padding inside a
    # prefix: beam search never has any)
    prev = prev.masked_fill(prev.eq(1), 5)
    with torch.no_grad():
        enc = fused.encoder(src, lengths)
        full = fused.decoder(prev, encoder_out=enc)[0]
        steps = harness.decode_incrementally(fused.decoder, prev, encoder_out=enc)
    assert torch.allclose(full, steps, atol=1e-5)


def test_fused_parameter_count_is_the_size_formula_and_the_teacher_is_larger():
    targs, teacher, student = _pruned_student(seed=3)
    fused, _, shapes = fuse_model(student, targs)
    counts = count_parameters(fused)
    assert (
        counts["encoder"] + counts["decoder"]
        == fuse.shapes_params(shapes) + student.constant_params()
    )
    assert counts["embedding"] == count_parameters(teacher)["embedding"]
    assert counts["total"] < count_parameters(teacher)["total"]


def test_fused_model_is_rebuilt_from_its_shapes_by_lightcompress_params():
    import json

    from lightcompress.measure.params import report

    targs, _, student = _pruned_student(seed=4)
    fused, _, shapes = fuse_model(student, targs)
    out = report("dawid_fused", VOCAB, ["--dawid-shapes", json.dumps(shapes)])
    assert out["total"] == count_parameters(fused)["total"]


# ------------------------------------------------------------------ bad input


@pytest.mark.parametrize("target", [-0.1, 1.0, 1.5])
def test_a_target_sparsity_outside_0_1_is_refused(target):
    args = argparse.Namespace(dawid_target_sparsity=target)
    dawid_architecture(args)
    with pytest.raises(ConfigError, match=r"--dawid-target-sparsity must be in \[0, 1\)"):
        DAWIDModel.check_args(args)


def test_unknown_mask_levels_are_refused():
    args = argparse.Namespace(dawid_masks="dim,heads")
    dawid_architecture(args)
    with pytest.raises(ConfigError, match="unknown level"):
        DAWIDModel.check_args(args)


def test_masks_removing_every_encoder_head_or_every_layer_are_refused_at_fusion():
    targs, _, student = _pruned_student(seed=5)
    for layer in student.encoder.layers:
        layer.blocks[0].sub.gate_head.set_log_alpha(-5)
    with pytest.raises(fuse.FusionError, match="every encoder self-attention head"):
        fuse_model(student, targs)
    for layer in student.encoder.layers:
        layer.blocks[1].sub.gate_layer.set_log_alpha(-5)
    with pytest.raises(fuse.FusionError, match="every layer of the encoder"):
        fuse_model(student, targs)


def test_a_site_without_any_dimension_is_refused_at_fusion():
    targs, _, student = _pruned_student(seed=6)
    student.decoder.layers[0].blocks[1].site.gate.set_log_alpha(-10)
    with pytest.raises(fuse.FusionError, match="every hidden dimension of decoder layer 0"):
        fuse_model(student, targs)


@pytest.mark.parametrize(
    "change, why",
    [
        ({"arch": "lightformer_iwslt_de_en"}, "lightformer"),
        ({"encoder_normalize_before": True}, "pre-LN"),
    ],
)
def test_a_teacher_of_another_architecture_is_refused(change, why):
    targs, _ = _teacher()
    for key, value in change.items():
        setattr(targs, key, value)
    with pytest.raises(ConfigError, match=why):
        check_teacher(targs, "--dawid-teacher t.pt")


def test_the_training_model_and_criterion_run_in_half_precision():
    """fairseq --fp16 halves the model: the masks follow the activations' dtype, the expected
    sparsity and the losses stay float32 (a 30M-parameter count overflows fp16)."""
    from lightcompress.build import NoDataTask, dictionary_of_size
    from lightcompress.wid.criterion import DAWIDCriterion

    _, teacher, student = _pruned_student(seed=8)
    student.train().half()
    student.set_teacher(teacher.half())
    criterion = DAWIDCriterion(NoDataTask(dictionary_of_size(VOCAB)), 0.5, 2.0)
    src, lengths, prev = _batch()
    sample = {
        "net_input": {"src_tokens": src, "src_lengths": lengths, "prev_output_tokens": prev},
        "target": prev,
        "ntokens": int(prev.ne(1).sum()),
    }
    loss, size, _ = criterion(student, sample)
    assert loss.dtype == torch.float32 and torch.isfinite(loss) and size == sample["ntokens"]
    assert student.expected_sparsity().dtype == torch.float32
    loss.backward()
    grad = student.encoder.layers[0].blocks[0].site.gate.log_alpha_scaled.grad
    assert grad is not None and grad.dtype == torch.float16 and torch.isfinite(grad).all()


# ------------------------------------------------------------------ RoBERTa (sentence_prediction)

ROBERTA = [
    "--encoder-layers",
    2,
    "--encoder-embed-dim",
    16,
    "--encoder-ffn-embed-dim",
    32,
    "--encoder-attention-heads",
    2,
    "--max-positions",
    32,
    "--dropout",
    0,
    "--attention-dropout",
    0,
    "--pooler-dropout",
    0,
]
HEAD = "sentence_classification_head"


def _roberta(seed=0, classes=3):
    from lightcompress.build import build_model_without_data, parse_model_args

    torch.manual_seed(seed)
    targs = parse_model_args("roberta", [str(a) for a in ROBERTA], task="sentence_prediction")
    teacher = build_model_without_data(targs, VOCAB)
    teacher.register_classification_head(HEAD, num_classes=classes)
    return targs, teacher.eval()


def _tokens(seed=2):
    g = torch.Generator().manual_seed(seed)
    src = torch.randint(4, VOCAB, (3, 8), generator=g)
    src[:, 0] = 0  # <s>
    src[1, -3:] = 1  # padding
    return src


def test_roberta_student_keeps_the_teachers_head_and_reproduces_it_with_identity_compactors():
    from lightcompress.wid.roberta import DAWIDRobertaModel

    targs, teacher = _roberta()
    student = _student_of(DAWIDRobertaModel, targs, teacher, levels=()).eval()
    src = _tokens()
    with torch.no_grad():
        a = teacher(src, classification_head_name=HEAD)[0]
        b = student(src, classification_head_name=HEAD)[0]
    assert torch.allclose(a, b, atol=1e-5)
    student.register_classification_head(HEAD, num_classes=3)  # the task's call keeps it
    assert student.classification_heads[HEAD].dense.weight.equal(
        teacher.classification_heads[HEAD].dense.weight
    )
    with pytest.raises(ConfigError, match="no classification head 'other'"):
        student.register_classification_head("other", num_classes=2)
    layers = sum(p.numel() for p in teacher.encoder.sentence_encoder.layers.parameters())
    assert student.teacher_size() == layers  # the paper's (CoFi's) count: the layers


def _student_of(cls, targs, teacher, levels=("dim", "head", "layer"), **flags):
    args = argparse.Namespace(dawid_init="identity", **flags)
    dawid_architecture(args)
    return cls.from_teacher(args, targs, teacher, list(levels))


@pytest.mark.parametrize("classes", [3, 1])
def test_fused_roberta_computes_what_the_masked_roberta_computes(classes):
    from lightcompress.wid.roberta import DAWIDRobertaModel, fuse_roberta

    targs, teacher = _roberta(seed=1, classes=classes)
    student = _student_of(DAWIDRobertaModel, targs, teacher)
    g = torch.Generator().manual_seed(11)
    with torch.no_grad():
        for gate in student.gates():
            gate.set_log_alpha(torch.randn(gate.n, generator=g) * 2 + 1)
        for name, p in student.named_parameters():
            if name.split(".")[-1] in ("c_in", "c_out", "c_q", "c_k", "c_v", "c_o"):
                p.add_(0.2 * torch.randn(p.shape, generator=g))
    student.set_num_updates(1)
    student.eval()
    fused, fargs, shapes = fuse_roberta(student, targs)
    assert fargs.arch == "dawid_roberta_fused" and "decoder" not in shapes
    last = shapes["encoder"]["layers"][-1][-1]["out"]
    assert last < 16 and fused.classification_heads[HEAD].dense.in_features == last
    src = _tokens()
    with torch.no_grad():
        for kw in ({"classification_head_name": HEAD}, {}):
            a, b = student(src, **kw)[0], fused(src, **kw)[0]
            assert torch.allclose(a, b, atol=1e-4 * float(a.abs().max())), kw
    layers = sum(p.numel() for p in fused.encoder.sentence_encoder.layers.parameters())
    assert layers == fuse.shapes_params(shapes)
