"""Speed protocol, int8 quantization and plots. No test asserts a timing."""

import json
import os
import subprocess
import sys

import pytest
import torch
from harness import REPO_ROOT
from torch import nn

from lightcompress.deploy.quantize import (
    count_quantized_linears,
    prepare_for_int8,
    quantize_model_int8,
)
from lightcompress.measure import timing
from lightcompress.measure.specs import build_random_model

SCRIPTS = os.path.join(REPO_ROOT, "scripts")
TINY = [
    "--encoder-layers",
    "2",
    "--decoder-layers",
    "2",
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

# --------------------------------------------------------------------------------------------
# protocol logic on fixed numbers
# --------------------------------------------------------------------------------------------


def test_ten_runs_drop_the_fastest_and_slowest_and_average_the_middle_eight():
    values = [10.0, 1.0, 9.0, 2.0, 8.0, 3.0, 7.0, 4.0, 6.0, 100.0]
    assert timing.trim_count(10, 0.1) == 1
    assert timing.trimmed(values) == [2.0, 3.0, 4.0, 6.0, 7.0, 8.0, 9.0, 10.0]
    assert timing.trimmed_mean(values) == pytest.approx(49 / 8)


def test_trim_counts_for_other_run_numbers():
    assert [timing.trim_count(n, 0.1) for n in (1, 2, 9, 10, 19, 20, 25)] == [0, 0, 0, 1, 1, 2, 2]
    assert timing.trim_count(3, 0.45) == 1  # at least one value is always kept
    assert timing.trimmed_mean([5.0]) == 5.0
    with pytest.raises(ValueError):
        timing.trimmed_mean([])


def test_summary_is_in_tokens_per_second_of_the_kept_runs():
    seconds = [1.0, 2.0, 4.0, 1.0, 1.0, 2.0, 2.0, 0.5, 1.0, 1.0]
    tokens = [100] * 10
    s = timing.summarize_runs(seconds, tokens)
    assert s["tokens_per_s"][0] == 100.0 and s["tokens_per_s"][7] == 200.0
    assert s["dropped_each_end"] == 1
    assert s["kept"] == sorted([100.0] * 5 + [50.0] * 3)
    assert s["mean"] == pytest.approx((5 * 100 + 3 * 50) / 8)
    assert (s["min"], s["max"]) == (50.0, 100.0)
    assert s["std"] == pytest.approx((5 * 3 / 64) ** 0.5 * 50)


def test_runs_are_interleaved_a_b_c_a_b_c():
    assert timing.interleaved_schedule(3, 2) == [(0, 0), (0, 1), (0, 2), (1, 0), (1, 1), (1, 2)]


def test_table_is_aligned():
    text = timing.format_table(["Model", "Tokens/s"], [["a", "1.0"], ["longer", "123.4"]])
    lines = text.splitlines()
    assert lines[0] == "Model   Tokens/s"
    assert lines[1] == "------  --------"
    assert lines[2] == "a            1.0"
    assert lines[3] == "longer     123.4"
    assert timing.human_count(36_765_696) == "36.8M"


# --------------------------------------------------------------------------------------------
# int8
# --------------------------------------------------------------------------------------------


def _tiny_model():
    torch.manual_seed(0)
    return build_random_model("transformer", 60, TINY, return_task=True)


def _translate(task, model, length=6):
    from argparse import Namespace

    gen = task.build_generator([model], Namespace(beam=3, max_len_a=0, max_len_b=8, min_len=1))
    src = torch.tensor([[5, 9, 11, 17, 23, 2][:length]])
    sample = {
        "id": torch.tensor([0]),
        "net_input": {"src_tokens": src, "src_lengths": torch.tensor([src.numel()])},
    }
    return task.inference_step(gen, [model], sample)[0][0]["tokens"]


def test_int8_packs_every_linear_and_still_decodes_incrementally():
    model, task, _ = _tiny_model()
    q = quantize_model_int8(model)
    # 2 x (4 + 2) encoder + 2 x (8 + 2) decoder maps + the (tied) output projection
    assert count_quantized_linears(q) == 12 + 20 + 1
    assert q.encoder.layers[0].fc1.weight().dtype == torch.qint8
    assert q.decoder.output_projection.weight().dtype == torch.qint8
    assert model.encoder.layers[0].fc1.weight.dtype == torch.float32  # the original is untouched
    # the encoder takes fairseq attention's non-fast path (q_proj is called, not read)
    assert q.encoder.layers[0].self_attn.skip_embed_dim_check
    src = torch.tensor([[5, 9, 11, 17, 2]])
    prev = torch.tensor([[2, 7, 8]])
    with torch.no_grad():
        ref = model(src, torch.tensor([5]), prev)[0]
        out = q(src, torch.tensor([5]), prev)[0]
    assert (out - ref).abs().max() < 0.1 * ref.abs().max()
    tokens = _translate(task, q)
    assert tokens.numel() >= 2 and int(tokens[-1]) == task.target_dictionary.eos()


def test_factorized_layers_become_quantizable_linears_with_the_same_outputs():
    mods = pytest.importorskip("lightcompress.modules")
    model, task, _ = _tiny_model()
    layer = model.encoder.layers[0]
    layer.fc1 = mods.LowRankLinear.from_linear(layer.fc1, rank=8)
    layer.self_attn._set_skip_embed_dim_check()
    layer.self_attn.q_proj = mods.CPLinear.from_linear(layer.self_attn.q_proj, rank=4, heads=2)
    model.decoder.layers[1].fc2 = layer.fc1.__class__(64, 32, rank=4)  # from scratch
    src, prev = torch.tensor([[5, 9, 11, 17, 2]]), torch.tensor([[2, 7, 8]])
    import copy

    prepared = copy.deepcopy(model)
    assert prepare_for_int8(prepared) == 3
    assert not any(isinstance(m, (mods.LowRankLinear, mods.CPLinear)) for m in prepared.modules())
    with torch.no_grad():
        ref = model(src, torch.tensor([5]), prev)[0]
        torch.testing.assert_close(
            prepared(src, torch.tensor([5]), prev)[0], ref, atol=1e-5, rtol=1e-5
        )
    q = quantize_model_int8(model)
    assert q.encoder.layers[0].fc1.first.weight().dtype == torch.qint8
    assert q.encoder.layers[0].fc1.second.weight().dtype == torch.qint8
    assert _translate(task, q).numel() >= 2


def test_lowrank_tied_output_projection_is_quantized():
    integration = pytest.importorskip("lightcompress.integration")
    emb_mod = pytest.importorskip("lightcompress.modules.embeddings")
    emb = emb_mod.LowRankEmbedding(50, 16, rank=4, padding_idx=1)
    head = nn.Module()
    head.proj = integration.TiedOutputProjection(emb)
    x = torch.randn(3, 16)
    ref = head.proj(x)
    prepare_for_int8(head)
    torch.testing.assert_close(head.proj(x), ref, atol=1e-5, rtol=1e-5)


# --------------------------------------------------------------------------------------------
# end to end: two tiny checkpoints, float32 and int8, side by side, with BLEU
# --------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def two_checkpoints(tiny_transformer, tmp_path_factory):
    """The tiny 2-2 checkpoint and a 2-1 copy of it (its second decoder layer dropped)."""
    import lightcompress.plugin  # noqa: F401  (allow-lists fairseq checkpoint types)

    best = os.path.join(tiny_transformer, "checkpoint_best.pt")
    state = torch.load(best)
    state["cfg"]["model"].decoder_layers = 1
    state["model"] = {
        k: v for k, v in state["model"].items() if not k.startswith("decoder.layers.1.")
    }
    small = str(tmp_path_factory.mktemp("pruned") / "checkpoint_2_1.pt")
    torch.save(state, small)
    return best, small


def test_speed_side_by_side_with_int8_and_bleu(tiny_data, two_checkpoints, tmp_path):
    best, small = two_checkpoints
    out = tmp_path / "speed.json"
    env = dict(os.environ, OMP_NUM_THREADS="1", PYTHONWARNINGS="ignore")
    proc = subprocess.run(
        [
            "bash",
            os.path.join(SCRIPTS, "measure_speed.sh"),
            "--data",
            tiny_data,
            "--path",
            f"base={best},small={small}",
            "--runs",
            "2",
            "--num-sentences",
            "3",
            "--src-len",
            "6",
            "--beam",
            "2",
            "--compare-int8",
            "--bleu",
            "--bleu-threads",
            "2",
            "--json",
            str(out),
            "--quiet",
        ],
        capture_output=True,
        text=True,
        env=env,
        cwd=REPO_ROOT,
        timeout=300,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    lines = proc.stdout.splitlines()
    assert "EXCLUDING EOS" in lines[0]
    header = next(i for i, ln in enumerate(lines) if ln.startswith("Model"))
    assert lines[header].split() == [
        "Model",
        "Engine",
        "Precision",
        "Params",
        "Size",
        "Tokens/s",
        "Std",
        "Kept",
        "min-max",
        "Speed",
        "BLEU",
    ]
    rows = [ln.split() for ln in lines[header + 2 : header + 6]]
    assert {r[1] for r in rows} == {"fairseq"}
    assert [(r[0], r[2]) for r in rows] == [
        ("base", "float32"),
        ("base", "int8"),
        ("small", "float32"),
        ("small", "int8"),
    ]
    assert rows[0][-2] == "1.00x"
    # the BLEU column's sacreBLEU signature follows the table
    (sig,) = [ln for ln in lines if ln.startswith("BLEU: sacreBLEU ")]
    assert "nrefs:1|case:mixed|eff:no|tok:13a|smooth:exp|version:" in sig
    assert "on the test split (40 sentences" in sig

    doc = json.loads(out.read_text())
    assert doc["protocol"]["num_sentences"] == 3 and doc["protocol"]["runs"] == 2
    assert doc["protocol"]["beam"] == 2 and doc["protocol"]["batch_size"] == 1
    assert "EOS excluded" in doc["protocol"]["tokens"]
    assert doc["protocol"]["threads"] == 1 and doc["protocol"]["bleu"]["threads"] == 2
    for key in ("date", "cpu", "torch", "fairseq"):
        assert doc["environment"][key]
    models = doc["models"]
    assert [m["precision"] for m in models] == ["float32", "int8", "float32", "int8"]
    assert models[0]["params"] > models[2]["params"] > 0
    for m in models:
        assert len(m["runs"]) == 2
        assert all(r["seconds"] > 0 and r["tokens"] > 0 for r in m["runs"])
        assert m["tokens_per_s"] > 0 and m["speed_ratio"] > 0
        assert m["bleu_sentences"] == 40 and 0.0 <= m["bleu"] <= 100.0
        assert all(h.strip() for h in m["hypotheses_sample"])
    assert models[0]["speed_ratio"] == 1.0
    assert sig.split()[2] == models[0]["bleu_signature"]
    # interleaved: run r of every model before run r + 1 of any; tokens are deterministic
    assert models[0]["runs"][0]["tokens"] == models[0]["runs"][1]["tokens"]

    # plot_frontier reads this JSON
    png = tmp_path / "frontier.png"
    subprocess.run(
        [sys.executable, os.path.join(SCRIPTS, "plot_frontier.py"), str(out), "--out", str(png)],
        check=True,
        capture_output=True,
    )
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_random_weight_architectures_are_forced_to_equal_output_lengths(capsys):
    from lightcompress.measure import speed

    argv = [
        "--arch",
        "a=transformer:"
        + ":".join(f"{k}={v}" for k, v in zip(TINY[::2], TINY[1::2]))
        + ",b=transformer:--encoder-layers=1:--decoder-layers=1:--encoder-embed-dim=32"
        ":--decoder-embed-dim=32:--encoder-ffn-embed-dim=64:--decoder-ffn-embed-dim=64"
        ":--encoder-attention-heads=2:--decoder-attention-heads=2",
        "--vocab-size",
        "100",
        "--runs",
        "2",
        "--warmup",
        "0",
        "--num-sentences",
        "2",
        "--src-len",
        "5",
        "--quantize",
        "int8",
        "--quiet",
    ]
    assert speed.main(argv) == 0
    out = capsys.readouterr().out
    assert "output forced to 5 tokens" in out and "random word ids" in out
    rows = [ln.split() for ln in out.splitlines() if ln.startswith(("a ", "b "))]
    assert [r[:3] for r in rows] == [["a", "fairseq", "int8"], ["b", "fairseq", "int8"]]


@pytest.mark.parametrize(
    "argv, message",
    [
        (["--path", "x.pt"], "--path needs --data"),
        (["--arch", "transformer"], "needs --vocab-size"),
        (["--arch", "no_such_arch", "--vocab-size", "50"], "unknown architecture"),
        (["--vocab-size", "50"], "nothing to measure"),
    ],
)
def test_speed_errors_are_one_line(argv, message, capsys):
    from lightcompress.measure import speed

    assert speed.main(argv + ["--runs", "1"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and message in err[0]


# --------------------------------------------------------------------------------------------
# plots
# --------------------------------------------------------------------------------------------

SIMPLE_LOG = """\
2024-01-01 00:00:00 | INFO | fairseq_cli.train | model transformer
2024-01-01 00:00:01 | INFO | train_inner | epoch 001:     5 / 9 loss=6.567, nll_loss=6.576, ppl=95.38, num_updates=5, lr=0.00075
2024-01-01 00:00:02 | INFO | train_inner | epoch 001:     10 / 9 loss=5.9, nll_loss=5.8, ppl=60, num_updates=10, lr=0.001
2024-01-01 00:00:02 | INFO | valid | epoch 001 | valid on 'valid' subset | loss 5.848 | nll_loss 5.787 | ppl 55.22 | num_updates 10
"""
JSON_LOG = """\
2024-01-01 00:00:01 | INFO | train_inner | {"epoch": 1, "update": 0.5, "loss": "6.1", "nll_loss": "6.0", "num_updates": "5"}
2024-01-01 00:00:02 | INFO | train_inner | {"epoch": 1, "update": 1.0, "loss": "5.1", "nll_loss": "5.0", "num_updates": "10"}
2024-01-01 00:00:02 | INFO | valid | {"epoch": 1, "valid_loss": "5.5", "valid_nll_loss": "5.4", "valid_num_updates": "10"}
"""


def _plot_curves():
    sys.path.insert(0, SCRIPTS)
    try:
        import plot_curves
    finally:
        sys.path.remove(SCRIPTS)
    return plot_curves


def test_curves_are_parsed_from_simple_and_json_logs_and_plotted(tmp_path):
    pc = _plot_curves()
    (tmp_path / "svd.log").write_text(SIMPLE_LOG)
    (tmp_path / "random.log").write_text(JSON_LOG)
    assert pc.parse_log(str(tmp_path / "svd.log")) == {
        "train": [(5, 6.567), (10, 5.9)],
        "valid": [(10, 5.848)],
    }
    assert pc.parse_log(str(tmp_path / "random.log")) == {
        "train": [(5, 6.1), (10, 5.1)],
        "valid": [(10, 5.5)],
    }
    png = tmp_path / "curves.png"
    rc = pc.main(
        [
            str(tmp_path / "svd.log"),
            str(tmp_path / "random.log"),
            "--labels",
            "SVD,random",
            "--out",
            str(png),
        ]
    )
    assert rc == 0 and png.read_bytes()[:4] == b"\x89PNG"


def test_empty_or_foreign_logs_are_clear_errors(tmp_path, capsys):
    pc = _plot_curves()
    (tmp_path / "empty.log").write_text("")
    (tmp_path / "other.log").write_text("hello\nworld\n")
    assert pc.main([str(tmp_path / "empty.log"), "--out", str(tmp_path / "x.png")]) == 2
    assert "empty log" in capsys.readouterr().err
    assert pc.main([str(tmp_path / "other.log"), "--out", str(tmp_path / "x.png")]) == 2
    assert "no fairseq 'train_inner' or 'valid' line" in capsys.readouterr().err
    assert not (tmp_path / "x.png").exists()


def test_frontier_needs_bleu(tmp_path):
    path = tmp_path / "r.json"
    path.write_text(json.dumps({"models": [{"label": "a", "params": 10, "tokens_per_s": 5.0}]}))
    proc = subprocess.run(
        [sys.executable, os.path.join(SCRIPTS, "plot_frontier.py"), str(path)],
        capture_output=True,
        text=True,
        check=False,
    )
    assert proc.returncode == 2 and "has no BLEU" in proc.stderr
    path.write_text("")
    proc = subprocess.run(
        [sys.executable, os.path.join(SCRIPTS, "plot_frontier.py"), str(path)],
        capture_output=True,
        text=True,
        check=False,
    )
    assert proc.returncode == 2 and "empty file" in proc.stderr


def test_frontier_plots_records_without_speed_in_the_params_panel_only(tmp_path):
    """A recipe's result.json without tokens/s (MEASURE_SPEED=0) still plots."""
    path = tmp_path / "result.json"
    rec = {
        "label": "lf",
        "params": 7_600_000,
        "tokens_per_s": None,
        "bleu": 34.6,
        "bleu_signature": "nrefs:1|case:mixed|eff:no|tok:13a|smooth:exp|version:2.6.0",
    }
    path.write_text(json.dumps({"models": [rec]}))
    png = tmp_path / "f.png"
    proc = subprocess.run(
        [sys.executable, os.path.join(SCRIPTS, "plot_frontier.py"), str(path), "--out", str(png)],
        capture_output=True,
        text=True,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr
    assert png.read_bytes()[:4] == b"\x89PNG"
    rec.pop("params")
    path.write_text(json.dumps({"models": [rec]}))
    proc = subprocess.run(
        [sys.executable, os.path.join(SCRIPTS, "plot_frontier.py"), str(path), "--out", str(png)],
        capture_output=True,
        text=True,
        check=False,
    )
    assert proc.returncode == 2 and "neither params nor tokens_per_s" in proc.stderr


def test_natural_sentences_are_every_kth_of_the_split_at_their_own_lengths():
    """--natural (pick_sentences(natural=True)): every k-th sentence (k = size // n) in file
    order; without it, the n closest to --src-len (ties: the lower index)."""
    from lightcompress.measure.protocol import pick_sentences

    class Split:
        def __init__(self):
            self.src = [torch.arange(n + 1) for n in (3, 9, 6, 6, 2, 8, 5, 7, 4)]  # (+ EOS)
            self.src_sizes = [len(s) for s in self.src]

        def __len__(self):
            return len(self.src)

    class Task:
        def load_dataset(self, subset):
            assert subset == "test"

        def dataset(self, subset):
            return Split()

    natural = pick_sentences(Task(), "test", 3, 6, natural=True)
    assert [len(s) - 1 for s in natural] == [3, 6, 5]  # sentences 0, 3, 6
    closest = pick_sentences(Task(), "test", 3, 6)
    assert [len(s) - 1 for s in closest] == [6, 6, 5]  # sentences 2, 3, then 6 (|5 - 6| = 1)


def test_kept_exports_are_linked_for_the_next_run_of_the_same_checkpoint(tmp_path, monkeypatch):
    """keep_exports (compress's two speed steps): a second run exporting the same checkpoint
    file, data, shortlist and precision links the first run's files instead of exporting; a
    changed checkpoint file, or another shortlist, is exported again."""
    from types import SimpleNamespace

    from lightcompress.measure import candidates as cand

    monkeypatch.setattr(cand, "_kept_folder", str(tmp_path / "kept"))
    monkeypatch.setattr(cand, "_kept", {})
    (tmp_path / "kept").mkdir()
    ckpt = tmp_path / "student.pt"
    ckpt.write_bytes(b"weights")
    model = SimpleNamespace(
        label="student",
        source=str(ckpt),
        task=SimpleNamespace(cfg=SimpleNamespace(data=str(tmp_path / "bin"))),
        params=1,
        random_weights=False,
        args=[],
        model_args=None,
        engine="fairseq",
        precision="float32",
    )
    made = []

    def export(c, target, precision):
        made.append(precision)
        os.makedirs(target)
        with open(os.path.join(target, "model.onnx"), "w") as f:
            f.write(f"{precision} {len(made)}")

    def run(workdir, shortlist=None):
        new, _notes = cand._with_exports(
            [model],
            str(workdir),
            "onnxruntime",
            "ONNX",
            ("float32", "int8"),
            export,
            lambda c, target, precision: None,
            ValueError,
            shortlist=shortlist,
        )
        return [open(os.path.join(c.source, "model.onnx")).read() for c in new]

    assert run(tmp_path / "a") == ["float32 1", "int8 2"]
    assert run(tmp_path / "b") == ["float32 1", "int8 2"] and made == ["float32", "int8"]
    listed = tmp_path / "shortlist.txt"
    listed.write_text("1 2\n")
    assert run(tmp_path / "c", str(listed)) == ["float32 3", "int8 4"]
    os.utime(ckpt, ns=(1, 1))  # (the checkpoint file changed)
    assert run(tmp_path / "d") == ["float32 5", "int8 6"]
