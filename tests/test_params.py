"""Parameter and MAC counts without data: the papers' model sizes, dedup, the CLI."""

import json
import os
import subprocess
import sys

import pytest
import torch
from harness import REPO_ROOT
from torch import nn

from lightcompress.measure import params as P

TINY = [
    "--encoder-embed-dim", "32", "--decoder-embed-dim", "32",
    "--encoder-ffn-embed-dim", "64", "--decoder-ffn-embed-dim", "64",
    "--encoder-attention-heads", "2", "--decoder-attention-heads", "2",
]  # fmt: skip


def total(arch, vocab, extra=(), share=True):
    return P.count_parameters(P.build_model_without_data(arch, vocab, extra, share))["total"]


def test_transformer_iwslt_de_en_has_36_8m_parameters_at_a_10_2k_joined_vocabulary():
    counts = P.count_parameters(P.build_model_without_data("transformer_iwslt_de_en", 10200))
    assert abs(counts["total"] - 36.8e6) / 36.8e6 < 0.01
    assert counts["total"] == 36_765_696
    # one shared table of 10200 x 512, counted once
    assert counts["embedding"] == 10200 * 512
    assert counts["total"] == counts["embedding"] + counts["encoder"] + counts["decoder"]
    assert counts["other"] == 0


def test_without_shared_embeddings_the_same_model_is_larger():
    # fairseq's arch does not share by default: three tables (47.2M); output tied only: 42.0M
    assert total("transformer_iwslt_de_en", 10200, share=False) == 36_765_696 + 2 * 10200 * 512
    assert (
        total("transformer_iwslt_de_en", 10200, ["--share-decoder-input-output-embed"], False)
        == 36_765_696 + 10200 * 512
    )


def test_transformer_base_wmt_sizes():
    # Hypoformer Table 2: 61.0M at fairseq's 32,768-entry WMT'16 En-De joined dictionary
    base = total("transformer_wmt_en_de", 32768)
    assert base == 60_915_712 and abs(base - 61.0e6) / 61.0e6 < 0.01
    # LightFormer Table 2: 63.2M, i.e. a ~37k joined vocabulary (44.14M + 512 per entry)
    big_vocab = total("transformer_wmt_en_de", 37000)
    assert big_vocab == 63_082_496 and abs(big_vocab - 63.2e6) / 63.2e6 < 0.01


def test_12_2_transformer_has_the_same_size_as_6_6():
    # Hypoformer Table 8: Transformer 12-2 36.8M on IWSLT
    deep = total(
        "transformer_iwslt_de_en", 10200, ["--encoder-layers", "12", "--decoder-layers", "2"]
    )
    assert abs(deep - 36.8e6) / 36.8e6 < 0.01


class _Tied(nn.Module):
    def __init__(self):
        super().__init__()
        self.encoder = nn.Module()
        self.encoder.embed_tokens = nn.Embedding(10, 4)
        self.encoder.fc = nn.Linear(4, 4)
        self.decoder = nn.Module()
        self.decoder.fc = self.encoder.fc  # a shared module
        self.decoder.output_projection = nn.Linear(4, 10, bias=False)
        self.decoder.output_projection.weight = self.encoder.embed_tokens.weight  # tied
        self.decoder.view = nn.Linear(4, 4, bias=False)
        # a distinct Parameter object over the same storage as encoder.fc.weight
        self.decoder.view.weight = nn.Parameter(self.encoder.fc.weight.data)
        self.extra = nn.Parameter(torch.zeros(3))


def test_shared_parameters_are_counted_once():
    counts = P.count_parameters(_Tied())
    assert counts == {
        "total": 40 + 20 + 3,
        "embedding": 40,
        "encoder": 20,
        "decoder": 0,
        "other": 3,
    }


def test_macs_are_positive_and_grow_linearly_with_layers():
    macs = []
    for layers in (1, 2, 3):
        model = P.build_model_without_data(
            "transformer", 100, TINY + ["--encoder-layers", str(layers), "--decoder-layers", "1"]
        )
        macs.append(P.count_macs(model)["macs"])
    assert macs[0] > 0
    assert macs[1] - macs[0] == macs[2] - macs[1] > 0
    # one 32-wide encoder layer on 20 tokens: 4 projections + 2 FFN maps + QK^T and AV
    assert macs[1] - macs[0] == 20 * (4 * 32 * 32 + 2 * 32 * 64) + 2 * 20 * 20 * 32


