"""Smartformer's CPAC attention at fixed ranks: sizes, decoding, CP weight transfer from the CLI.
(The A2C rank search: tests/test_rank_search.py.)"""

import harness
import pytest
import torch
from fairseq import options

import lightcompress.plugin  # noqa: F401  (registers the models)
from lightcompress.convert.core import build_fairseq_model
from lightcompress.modules import CPLinear, count_unique_params, cp_to_dense

TINY = [
    "--encoder-layers",
    "2",
    "--decoder-layers",
    "2",
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
    "--share-all-embeddings",
]


def test_iwslt_size_is_the_dense_model_with_every_qkv_map_in_cp_form():
    """54 Q/K/V maps (6 encoder self, 6 decoder self, 6 cross, x3) of 512 x 512 become
    R (d + h + d_k) = 64 (512 + 4 + 128) parameters each; biases and output projections stay."""
    dense = count_unique_params(
        harness.build_without_data("transformer_iwslt_de_en", 10152, ["--share-all-embeddings"])
    )
    cpac = count_unique_params(
        harness.build_without_data("smartformer_iwslt_de_en", 10152, ["--share-all-embeddings"])
    )
    assert cpac == dense - 54 * (512 * 512 - 64 * (512 + 4 + 128))
    self_only = harness.build_without_data(
        "smartformer_iwslt_de_en", 10152, ["--share-all-embeddings", "--sm-attn", "self"]
    )
    assert count_unique_params(self_only) == dense - 36 * (512 * 512 - 64 * 644)
    assert type(self_only.decoder.layers[0].encoder_attn.q_proj) is torch.nn.Linear


def test_incremental_decoding_equals_full_decoding():
    torch.manual_seed(0)
    model = harness.build_without_data("smartformer", 30, [*TINY, "--sm-rank", "5"]).eval()
    assert isinstance(model.decoder.layers[1].encoder_attn.k_proj, CPLinear)
    src = torch.randint(4, 30, (2, 6))
    src[:, -1] = 2
    prev = torch.randint(4, 30, (2, 5))
    prev[:, 0] = 2
    with torch.no_grad():
        enc = model.encoder(src, src_lengths=torch.full((2,), 6))
        full = model.decoder(prev, encoder_out=enc)[0]
        steps = harness.decode_incrementally(model.decoder, prev, encoder_out=enc)
    torch.testing.assert_close(steps, full, atol=1e-5, rtol=1e-5)


def test_bad_rank_is_one_config_error():
    from lightcompress.errors import ConfigError

    with pytest.raises(ConfigError, match="--sm-rank must be >= 1"):
        harness.build_without_data("smartformer", 30, [*TINY, "--sm-rank", "0"])


def test_cp_transfer_from_the_cli_fits_cp_rank_projections(tmp_path, capfd):
    """CP-ALS fits projections that are CP rank-3 tensors almost exactly (it is an iterative
    fit: the report gives each projection's kept energy) and the student translates like its
    teacher up to that fit."""
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
        *TINY,
    ]
    targs = options.parse_args_and_arch(options.get_training_parser(), argv)
    torch.manual_seed(0)
    teacher = build_fairseq_model(targs, 30).eval()
    with torch.no_grad():  # every Q/K/V weight an exact CP rank-3 tensor over (2 heads, 8)
        for layer in [*teacher.encoder.layers, *teacher.decoder.layers]:
            for attn in (layer.self_attn, getattr(layer, "encoder_attn", None)):
                for name in ("q_proj", "k_proj", "v_proj") if attn is not None else ():
                    w = cp_to_dense(torch.randn(16, 3), torch.randn(2, 3), torch.randn(8, 3))
                    getattr(attn, name).weight.copy_(w / 4)
    path = tmp_path / "teacher.pt"
    torch.save({"args": targs, "model": teacher.state_dict(), "optimizer_history": []}, path)
    out = tmp_path / "cpac.pt"
    from lightcompress.convert.cli import convert_checkpoint

    _, records = convert_checkpoint(
        ["-i", str(path), "-o", str(out), "-a", "smartformer", *TINY, "--sm-rank", "3"]
    )
    report = capfd.readouterr().out
    assert "encoder.layers.0.self_attn.q_proj" in report and "cp" in report
    assert len(records) == 2 * 3 + 2 * 3 + 2 * 3  # self x 2 stacks + cross, Q/K/V each
    assert all(r.kind == "cp" and r.kept_energy > 0.999 for r in records), records
    state = torch.load(out)
    student = build_fairseq_model(state["args"], 30).eval()
    student.load_state_dict(state["model"], strict=True)
    assert count_unique_params(student) < count_unique_params(teacher)
    src = torch.randint(4, 30, (2, 6))
    src[:, -1] = 2
    prev = torch.randint(4, 30, (2, 5))
    prev[:, 0] = 2
    lengths = torch.full((2,), 6)
    with torch.no_grad():
        torch.testing.assert_close(
            student(src, lengths, prev)[0], teacher(src, lengths, prev)[0], atol=5e-2, rtol=1e-2
        )
