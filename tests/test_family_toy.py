"""Adding a method is this file alone: a toy layer kind and a toy family, declared here, are
trained by ``fairseq-train``, converted from a dense Transformer, counted, quantized to int8
and exported to ONNX Runtime, with no change to the package.

The kind ``lctoy_svd`` keeps a map as its truncated SVD ``W = U diag(s) V`` (one
:func:`~lightcompress.modules.registry.register` call: schema, from-scratch build, exact count,
SVD transfer, int8 form). The family ``lctoy`` (one
:func:`~lightcompress.models.family.register_family` call) puts it on every self-attention
projection and FFN map at the rank ``--lctoy-rank``, has one architecture ``lctoy_tiny`` and
a converter with one option of its own. ``fairseq-train`` sees them through ``--user-dir``:
a three-line package, written by the test, that imports this file and declares them.
Everything registered here is unregistered afterwards (``test_declaring_and_undoing_...``).
"""

from __future__ import annotations

import contextlib
import os
import sys
from dataclasses import dataclass

import harness
import pytest
import torch
import torch.nn.functional as F
from torch import nn

TOY_KIND, TOY_FAMILY, TOY_ARCH = "lctoy_svd", "lctoy", "lctoy_tiny"
DIM, FFN, HEADS, LAYERS = 32, 64, 2, 2


# --------------------------------------------------------------------------------------------
# the toy kind: a map kept as its SVD
# --------------------------------------------------------------------------------------------


class ToySVDLinear(nn.Module):
    """``y = ((x V^T) * s) U^T + b`` with ``U (out, r)``, ``s (r,)``, ``V (r, in)``."""

    def __init__(self, in_features: int, out_features: int, rank: int, bias: bool = True):
        super().__init__()
        self.in_features, self.out_features, self.rank = in_features, out_features, rank
        self.u = nn.Parameter(torch.randn(out_features, rank) / rank**0.5)
        self.s = nn.Parameter(torch.ones(rank))
        self.v = nn.Parameter(torch.randn(rank, in_features) / in_features**0.5)
        self.bias = nn.Parameter(torch.zeros(out_features)) if bias else None

    @staticmethod
    def num_params(in_features: int, out_features: int, rank: int, bias: bool = True) -> int:
        return rank * (in_features + out_features + 1) + (out_features if bias else 0)

    @classmethod
    def from_linear(cls, linear: nn.Linear, rank: int) -> ToySVDLinear:
        u, s, vh = torch.linalg.svd(linear.weight.detach().float(), full_matrices=False)
        layer = cls(linear.in_features, linear.out_features, rank, linear.bias is not None)
        with torch.no_grad():
            layer.u.copy_(u[:, :rank])
            layer.s.copy_(s[:rank])
            layer.v.copy_(vh[:rank])
            if linear.bias is not None:
                layer.bias.copy_(linear.bias)
        layer.kept_energy = float((s[:rank] ** 2).sum() / (s**2).sum())
        return layer

    def forward(self, x):
        return F.linear(F.linear(x, self.v) * self.s, self.u, self.bias)  # [.. x in] -> [.. x out]

    def as_linears(self) -> nn.Module:
        from lightcompress.modules.lowrank import TwoLinear

        first = nn.Linear(self.in_features, self.rank, bias=False)
        second = nn.Linear(self.rank, self.out_features, bias=self.bias is not None)
        with torch.no_grad():
            first.weight.copy_(self.s[:, None] * self.v)
            second.weight.copy_(self.u)
            if self.bias is not None:
                second.bias.copy_(self.bias)
        return TwoLinear(first, second)


def _toy_kwargs(shape, params) -> dict:
    rank = params["rank"]
    if rank > min(shape.in_features, shape.out_features):
        raise ValueError(f"rank {rank} exceeds the {shape.in_features}x{shape.out_features} map")
    return {
        "in_features": shape.in_features,
        "out_features": shape.out_features,
        "rank": rank,
        "bias": shape.bias,
    }


