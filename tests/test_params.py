"""Parameter and MAC counts without data: the papers' model sizes, dedup (meta-safe, the same
counter as ``count_unique_params``), building models without data (``lightcompress.build``),
the CLI."""

import json
import os
import subprocess
import sys

import harness
import pytest
import torch
from harness import REPO_ROOT, SOURCES
from torch import nn

from lightcompress.measure import params as P
from lightcompress.measure import specs as S
from lightcompress.modules.counting import count_parameters

TINY = [
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
]


def total(arch, vocab, extra=(), share=True):
    return count_parameters(S.build_random_model(arch, vocab, extra, share))["total"]


def test_transformer_iwslt_de_en_has_36_8m_parameters_at_a_10_2k_joined_vocabulary():
    counts = count_parameters(S.build_random_model("transformer_iwslt_de_en", 10200))
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
    counts = count_parameters(_Tied())
    assert counts == {
        "total": 40 + 20 + 3,
        "embedding": 40,
        "encoder": 20,
        "decoder": 0,
        "other": 3,
    }


LOW_RANK = ["--lc-rank", "8", "--lc-embed-rank", "8"]


def test_distinct_equal_shaped_meta_tensors_are_not_merged():
    from lightcompress.modules import count_unique_params

    model = nn.Sequential(nn.Linear(4, 4), nn.Linear(4, 4)).to("meta")
    assert count_parameters(model)["total"] == 40 == count_unique_params(model)
    # the tied / shared example built on the meta device (``.to("meta")`` would untie it);
    # there, a tensor shares another's values only by being the same Parameter
    with torch.device("meta"):
        meta = _Tied()
    meta.decoder.view.weight = meta.encoder.fc.weight
    assert count_parameters(meta)["total"] == 40 + 20 + 3 == count_unique_params(meta)


@pytest.mark.parametrize(
    "arch, extra",
    [
        ("transformer", TINY),
        ("transformer", TINY + ["--no-share-all-embeddings"]),
        ("lightformer", TINY + ["--encoder-layers", "4", "--lc-encoder-groups", "2"] + LOW_RANK),
    ],
)
def test_count_parameters_total_is_count_unique_params_on_real_and_meta_models(arch, extra):
    from lightcompress.build import build_model_without_data, parse_model_args
    from lightcompress.modules import count_unique_params

    share = "--no-share-all-embeddings" not in extra
    flags = [f for f in extra if f != "--no-share-all-embeddings"]
    flags += ["--share-all-embeddings"] if share else []
    real = build_model_without_data(parse_model_args(arch, flags), 100)
    meta = harness.build_without_data(arch, 100, flags, device="meta")
    n = count_unique_params(real)
    listed = sum(p.numel() for _, p in real.named_parameters(remove_duplicate=False))
    assert (n < listed) == share  # the shared embedding table is listed three times
    assert count_parameters(real) == count_parameters(meta)
    assert count_parameters(real)["total"] == n == count_unique_params(meta)


# --- building without data (lightcompress.build, the one way) --------------------------------


def test_dictionary_of_size_and_the_task_stub():
    from lightcompress.build import NoDataTask, dictionary_of_size

    d = dictionary_of_size(10)
    assert len(d) == 10 and d.pad() == 1 and d.eos() == 2
    assert len(dictionary_of_size(4)) == 4  # the specials only
    for bad in (3, 10.0, True):
        with pytest.raises(ValueError, match="integer size >= 4"):
            dictionary_of_size(bad)
    assert len(S.make_dictionary(10)) == 10
    task = NoDataTask(d, dictionary_of_size(12))
    assert task.source_dictionary is task.dictionary is d
    assert len(task.target_dictionary) == len(task.output_dictionary) == 12
    assert NoDataTask(d).target_dictionary is d