def test_macs_count_the_output_projection_and_both_stacks():
    model = P.build_model_without_data("transformer_iwslt_de_en", 10200)
    m = P.count_macs(model)
    assert m["macs"] == m["macs_encoder"] + m["macs_decoder"]
    assert m["macs_decoder"] > 20 * 10200 * 512  # the (tied) output projection alone
    assert m["macs_per_token"] == m["macs"] / 20


def test_report_has_json_fields_and_ratio(capsys):
    argv = [
        "--arch", "transformer_iwslt_de_en", "--vocab-size", "10200",
        "--encoder-layers", "3", "--reference-arch", "transformer_iwslt_de_en", "--macs",
    ]  # fmt: skip
    assert P.main(argv) == 0
    out = json.loads(capsys.readouterr().out)
    for key in ("total", "embedding", "encoder", "decoder", "macs", "reference_total"):
        assert isinstance(out[key], int) and out[key] > 0
    assert out["share_all_embeddings"] is True
    assert out["total"] == out["embedding"] + out["encoder"] + out["decoder"] + out["other"]
    assert out["ratio"] == pytest.approx(36_765_696 / out["total"])
    assert out["ratio"] > 1.2


def test_table_lists_models_with_the_first_as_reference(capsys):
    spec = "transformer_iwslt_de_en,12-2=transformer_iwslt_de_en:--encoder-layers=12:--decoder-layers=2"
    assert P.main(["--vocab-size", "10200", "--table", spec]) == 0
    lines = capsys.readouterr().out.strip().splitlines()
    assert lines[0].split()[:2] == ["Model", "Params"] and "MACs" in lines[0]
    assert len(lines) == 4
    assert (
        lines[2].startswith("transformer_iwslt_de_en")
        and "36.8M" in lines[2]
        and "1.00x" in lines[2]
    )
    assert lines[3].startswith("12-2") and "36.8M" in lines[3]


def test_model_specs_keep_commas_inside_flag_values():
    specs = P.parse_model_specs(
        "a=transformer:--encoder-layers=3:--lc-spec=x,y=lowrank(rank=8),"
        "transformer_iwslt_de_en:--no-share-all-embeddings"
    )
    assert [s.name for s in specs] == ["a", "transformer_iwslt_de_en"]
    assert specs[0].args == ["--encoder-layers", "3", "--lc-spec", "x,y=lowrank(rank=8)"]
    assert specs[1].share_all_embeddings is False and specs[1].args == []


def test_plugin_architecture_is_counted():
    from fairseq.models import ARCH_MODEL_REGISTRY

    import lightcompress  # noqa: F401

    if "lightformer_iwslt_de_en_lmf_sharing" not in ARCH_MODEL_REGISTRY:
        pytest.skip("LightFormer architectures not registered")
    # LightFormer Table 6/8: 18-3, LMF + 6 sharing groups, 7.7M at a 10.2k vocabulary
    n = total("lightformer_iwslt_de_en_lmf_sharing", 10200)
    assert abs(n - 7.7e6) / 7.7e6 < 0.01


@pytest.mark.parametrize(
    "argv, message",
    [
        (["--arch", "no_such_arch", "--vocab-size", "100"], "unknown architecture 'no_such_arch'"),
        (["--arch", "transformer", "--vocab-size", "3"], "--vocab-size must be an integer > 4"),
        (["--arch", "transformer", "--vocab-size", "100", "--encoder-layerz", "2"], "unrecognized"),
    ],
)
def test_bad_input_is_one_clear_error_line(argv, message, capsys):
    assert P.main(argv) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("lightcompress-params: error:") and message in err[0]


def test_cli_exit_code_and_clean_stdout():
    env = dict(os.environ, PYTHONPATH=REPO_ROOT, OMP_NUM_THREADS="1")
    cmd = [sys.executable, "-m", "lightcompress.measure.params"]

    def run(extra):
        return subprocess.run(
            cmd + extra, capture_output=True, text=True, env=env, cwd=REPO_ROOT, check=False
        )

    bad = run(["--arch", "nope", "--vocab-size", "100"])
    assert bad.returncode == 2
    assert (
        bad.stderr.strip().splitlines()[-1]
        == "lightcompress-params: error: unknown architecture 'nope'"
    )
    good = run(["--arch", "transformer_iwslt_de_en", "--vocab-size", "10200"])
    assert good.returncode == 0, good.stderr
    assert json.loads(good.stdout)["total"] == 36_765_696