# --------------------------------------------------------------------------------------------
# the toy family: config, spec, presets, converter
# --------------------------------------------------------------------------------------------


def _family():
    from fairseq.models.transformer import base_architecture

    from lightcompress.models.family import Family, Transfer
    from lightcompress.models.presets import CompressionConfig, Preset, flag_field

    @dataclass(frozen=True)
    class ToyConfig(CompressionConfig):
        lctoy_rank: int = flag_field(8, "rank of every toy SVD map", type=int, metavar="R")

    def transfer_spec(student_args, opts):
        rank = getattr(opts, "lctoy_transfer_rank", None) or student_args.lctoy_rank
        return SPEC.format(lctoy_rank=rank)

    def transfer_finish(student_args, opts, records):
        student_args.lctoy_rank = records[0].rank  # the flags rebuild the converted model

    shape = {"encoder_layers": LAYERS, "decoder_layers": LAYERS, "share_all_embeddings": True}
    for side in ("encoder", "decoder"):
        shape.update(
            {
                f"{side}_embed_dim": DIM,
                f"{side}_ffn_embed_dim": FFN,
                f"{side}_attention_heads": HEADS,
            }
        )
    return Family(
        name=TOY_FAMILY,
        config=ToyConfig,
        spec=SPEC,
        presets={TOY_ARCH: Preset(TOY_FAMILY, ToyConfig(), shape, base_architecture, "toy")},
        doc="A toy family of tests/test_family_toy.py.",
        transfer=Transfer(
            method="toy SVD transfer",
            same=("encoder_embed_dim", "encoder_ffn_embed_dim", "encoder_layers"),
            options=((("--lctoy-transfer-rank",), {"type": int, "help": "rank of the fit"}),),
            spec=transfer_spec,
            finish=transfer_finish,
        ),
    )


SPEC = (
    "encoder.layers.*.self_attn.*_proj, decoder.layers.*.self_attn.*_proj = "
    "lctoy_svd(rank={lctoy_rank});\n"
    "encoder.layers.*.fc1, encoder.layers.*.fc2, decoder.layers.*.fc1, decoder.layers.*.fc2 = "
    "lctoy_svd(rank={lctoy_rank})"
)


def declare() -> None:
    """Register the toy kind and family (once per process)."""
    from lightcompress.models.family import FAMILIES, register_family
    from lightcompress.modules.registry import KINDS, register

    if TOY_KIND not in KINDS:
        register(
            TOY_KIND,
            "linear",
            ToySVDLinear,
            _toy_kwargs,
            lambda m, p: ToySVDLinear.from_linear(m, p["rank"]),
            required=("rank",),
            int8=lambda m: m.as_linears(),
            help="toy: W = U diag(s) V",
        )
    if TOY_FAMILY not in FAMILIES:
        register_family(_family())


def undeclare() -> None:
    from lightcompress.models.family import unregister_family
    from lightcompress.modules.registry import unregister

    unregister_family(TOY_FAMILY)
    unregister(TOY_KIND)


@contextlib.contextmanager
def declared():
    declare()
    try:
        yield
    finally:
        undeclare()


# --------------------------------------------------------------------------------------------
# tests
# --------------------------------------------------------------------------------------------


def test_declaring_and_undoing_a_family_leaves_the_registries_as_they_were():
    from fairseq.models import ARCH_MODEL_REGISTRY, MODEL_REGISTRY

    from lightcompress.convert import CONVERTERS
    from lightcompress.models.presets import PRESETS
    from lightcompress.modules.registry import KINDS, QUANTIZE

    before = (
        set(MODEL_REGISTRY),
        set(ARCH_MODEL_REGISTRY),
        list(PRESETS),
        set(CONVERTERS),
        set(KINDS),
        set(QUANTIZE),
    )
    with declared():
        assert ARCH_MODEL_REGISTRY[TOY_ARCH] is MODEL_REGISTRY[TOY_FAMILY]
        assert PRESETS[TOY_ARCH].model == TOY_FAMILY and TOY_FAMILY in CONVERTERS
        assert ToySVDLinear in QUANTIZE
    after = (
        set(MODEL_REGISTRY),
        set(ARCH_MODEL_REGISTRY),
        list(PRESETS),
        set(CONVERTERS),
        set(KINDS),
        set(QUANTIZE),
    )
    assert after == before