def test_build_model_without_data_with_separate_dictionaries():
    from lightcompress.build import build_model_without_data, parse_model_args
    from lightcompress.convert.core import build_fairseq_model

    args = parse_model_args("transformer", TINY)
    model = build_model_without_data(args, 60, 70)
    assert model.encoder.embed_tokens.weight.shape == (60, 32)
    assert model.decoder.embed_tokens.weight.shape == (70, 32)
    assert len(model.encoder.dictionary) == 60 and len(model.decoder.dictionary) == 70
    # the converter's name for it is the same function
    same = build_fairseq_model(args, 60, 70)
    assert count_parameters(same) == count_parameters(model)
    joined = build_model_without_data(parse_model_args("transformer", TINY), 60, 60)
    assert joined.encoder.dictionary is joined.decoder.dictionary


@pytest.mark.parametrize("arch", ["transformer_lm", "subformer_lm"])
def test_build_model_without_data_builds_language_models(arch):
    """From the training Namespace, as fairseq-train builds them (its model config)."""
    from fairseq import models
    from fairseq.dataclass.utils import convert_namespace_to_omegaconf
    from fairseq.models import FairseqLanguageModel

    from lightcompress.build import NoDataTask, build_model_without_data, parse_model_args

    # (the LM's input/output widths do not follow --decoder-embed-dim in fairseq's config path)
    flags = [
        "--tokens-per-sample",
        "64",
        "--decoder-layers",
        "3",
        "--decoder-embed-dim",
        "32",
        "--decoder-input-dim",
        "32",
        "--decoder-output-dim",
        "32",
        "--decoder-ffn-embed-dim",
        "64",
        "--decoder-attention-heads",
        "2",
    ]
    if arch == "subformer_lm":
        flags += ["--subformer-sandwich-dim", "32"]
    args = parse_model_args(arch, flags, task="language_modeling")
    model = build_model_without_data(args, 100)
    assert isinstance(model, FairseqLanguageModel)
    assert model.decoder.embed_tokens.weight.shape == (100, 32)
    out, _ = model(torch.randint(4, 100, (2, 5)))
    assert out.shape == (2, 5, 100)
    fairseq_train = models.build_model(
        convert_namespace_to_omegaconf(args).model, NoDataTask(S.make_dictionary(100))
    )
    assert count_parameters(model) == count_parameters(fairseq_train)


def test_build_helpers_refuse_unknown_architectures_and_bad_flags():
    from lightcompress.build import parse_model_args

    with pytest.raises(ValueError, match="unknown architecture 'no_such_arch'"):
        parse_model_args("no_such_arch")
    with pytest.raises(ValueError, match="unrecognized arguments: --encoder-layerz"):
        parse_model_args("transformer", ["--encoder-layerz", "2"])


def test_macs_are_positive_and_grow_linearly_with_layers():
    macs = []
    for layers in (1, 2, 3):
        model = S.build_random_model(
            "transformer", 100, TINY + ["--encoder-layers", str(layers), "--decoder-layers", "1"]
        )
        macs.append(P.count_macs(model)["macs"])
    assert macs[0] > 0
    assert macs[1] - macs[0] == macs[2] - macs[1] > 0
    # one 32-wide encoder layer on 20 tokens: 4 projections + 2 FFN maps + QK^T and AV
    assert macs[1] - macs[0] == 20 * (4 * 32 * 32 + 2 * 32 * 64) + 2 * 20 * 20 * 32


def test_macs_count_the_output_projection_and_both_stacks():
    model = S.build_random_model("transformer_iwslt_de_en", 10200)
    m = P.count_macs(model)
    assert m["macs"] == m["macs_encoder"] + m["macs_decoder"]
    assert m["macs_decoder"] > 20 * 10200 * 512  # the (tied) output projection alone
    assert m["macs_per_token"] == m["macs"] / 20


def test_report_has_json_fields_and_ratio(capsys):
    argv = [
        "--arch",
        "transformer_iwslt_de_en",
        "--vocab-size",
        "10200",
        "--encoder-layers",
        "3",
        "--reference-arch",
        "transformer_iwslt_de_en",
        "--macs",
    ]
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
    specs = S.parse_model_specs(
        "a=transformer:--encoder-layers=3:--lc-spec=x,y=lowrank(rank=8),"
        "transformer_iwslt_de_en:--no-share-all-embeddings"
    )
    assert [s.name for s in specs] == ["a", "transformer_iwslt_de_en"]
    assert specs[0].args == ["--encoder-layers", "3", "--lc-spec", "x,y=lowrank(rank=8)"]
    assert specs[1].share_all_embeddings is False and specs[1].args == []