def test_a_taken_model_or_architecture_name_is_refused_and_nothing_is_registered():
    import dataclasses

    from fairseq.models import ARCH_MODEL_REGISTRY, MODEL_REGISTRY

    from lightcompress.models.family import register_family
    from lightcompress.models.lightformer import LIGHTFORMER
    from lightcompress.models.presets import PRESETS

    before = (set(MODEL_REGISTRY), set(ARCH_MODEL_REGISTRY), list(PRESETS))
    with pytest.raises(ValueError, match="already registered"):  # fairseq would return the old
        register_family(dataclasses.replace(LIGHTFORMER))
    toy = _family()
    preset = dataclasses.replace(toy.presets[TOY_ARCH], model="lctoy_taken")
    taken = dataclasses.replace(
        toy,
        name="lctoy_taken",
        presets={"lctoy_taken_tiny": preset, "lightformer_iwslt_de_en": preset},
    )
    with pytest.raises(ValueError, match="'lightformer_iwslt_de_en' is already registered"):
        register_family(taken)
    from lightcompress.models.presets import CompressionConfig, flag_field

    @dataclass(frozen=True)
    class Clashing(CompressionConfig):
        dropout: float = flag_field(0.1, "a flag fairseq's Transformer already has", type=float)

    with pytest.raises(ValueError, match=r"\['dropout'\] are already fairseq Transformer flags"):
        register_family(dataclasses.replace(toy, name="lctoy_clash", config=Clashing, presets={}))
    assert (set(MODEL_REGISTRY), set(ARCH_MODEL_REGISTRY), list(PRESETS)) == before
    assert ARCH_MODEL_REGISTRY["lightformer_iwslt_de_en"] is MODEL_REGISTRY["lightformer"]


@pytest.fixture(scope="module")
def toy():
    with declared():
        yield


@pytest.fixture(scope="module")
def teacher(tiny_data, tmp_path_factory, toy):
    """A dense 2-2 Transformer of the toy preset's widths (random weights), as a checkpoint."""
    from fairseq import options

    from lightcompress.build import build_model_without_data

    argv = [
        tiny_data,
        "--task",
        "translation",
        "--arch",
        "transformer",
        "-s",
        "de",
        "-t",
        "en",
        *map(str, harness.tiny_arch_args(dim=DIM, ffn=FFN, heads=HEADS)[2:]),
    ]
    targs = options.parse_args_and_arch(options.get_training_parser(), argv)
    torch.manual_seed(0)
    vocab = len(_dictionary(tiny_data))
    model = build_model_without_data(targs, vocab).eval()
    with torch.no_grad():  # non-trivial biases and LayerNorms
        for name, p in model.named_parameters():
            if "layer_norm" in name or name.endswith("bias"):
                p.add_(0.1 * torch.randn_like(p))
    path = str(tmp_path_factory.mktemp("toy") / "teacher.pt")
    torch.save({"args": targs, "model": model.state_dict(), "optimizer_history": []}, path)
    return path, model


def _dictionary(data):
    from fairseq.data import Dictionary

    return Dictionary.load(os.path.join(data, "dict.de.txt"))


def _batch(vocab, n=3, length=6):
    g = torch.Generator().manual_seed(2)
    src = torch.randint(4, vocab, (n, length), generator=g)
    src[:, -1] = 2
    prev = torch.randint(4, vocab, (n, length), generator=g)
    prev[:, 0] = 2
    return src, torch.full((n,), length), prev


def test_full_rank_conversion_reproduces_the_dense_teacher(teacher, tmp_path):
    from lightcompress.convert.cli import convert_checkpoint

    path, dense = teacher
    out = str(tmp_path / "toy.pt")
    student, records = convert_checkpoint(
        ["-i", path, "-o", out, "-a", TOY_ARCH, "--quiet", "--lctoy-rank", "32"]
    )
    assert len(records) == 2 * LAYERS * (4 + 2)  # Q, K, V, out and fc1, fc2 per layer
    assert all(r.kind == TOY_KIND and r.kept_energy > 1 - 1e-5 for r in records)
    assert isinstance(student.encoder.layers[0].fc1, ToySVDLinear)
    src, lengths, prev = _batch(dense.encoder.embed_tokens.weight.shape[0])
    with torch.no_grad():
        torch.testing.assert_close(
            student(src, lengths, prev)[0], dense(src, lengths, prev)[0], atol=1e-4, rtol=1e-4
        )


def test_the_converters_own_option_sets_the_rank_and_the_flags_rebuild_it(teacher, tmp_path):
    from lightcompress.build import build_model_without_data
    from lightcompress.convert.cli import convert_checkpoint

    path, dense = teacher
    out = str(tmp_path / "toy4.pt")
    _, records = convert_checkpoint(
        ["-i", path, "-o", out, "-a", TOY_ARCH, "--quiet", "--lctoy-transfer-rank", "4"]
    )
    assert {r.rank for r in records} == {4} and min(r.kept_energy for r in records) < 0.99
    state = torch.load(out)
    assert state["args"].lctoy_rank == 4
    model = build_model_without_data(state["args"], dense.encoder.embed_tokens.weight.shape[0])
    model.load_state_dict(state["model"], strict=True)
    from lightcompress.convert.core import ConversionError

    with pytest.raises(ConversionError, match="width mismatch"):
        convert_checkpoint(
            [
                "-i",
                path,
                "-o",
                str(tmp_path / "x.pt"),
                "-a",
                TOY_ARCH,
                "--encoder-ffn-embed-dim",
                "48",
            ]
        )


def _user_dir(root) -> str:
    """A ``--user-dir`` package that declares the toy kind and family (this file's)."""
    package = os.path.join(str(root), "lctoy_plugin")
    os.makedirs(package, exist_ok=True)
    here = os.path.dirname(os.path.abspath(__file__))
    with open(os.path.join(package, "__init__.py"), "w") as f:
        f.write(
            f"import sys\nsys.path.insert(0, {here!r})\n"
            "import test_family_toy\ntest_family_toy.declare()\n"
        )
    return package


@pytest.fixture(scope="module")
def trained(tiny_data, teacher, tmp_path_factory):
    """The toy model converted from the teacher (rank 8), then trained by fairseq-train for 20
    updates through --user-dir."""
    from lightcompress.convert.cli import convert_checkpoint

    root = tmp_path_factory.mktemp("toy_train")
    init = str(root / "init.pt")
    convert_checkpoint(["-i", teacher[0], "-o", init, "-a", TOY_ARCH, "--quiet"])
    save_dir = str(root / "ckpt")
    proc = harness.train(
        tiny_data,
        save_dir,
        ["--arch", TOY_ARCH, "--share-all-embeddings"],
        max_epoch=None,
        max_update=20,
        user_dir=_user_dir(root),
        extra=["--restore-file", init, "--reset-optimizer", "--reset-dataloader", "--reset-meters"],
    )
    assert f"Loaded checkpoint {init}" in proc.stdout + proc.stderr
    assert "num_updates 20" in proc.stdout + proc.stderr
    return os.path.join(save_dir, "checkpoint_last.pt")