def test_plugin_architecture_is_counted():
    from fairseq.models import ARCH_MODEL_REGISTRY

    import lightcompress.plugin  # noqa: F401

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
    env = dict(os.environ, PYTHONPATH=SOURCES, OMP_NUM_THREADS="1")
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


# ------------------------------------------------------------------ sentence encoders (RoBERTa)


def test_roberta_base_counts_85m_without_the_embedding_layer_as_da_wid_and_cofi_count(capsys):
    # DA-WID Table 1 (after Xia et al. 2022): BERT-base has 85M parameters without the embedding
    # layer, i.e. its 12 Transformer layers; RoBERTa-base has the same layers. A small
    # dictionary keeps the build cheap (the layers do not depend on it).
    argv = ["--arch", "roberta_base", "--vocab-size", "104", "--num-classes", "3"]
    assert P.main(argv) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["task"] == "sentence_prediction" and "share_all_embeddings" not in out
    assert out["non_embedding"] == out["encoder"] == 12 * 7_087_872 == 85_054_464
    d = 768
    # tokens, 512 + 2 learned positions, the embedding LayerNorm
    assert out["embedding"] == 104 * d + 514 * d + 2 * d
    # the LM head's dense map, LayerNorm and output bias; the 3-class head (dense + out_proj)
    assert out["other"] == (d * d + d + 2 * d + 104) + (d * d + d + 3 * d + 3)
    assert out["total"] == out["embedding"] + out["encoder"] + out["other"]


def test_a_roberta_checkpoint_is_counted_with_its_classification_heads(tmp_path, capsys):
    from lightcompress.build import build_model_without_data, parse_model_args

    flags = [
        "--encoder-layers",
        "2",
        "--encoder-embed-dim",
        "16",
        "--encoder-ffn-embed-dim",
        "32",
        "--encoder-attention-heads",
        "2",
        "--max-positions",
        "24",
    ]
    args = parse_model_args("roberta", flags, task="sentence_prediction")
    model = build_model_without_data(args, 40)
    model.register_classification_head("mrpc_head", num_classes=2)
    model.register_classification_head("stsb_head", num_classes=1, inner_dim=8)
    path = str(tmp_path / "roberta.pt")
    torch.save({"args": None, "cfg": {"model": args}, "model": model.state_dict()}, path)
    assert P.main(["--path", path]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["total"] == sum(p.numel() for p in model.parameters())
    layers = sum(p.numel() for p in model.encoder.sentence_encoder.layers.parameters())
    assert out["non_embedding"] == layers
    heads = sum(p.numel() for p in model.classification_heads.parameters())
    lm_head = sum(p.numel() for n, p in model.encoder.lm_head.named_parameters() if n != "weight")
    assert out["other"] == heads + lm_head
    # the same model from its flags (--arch) counts the same (one head: the task's)
    argv = [
        "--arch",
        "roberta",
        "--vocab-size",
        "40",
        *flags,
        "--num-classes",
        "2",
        "--classification-head-name",
        "mrpc_head",
    ]
    assert P.main(argv) == 0
    from_arch = json.loads(capsys.readouterr().out)
    stsb = sum(p.numel() for p in model.classification_heads["stsb_head"].parameters())
    assert from_arch["total"] == out["total"] - stsb
    assert from_arch["non_embedding"] == out["non_embedding"]


@pytest.mark.parametrize(
    "argv, message",
    [
        (["--arch", "roberta", "--vocab-size", "40", "--macs"], "roberta is a sentence encoder"),
        (["--vocab-size", "40", "--table", "transformer,roberta"], "--table compares translation"),
    ],
)
def test_sentence_encoders_get_no_macs_and_no_table(argv, message, capsys):
    assert P.main(argv) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and message in err[0], err


def test_translation_reports_name_the_non_embedding_count(capsys):
    assert P.main(["--arch", "transformer_iwslt_de_en", "--vocab-size", "10200"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["non_embedding"] == out["encoder"] + out["decoder"] == 36_765_696 - 10200 * 512