def _load(path, data):
    from fairseq import checkpoint_utils

    models, _cfg, task = checkpoint_utils.load_model_ensemble_and_task(
        [path], arg_overrides={"data": data}
    )
    return models[0].eval(), task


def test_fairseq_train_trains_the_toy_family(tiny_data, trained):
    model, _ = _load(trained, tiny_data)
    init = torch.load(os.path.join(os.path.dirname(os.path.dirname(trained)), "init.pt"))
    assert isinstance(model.decoder.layers[1].self_attn.v_proj, ToySVDLinear)
    assert model.encoder.layers[0].fc1.rank == 8
    moved = (model.encoder.layers[0].fc1.s - init["model"]["encoder.layers.0.fc1.s"]).abs().max()
    assert moved > 0  # the singular values were trained


def test_the_toy_model_is_counted_by_the_kinds_exact_formula(tiny_data, trained):
    from lightcompress.measure.params import checkpoint_report
    from lightcompress.modules.registry import Shape, get_variant

    model, _ = _load(trained, tiny_data)
    report = checkpoint_report(trained)
    assert report["total"] == sum(p.numel() for p in model.parameters())
    variant = get_variant(TOY_KIND, "linear")
    toy = [m for m in model.modules() if isinstance(m, ToySVDLinear)]
    formula = sum(
        variant.num_params(Shape(m.in_features, m.out_features), {"rank": 8}) for m in toy
    )
    assert formula == sum(p.numel() for m in toy for p in m.parameters())
    dense_maps = sum(m.in_features * m.out_features + m.out_features for m in toy)
    assert report["total"] == report["embedding"] + report["encoder"] + report["decoder"]
    assert formula < dense_maps


def test_int8_quantizes_the_toy_maps_and_keeps_the_function(tiny_data, trained):
    from lightcompress.deploy.quantize import count_quantized_linears, quantize_model_int8

    model, _ = _load(trained, tiny_data)
    q = quantize_model_int8(model)
    assert not any(isinstance(m, ToySVDLinear) for m in q.modules())
    assert count_quantized_linears(q) >= 2 * 2 * LAYERS * 6  # two packed maps per toy map
    src, lengths, prev = _batch(len(_dictionary(tiny_data)))
    with torch.no_grad():
        want = model(src, lengths, prev)[0].log_softmax(-1)
        got = q(src, lengths, prev)[0].log_softmax(-1)
    # int8 rounding moves the log-probabilities by a few 0.01 (dropping the singular values
    # from the int8 form, say, moves them by 0.3)
    assert (got - want).norm() / want.norm() < 0.01 and (got - want).abs().max() < 0.15


def test_onnx_export_translates_like_the_toy_model(tiny_data, trained, tmp_path):
    from fairseq.sequence_generator import SequenceGenerator

    from lightcompress.deploy.onnx_export import export_onnx
    from lightcompress_runtime import OnnxGenerator

    model, task = _load(trained, tiny_data)
    export_onnx(model, task, str(tmp_path / "onnx"))  # (checks its graphs on a probe batch)
    task.load_dataset("test")
    ds = task.dataset("test")
    sources = [ds.src[i].long() for i in range(8)]
    settings = {"beam_size": 2, "max_len_a": 1.0, "max_len_b": 3}
    ours = OnnxGenerator(str(tmp_path / "onnx"), **settings)
    fairseq = SequenceGenerator([model], task.target_dictionary, **settings)
    for src in sources:
        with torch.inference_mode():
            ref = fairseq.generate(
                [model],
                {
                    "net_input": {
                        "src_tokens": src[None],
                        "src_lengths": torch.tensor([src.numel()]),
                    }
                },
            )
        out = ours.generate(src[None].numpy(), torch.tensor([src.numel()]).numpy())
        assert [h["tokens"].tolist() for h in out[0]] == [h["tokens"].tolist() for h in ref[0]]


if __name__ == "__main__":  # pragma: no cover
    sys.exit(pytest.main([__file__, "-q"]))
