"""Deployment: CTranslate2 export of dense models, the fast path, lightcompress-translate.

Tiny models on a generated toy corpus, binarized and trained in this process (no fairseq-train):
a 2-2 Transformer trained for a few dozen updates (it ends its sentences with EOS), and
random-weight checkpoints of the plugin's architectures. No test asserts a timing.
"""

import json
import os
import random
import subprocess
import sys
from argparse import Namespace

import harness
import numpy as np
import pytest
import torch
from harness import REPO_ROOT, SOURCES, make_parallel_corpus

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
    "--share-all-embeddings",
    "--dropout",
    "0",
]


# --------------------------------------------------------------------------------------------
# fixtures: data and checkpoints made in this process
# --------------------------------------------------------------------------------------------


def _binarize(raw: str, dest: str) -> str:
    from fairseq import options
    from fairseq_cli import preprocess

    parser = options.get_preprocessing_parser()
    args = parser.parse_args(
        [
            "--source-lang",
            "de",
            "--target-lang",
            "en",
            "--joined-dictionary",
            "--workers",
            "1",
            "--trainpref",
            f"{raw}/train",
            "--validpref",
            f"{raw}/valid",
            "--testpref",
            f"{raw}/test",
            "--destdir",
            dest,
        ]
    )
    preprocess.main(args)
    return dest


def make_checkpoint(data: str, path: str, arch: str, flags, updates: int = 0, seed: int = 1):
    """A fairseq checkpoint of ``arch`` on ``data``'s dictionaries, trained for ``updates``
    Adam updates on the toy task (0: random weights)."""
    from fairseq import tasks

    import lightcompress.plugin  # noqa: F401
    from lightcompress.build import parse_model_args

    torch.manual_seed(seed)
    args = parse_model_args(arch, ["-s", "de", "-t", "en", *flags], data=data)
    task = tasks.setup_task(args)
    model = task.build_model(args)
    if updates:
        task.load_dataset("train")
        ds = task.dataset("train")
        opt = torch.optim.Adam(model.parameters(), lr=1e-2)
        rng = random.Random(seed)
        model.train()
        for _ in range(updates):
            batch = ds.collater([ds[i] for i in rng.sample(range(len(ds)), 32)])
            logits, _ = model(**batch["net_input"])
            loss = torch.nn.functional.cross_entropy(
                logits.reshape(-1, logits.size(-1)),
                batch["target"].reshape(-1),
                ignore_index=task.target_dictionary.pad(),
            )
            opt.zero_grad()
            loss.backward()
            opt.step()
    state = {
        "args": args,
        "model": model.state_dict(),
        "optimizer_history": [
            {
                "criterion_name": "CrossEntropyCriterion",
                "optimizer_name": "FairseqAdam",
                "lr_scheduler_state": {"best": None},
                "num_updates": updates,
            }
        ],
        "last_optimizer_state": None,
        "extra_state": {"train_iterator": {"epoch": 1, "iterations_in_epoch": 0}},
    }
    torch.save(state, path)
    return path


def _sentencepiece(raw: str, root) -> tuple[str, str]:
    """A sentencepiece model of the raw toy corpus (one piece per word) and the corpus encoded
    with it, as a user's data directory would be built."""
    import sentencepiece as spm

    prefix = str(root / "spm")
    spm.SentencePieceTrainer.train(
        input=f"{raw}/train.de,{raw}/train.en",
        model_prefix=prefix,
        model_type="word",
        vocab_size=51,
        hard_vocab_limit=False,
        minloglevel=2,
    )
    sp = spm.SentencePieceProcessor(model_file=prefix + ".model")
    encoded = root / "raw.spm"
    encoded.mkdir()
    for name in os.listdir(raw):
        with open(os.path.join(raw, name)) as f, open(encoded / name, "w") as out:
            out.writelines(" ".join(sp.encode(line.strip(), out_type=str)) + "\n" for line in f)
    return prefix + ".model", str(encoded)


@pytest.fixture(scope="module")
def toy(tmp_path_factory):
    """``{"data", "raw", "spm", "teacher", "root"}``: the toy corpus (raw text, its
    sentencepiece model, binarized pieces) and a 2-2 Transformer trained for 30 updates."""
    root = tmp_path_factory.mktemp("deploy")
    raw = make_parallel_corpus(str(root / "raw"), n_train=400, n_valid=10, n_test=30)
    model, pieces = _sentencepiece(raw, root)
    data = _binarize(pieces, str(root / "bin"))
    teacher = make_checkpoint(data, str(root / "teacher.pt"), "transformer", TINY, updates=30)
    return {"data": data, "raw": raw, "spm": model, "teacher": teacher, "root": root}


def _load(path, data):
    from lightcompress.checkpoint import load_checkpoint

    model, task, _args = load_checkpoint(path, data)
    return model, task


def _fairseq_nbest(model, task, src, gen):
    generator = task.build_generator([model], gen)
    sample = {
        "id": torch.tensor([0]),
        "net_input": {"src_tokens": src[None], "src_lengths": torch.tensor([src.numel()])},
    }
    with torch.inference_mode():
        return task.inference_step(generator, [model], sample)[0]


def _test_sources(task):
    task.load_dataset("test")
    ds = task.dataset("test")
    return [ds.src[i].long() for i in range(len(ds))]


# --------------------------------------------------------------------------------------------
# CTranslate2 export
# --------------------------------------------------------------------------------------------


def _run_export(*args):
    return harness.run(
        [sys.executable, "-c", "from lightcompress.deploy.ct2 import cli_main; cli_main()", *args],
        capture_output=True,
        text=True,
        cwd=REPO_ROOT,
        timeout=300,
        check=False,
        env=dict(os.environ, PYTHONPATH=SOURCES, PYTHONWARNINGS="ignore"),
    )


@pytest.fixture(scope="module")
def teacher_ct2(toy):
    from lightcompress.deploy.ct2 import export_ctranslate2

    out = str(toy["root"] / "teacher_ct2")
    export_ctranslate2(toy["teacher"], toy["data"], out)
    return out


def test_ct2_export_of_the_teacher_translates_greedily_as_fairseq_does(toy, teacher_ct2):
    from lightcompress.measure.engines import CT2Runner

    assert sorted(os.listdir(teacher_ct2)) == [
        "check.json",
        "config.json",
        "model.bin",
        "shared_vocabulary.json",
    ]
    model, task = _load(toy["teacher"], toy["data"])
    runner = CT2Runner(
        teacher_ct2,
        "float32",
        1,
        task.source_dictionary,
        task.target_dictionary,
        model.max_decoder_positions(),
        model.max_positions(),
    )
    sources = _test_sources(task)
    # max_len_b small enough that some outputs hit the limit (fairseq forces EOS there,
    # CTranslate2 stops: the same tokens)
    gen = Namespace(beam=1, lenpen=1.0, min_len=1, max_len_a=0.0, max_len_b=7)
    ct2 = runner.translate(sources, gen, batch_size=8)
    fairseq = [_fairseq_nbest(model, task, s, gen)[0]["tokens"].tolist()[:-1] for s in sources]
    assert ct2 == fairseq
    assert any(len(h) == 7 for h in fairseq) and any(len(h) < 7 for h in fairseq)


def test_ct2_beam_search_picks_fairseqs_best_hypothesis_or_a_near_tie(toy, teacher_ct2):
    """CTranslate2's scores differ from fairseq's in the last digits, so where fairseq's two best
    finished hypotheses are within 0.02 (length-normalized log-probability) the engines may
    pick different ones; elsewhere they agree."""
    from lightcompress.measure.engines import CT2Runner

    model, task = _load(toy["teacher"], toy["data"])
    runner = CT2Runner(
        teacher_ct2,
        "float32",
        1,
        task.source_dictionary,
        task.target_dictionary,
        model.max_decoder_positions(),
        model.max_positions(),
    )
    gen = Namespace(beam=5, lenpen=1.0, min_len=1, max_len_a=1.2, max_len_b=10)
    sources = _test_sources(task)
    ct2 = runner.translate(sources, gen, batch_size=8)
    same = 0
    for src, hyp in zip(sources, ct2):
        nbest = _fairseq_nbest(model, task, src, gen)
        best = nbest[0]["tokens"].tolist()[:-1]
        if hyp == best:
            same += 1
            continue
        scores = {tuple(h["tokens"].tolist()[:-1]): float(h["score"]) for h in nbest}
        assert tuple(hyp) in scores, (hyp, best)
        assert scores[tuple(best)] - scores[tuple(hyp)] < 0.02
    assert same >= 0.8 * len(sources)


def test_ct2_exports_a_dense_plugin_architecture_and_translates_it_identically(toy):
    from lightcompress.deploy.ct2 import export_ctranslate2
    from lightcompress.measure.engines import CT2Runner

    ckpt = make_checkpoint(
        toy["data"], str(toy["root"] / "lf_dense.pt"), "lightformer_iwslt_de_en_dense", TINY
    )
    out = export_ctranslate2(ckpt, toy["data"], str(toy["root"] / "lf_dense_ct2"))
    model, task = _load(ckpt, toy["data"])
    runner = CT2Runner(
        out,
        "float32",
        1,
        task.source_dictionary,
        task.target_dictionary,
        model.max_decoder_positions(),
        model.max_positions(),
    )
    gen = Namespace(beam=1, lenpen=1.0, min_len=1, max_len_a=0.0, max_len_b=6)
    sources = _test_sources(task)[:8]
    fairseq = [_fairseq_nbest(model, task, s, gen)[0]["tokens"].tolist()[:-1] for s in sources]
    assert runner.translate(sources, gen, 8) == fairseq


def test_ct2_export_refuses_a_compressed_model_with_one_line_and_writes_nothing(toy):
    # (a student whose factors multiply out is exported dense, tests/test_ct2_dense.py; Admin's
    # residual scaling has no place in the dense Transformer)
    ckpt = make_checkpoint(
        toy["data"],
        str(toy["root"] / "lf.pt"),
        "lightformer_iwslt_de_en",
        TINY
        + [
            "--lc-rank",
            "8",
            "--lc-embed-rank",
            "8",
            "--lc-encoder-groups",
            "1",
            "--admin-init",
            "closed-form",
        ],
    )
    out = toy["root"] / "lf_ct2"
    proc = _run_export("--path", ckpt, "--data", toy["data"], "-o", str(out))
    assert proc.returncode == 2
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1, proc.stderr
    assert "scales residuals (Admin, --admin-init)" in lines[0]
    assert not out.exists()
    assert not [p for p in os.listdir(toy["root"]) if p.startswith(".lf_ct2")]


def test_ct2_export_bad_input_is_one_line(toy, teacher_ct2, tmp_path, capsys):
    from lightcompress.deploy.ct2 import main

    text = tmp_path / "notes.pt"
    text.write_text("not a checkpoint\n")
    cases = [
        (
            [
                "--path",
                str(tmp_path / "missing.pt"),
                "--data",
                toy["data"],
                "-o",
                str(tmp_path / "a"),
            ],
            "checkpoint not found",
        ),
        (
            ["--path", str(text), "--data", toy["data"], "-o", str(tmp_path / "b")],
            "is not a checkpoint",
        ),
        (
            [
                "--path",
                toy["teacher"],
                "--data",
                str(tmp_path / "nodata"),
                "-o",
                str(tmp_path / "c"),
            ],
            "--data is not a directory",
        ),
        (["--path", toy["teacher"], "--data", toy["data"], "-o", teacher_ct2], "exists"),
        (
            ["--path", toy["teacher"], "--data", toy["data"], "-o", str(tmp_path / "no" / "d")],
            "does not exist",
        ),
    ]
    for args, message in cases:
        assert main(args) == 2, args
        lines = capsys.readouterr().err.strip().splitlines()
        assert len(lines) == 1 and message in lines[0], (args, lines)
        assert lines[0].startswith("lightcompress-export-ct2: error: ")
    assert sorted(os.listdir(tmp_path)) == ["notes.pt"]


# --------------------------------------------------------------------------------------------
# measure_speed: CTranslate2 next to fairseq
# --------------------------------------------------------------------------------------------


def _measure(*args):
    return subprocess.run(
        [os.path.join(REPO_ROOT, "scripts", "measure_speed.sh"), *args],
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
        env=dict(os.environ, PYTHON=sys.executable, PYTHONWARNINGS="ignore"),
    )


def test_measure_speed_times_ct2_next_to_fairseq_with_bleu_and_size(toy, tmp_path):
    # (peak memory, --memory: the lab's measure_speed, lab/tests/test_measure_lab.py)
    out = tmp_path / "speed.json"
    proc = _measure(
        "--data",
        toy["data"],
        "--path",
        f"teacher={toy['teacher']}",
        "--ct2",
        "--bleu",
        "--runs",
        "2",
        "--warmup",
        "0",
        "--num-sentences",
        "4",
        "--src-len",
        "6",
        "--quiet",
        "--json",
        str(out),
    )
    assert proc.returncode == 0, proc.stderr
    result = json.loads(out.read_text())
    rows = {(r["label"], r["engine"], r["precision"]): r for r in result["models"]}
    assert set(rows) == {
        ("teacher", "fairseq", "float32"),
        ("teacher", "ctranslate2", "float32"),
        ("teacher", "ctranslate2", "int8"),
    }
    for r in rows.values():
        assert r["tokens_per_s"] > 0 and r["size_bytes"] > 0
        assert 0 <= r["bleu"] <= 100
    f32, i8 = rows["teacher", "ctranslate2", "float32"], rows["teacher", "ctranslate2", "int8"]
    assert i8["size_bytes"] < f32["size_bytes"]  # int8 weights on disk
    header = proc.stdout.splitlines()[2]
    for column in ("Engine", "Size", "Tokens/s", "BLEU"):
        assert column in header


def test_measure_speed_notes_models_that_ct2_cannot_express(toy, tmp_path):
    from lightcompress.measure.candidates import load_candidates, with_ct2

    lf = make_checkpoint(
        toy["data"],
        str(tmp_path / "lf.pt"),
        "lightformer_iwslt_de_en",
        TINY
        + [
            "--lc-rank",
            "8",
            "--lc-embed-rank",
            "8",
            "--lc-encoder-groups",
            "1",
            "--admin-init",
            "closed-form",
        ],
    )
    candidates = load_candidates([f"teacher={toy['teacher']}", f"lf={lf}"], data=toy["data"])
    ct2, notes = with_ct2(candidates, str(tmp_path / "ct2"), threads=1)
    assert [(c.label, c.engine, c.precision) for c in ct2] == [
        ("teacher", "ctranslate2", "float32"),
        ("teacher", "ctranslate2", "int8"),
    ]
    assert len(notes) == 1 and notes[0].startswith("lf: no CTranslate2 export")
    assert "scales residuals (Admin, --admin-init)" in notes[0]


def test_measure_speed_ct2_dir_must_be_new_or_empty(toy, tmp_path, capsys):
    from lightcompress.measure.speed import main

    (tmp_path / "full").mkdir()
    (tmp_path / "full" / "x").write_text("x")
    assert (
        main(
            [
                "--data",
                toy["data"],
                "--path",
                toy["teacher"],
                "--ct2",
                "--ct2-dir",
                str(tmp_path / "full"),
            ]
        )
        == 2
    )
    assert capsys.readouterr().err.strip().splitlines() == [
        f"measure_speed: error: --ct2-dir {tmp_path / 'full'} must be a new or empty directory"
    ]
    assert (
        main(["--data", toy["data"], "--path", toy["teacher"], "--ct2-dir", str(tmp_path / "new")])
        == 2
    )
    assert "--ct2-dir needs --ct2" in capsys.readouterr().err


# --------------------------------------------------------------------------------------------
# the fast path: fairseq's translations on every architecture
# --------------------------------------------------------------------------------------------

T32 = [
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
    "--dropout",
    "0",
]
FAMILIES = {
    # pre-LN fairseq Transformer
    "transformer": (
        "transformer",
        T32
        + [
            "--encoder-layers",
            "2",
            "--decoder-layers",
            "2",
            "--encoder-normalize-before",
            "--decoder-normalize-before",
        ],
    ),
    # low-rank maps and table (tied output projection from the factors), shared layers, Admin
    "lightformer": (
        "lightformer_iwslt_de_en",
        T32
        + [
            "--encoder-layers",
            "4",
            "--decoder-layers",
            "2",
            "--lc-rank",
            "8",
            "--lc-embed-rank",
            "8",
            "--lc-encoder-groups",
            "2",
            "--lc-decoder-groups",
            "1",
            "--admin-init",
            "closed-form",
        ],
    ),
    # fused HTT Q/K/V self-attention, HTT table, HMF FFN
    "hypoformer": (
        "hypoformer_iwslt_de_en",
        T32
        + [
            "--encoder-layers",
            "2",
            "--decoder-layers",
            "2",
            "--hypo-embed-rank",
            "2",
            "--hypo-ffn-rank",
            "8",
            "--admin-init",
            "closed-form",
        ],
    ),
    # CP-factorized Q/K/V (CPLinear)
    "smartformer": (
        "smartformer_iwslt_de_en",
        T32 + ["--encoder-layers", "2", "--decoder-layers", "2", "--sm-rank", "4"],
    ),
    # SAFE + sandwich layers (query-projected cross-attention)
    "subformer": (
        "subformer",
        T32
        + [
            "--subformer-init",
            "bert",
            "--safe-dim",
            "16",
            "--safe-heads",
            "2",
            "--encoder-layers",
            "4",
            "--decoder-layers",
            "4",
        ],
    ),
}

ONNX_FAMILIES = [
    "transformer",
    "transformer_no_pos",
    "transformer_learned_pos",
    "lightformer",
    "hypoformer",
    "smartformer",
    "subformer",
    "subformer_wide",
    "composed",
]
# Subformer with a wider sandwich (d_s 48 > d 32): projections in and out of the middle
# layers and cross-attention through query projections at the encoder's width
FAMILIES_ONNX = dict(
    FAMILIES,
    transformer_no_pos=(
        # no positions: the decoder graph has no position input (the runtime once fed "pos" anyway)
        "transformer",
        FAMILIES["transformer"][1] + ["--no-token-positional-embeddings"],
    ),
    # one spec composing the kinds the export rewrites: tensor-train FFN maps (as matrix
    # products), CP self-attention maps (as low-rank maps, in the factors' space), a hybrid
    # TT query map of the cross-attention
    composed=(
        "lightformer_iwslt_de_en",
        T32
        + [
            "--encoder-layers",
            "2",
            "--decoder-layers",
            "2",
            "--lc-encoder-groups",
            "2",
            "--lc-decoder-groups",
            "2",
            "--encoder-normalize-before",
            "--decoder-normalize-before",
            "--lc-spec",
            (
                "encoder.layers.*.fc1, decoder.layers.*.fc1, decoder.layers.*.fc2 = tt(ranks=2);"
                "decoder.layers.*.self_attn.*_proj = cp(rank=4, heads=2);"
                "decoder.layers.*.encoder_attn.q_proj = htt(alpha=0.5, ranks=2)"
            ),
        ],
    ),
    transformer_learned_pos=(
        # learned positions: the decoder graph gathers the row itself (input "pos")
        "transformer",
        FAMILIES["transformer"][1] + ["--encoder-learned-pos", "--decoder-learned-pos"],
    ),
    subformer_wide=(
        "subformer",
        FAMILIES["subformer"][1]
        + [
            "--subformer-sandwich-dim",
            "48",
            "--subformer-sandwich-heads",
            "2",
            "--subformer-sandwich-ffn-dim",
            "96",
        ],
    ),
)


# a decoder the export refuses (cross self-attention): fairseq's own decoder under the search
FALLBACK_FAMILIES = {
    "cross_self_attention": ("transformer", FAMILIES["transformer"][1] + ["--cross-self-attention"])
}


def _batches(sentences, size, pad=1):
    from lightcompress.deploy.torch_translator import left_pad_batches

    return list(left_pad_batches(sentences, size, pad))


class _EosBias(torch.nn.Module):
    """An output projection plus a constant logit for EOS: random models then end hypotheses
    at different steps (finalization and batch shrinking get exercised). fairseq's decoder and
    the fast path both call the decoder's ``output_projection``."""

    def __init__(self, projection, eos: int, value: float):
        super().__init__()
        self.projection = projection
        self.eos, self.value = eos, value

    def forward(self, x):
        out = self.projection(x).clone()
        out[..., self.eos] += self.value
        return out


EOS_BIAS = 2.0  # logit spreads: every family then ends hypotheses at several different steps


@pytest.mark.parametrize("family", ONNX_FAMILIES + list(FALLBACK_FAMILIES))
def test_fast_path_gives_fairseqs_hypotheses_and_scores_on_every_family(family):
    """The PyTorch backend of the one search (the ONNX export's: its test below) gives fairseq's
    hypotheses and scores on every family the export takes (the export's step, run eagerly),
    and on a decoder it refuses (fairseq's own decoder)."""
    from fairseq.sequence_generator import SequenceGenerator

    from lightcompress.build import dictionary_of_size
    from lightcompress.deploy.generator import FastGenerator
    from lightcompress.measure.specs import build_random_model

    arch, flags = {**FAMILIES_ONNX, **FALLBACK_FAMILIES}[family]
    torch.manual_seed(0)
    vocab = 40
    model = build_random_model(arch, vocab, flags, True).eval()
    d = dictionary_of_size(vocab)
    g = torch.Generator().manual_seed(1)
    src = torch.randint(4, vocab, (4, 6), generator=g)
    with torch.no_grad():  # EOS bias in units of the model's logit spread
        spread = float(model(src, torch.full((4,), 6), src)[0].std())
    bias = _EosBias(model.decoder.output_projection, d.eos(), EOS_BIAS * spread)
    model.decoder.output_projection = bias
    sentences = [
        torch.cat([torch.randint(4, vocab, (int(n),), generator=g), torch.tensor([d.eos()])])
        for n in torch.randint(2, 9, (6,), generator=g)
    ]
    lengths = set()
    for beam in (1, 5):
        settings = {"beam_size": beam, "max_len_a": 1.0, "max_len_b": 3}
        fast = FastGenerator(model, d, **settings)
        assert fast.lean == (family not in FALLBACK_FAMILIES), fast.why_not_lean
        fairseq = SequenceGenerator([model], d, **settings)
        for _idx, src, src_lengths in _batches(sentences, 3):  # padded batches that shrink
            with torch.inference_mode():
                ref = fairseq.generate(
                    [model], {"net_input": {"src_tokens": src, "src_lengths": src_lengths}}
                )
            out = fast.generate(src, src_lengths)
            for r, o in zip(ref, out):
                assert [h["tokens"].tolist() for h in o] == [h["tokens"].tolist() for h in r]
                assert [float(h["score"]) for h in o] == pytest.approx(
                    [float(h["score"]) for h in r], abs=1e-5
                )
                lengths |= {h["tokens"].numel() for h in o}
    assert len(lengths) > 2  # hypotheses finished at different steps (EOS before the limit)


@pytest.mark.parametrize("family", ["transformer", "subformer", "cross_self_attention"])
def test_fast_path_leaves_the_model_as_it_found_it(family):
    """fairseq's beamable attention, which the search turns on, is off again afterwards: a
    teacher-forced forward of a batch that divides by the beam (it once attended to every
    beam-th sentence's source) and fairseq's search at another beam size (a shape error) give
    what they gave before. The model with cross self-attention runs fairseq's own decoder in the
    search."""
    from fairseq.modules.multihead_attention import MultiheadAttention
    from fairseq.sequence_generator import SequenceGenerator

    from lightcompress.build import dictionary_of_size
    from lightcompress.deploy.generator import FastGenerator
    from lightcompress.measure.specs import build_random_model

    arch, flags = {**FAMILIES, **FALLBACK_FAMILIES}[family]
    torch.manual_seed(0)
    vocab = 40
    model = build_random_model(arch, vocab, flags, True).eval()
    d = dictionary_of_size(vocab)
    g = torch.Generator().manual_seed(1)
    src = torch.randint(4, vocab, (10, 6), generator=g)  # 10 sentences: 2 x beam 5
    lengths = torch.full((10,), 6)

    def forward_and_search():
        with torch.inference_mode():
            logits = model(src, lengths, src)[0]
            search = SequenceGenerator([model], d, beam_size=2, max_len_a=1.0, max_len_b=3)
            hyps = search.generate(
                [model], {"net_input": {"src_tokens": src[:3], "src_lengths": lengths[:3]}}
            )
        return logits, [[h["tokens"].tolist() for h in hs] for hs in hyps]

    def beam_sizes():
        return [m.beam_size for m in model.modules() if isinstance(m, MultiheadAttention)]

    before = forward_and_search()
    sizes = beam_sizes()
    assert sizes and set(sizes) == {1}
    fast = FastGenerator(model, d, beam_size=5, max_len_a=1.0, max_len_b=3)
    assert fast.lean == (family not in FALLBACK_FAMILIES)
    fast.generate(src[:4], lengths[:4])
    assert beam_sizes() == sizes
    after = forward_and_search()
    assert torch.equal(after[0], before[0])
    assert after[1] == before[1]


def test_fast_path_on_the_trained_teacher_equals_fairseq_generate_int8_too(toy):
    from fairseq.sequence_generator import SequenceGenerator

    from lightcompress.deploy.generator import FastGenerator
    from lightcompress.deploy.quantize import quantize_model_int8

    model, task = _load(toy["teacher"], toy["data"])
    sources = _test_sources(task)
    for m in (model, quantize_model_int8(model)):
        fast = FastGenerator(m, task.target_dictionary, beam_size=5, max_len_a=1.2, max_len_b=10)
        fairseq = SequenceGenerator(
            [m], task.target_dictionary, beam_size=5, max_len_a=1.2, max_len_b=10
        )
        for _idx, src, lengths in _batches(sources, 8):
            with torch.inference_mode():
                ref = fairseq.generate(
                    [m], {"net_input": {"src_tokens": src, "src_lengths": lengths}}
                )
            out = fast.generate(src, lengths)
            assert [h[0]["tokens"].tolist() for h in out] == [h[0]["tokens"].tolist() for h in ref]


# --------------------------------------------------------------------------------------------
# the API and lightcompress-translate
# --------------------------------------------------------------------------------------------


def test_translator_translates_raw_text_as_fairseqs_hub_interface(toy):
    from fairseq.models.transformer import TransformerModel

    import lightcompress
    from lightcompress.deploy import Translator

    with open(os.path.join(toy["raw"], "test.de")) as f:
        lines = [line.strip() for line in f][:12]
    lines[3] = ""  # an empty line: an empty translation
    lines[5] = "   "
    ours = Translator(
        toy["teacher"], toy["data"], spm=toy["spm"], beam=5, batch_size=4, threads=1
    ).translate(lines)
    hub = TransformerModel.from_pretrained(
        os.path.dirname(toy["teacher"]),
        checkpoint_file=os.path.basename(toy["teacher"]),
        data_name_or_path=toy["data"],
        user_dir=lightcompress.__path__[0],
        bpe="sentencepiece",
        sentencepiece_model=toy["spm"],
    )
    expected = [hub.translate(line, beam=5) if line.strip() else "" for line in lines]
    assert ours == expected
    assert ours[3] == ours[5] == ""
    assert all(t and "\u2581" not in t and t.split()[0].startswith("t") for t in ours if t)


def _translate_cli(*args, stdin=""):
    return harness.run(
        [
            sys.executable,
            "-c",
            "from lightcompress.deploy.torch_translator import cli_main; cli_main()",
            *args,
        ],
        input=stdin,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
        env=dict(os.environ, PYTHONPATH=SOURCES, PYTHONWARNINGS="ignore", OMP_NUM_THREADS="1"),
    )


def test_translate_command_reads_stdin_and_writes_the_output_file(toy, tmp_path):
    out = tmp_path / "out.en"
    proc = _translate_cli(
        "--path",
        toy["teacher"],
        "--data",
        toy["data"],
        "--spm",
        toy["spm"],
        "--batch-size",
        "2",
        "--threads",
        "2",
        "--int8",
        "-o",
        str(out),
        stdin="s1 s2 s3\n\ns4 s5\n",
    )
    assert proc.returncode == 0, proc.stderr
    lines = out.read_text().split("\n")
    assert len(lines) == 4 and lines[1] == "" and lines[3] == ""
    assert lines[0] and lines[2]


def test_translate_bad_input_is_one_line_and_writes_nothing(toy, tmp_path, capsys):
    from lightcompress.deploy.torch_translator import main

    notspm = tmp_path / "not.model"
    notspm.write_text("hello\n")
    small = tmp_path / "small"
    small.mkdir()
    for name in ("dict.de.txt", "dict.en.txt"):  # dictionaries of another size
        with open(os.path.join(toy["data"], name)) as f:
            (small / name).write_text("".join(f.readlines()[:10]))
    out = tmp_path / "out.txt"
    base = ["--path", toy["teacher"], "--data", toy["data"], "-o", str(out)]
    cases = [
        (["--path", str(tmp_path / "none.pt"), "--data", toy["data"]], "checkpoint not found"),
        (base + ["--spm", str(tmp_path / "none.model")], "sentencepiece model not found"),
        (base + ["--spm", str(notspm)], "cannot load the sentencepiece model"),
        (["--path", toy["teacher"], "--data", str(small), "-o", str(out)], "do not fit"),
        (base + ["--beam", "0"], "beam must be >= 1"),
        (base + ["--max-len-b", "0"], "max_len_b >= 1"),
        (
            ["--path", toy["teacher"], "--data", toy["data"], "-o", str(tmp_path / "no" / "o")],
            "does not exist",
        ),
        (base + ["-i", str(tmp_path / "none.txt")], "input file not found"),
    ]
    for args, message in cases:
        assert main(args) == 2, args
        lines = capsys.readouterr().err.strip().splitlines()
        assert len(lines) == 1 and message in lines[0], (args, lines)
        assert lines[0].startswith("lightcompress-translate: error: ")
    assert sorted(os.listdir(tmp_path)) == ["not.model", "small"]


# --------------------------------------------------------------------------------------------
# int8 of the large maps only
# --------------------------------------------------------------------------------------------


def test_int8_large_quantizes_only_the_maps_with_enough_weights():
    from torch import nn
    from torch.ao.nn.quantized import dynamic as nnqd

    from lightcompress.deploy.generator import FastGenerator
    from lightcompress.deploy.quantize import quantize_model_int8
    from lightcompress.measure.specs import build_random_model

    arch, flags = FAMILIES["lightformer"]
    torch.manual_seed(0)
    model = build_random_model(arch, 300, flags, True).eval()
    q = quantize_model_int8(model, min_weight_elements=300 * 8)  # the 300 x 8 output factor
    kinds = {name: type(m) for name, m in q.named_modules() if type(m) in (nn.Linear, nnqd.Linear)}
    int8 = {name for name, k in kinds.items() if k is nnqd.Linear}
    assert int8 == {"decoder.output_projection.second"}  # logits = (x V^T) U^T: U is 300 x 8
    assert all(k is nn.Linear for name, k in kinds.items() if name not in int8)
    everything = quantize_model_int8(model)
    assert not any(type(m) is nn.Linear for m in everything.modules())
    # the selective model translates as the float one does, on the fast path and in fairseq
    from fairseq.sequence_generator import SequenceGenerator

    from lightcompress.build import dictionary_of_size

    d = dictionary_of_size(300)
    src = torch.cat([torch.randint(4, 300, (7,)), torch.tensor([d.eos()])])[None]
    lengths = torch.tensor([8])
    with torch.inference_mode():
        ref = SequenceGenerator([q], d, beam_size=5).generate(
            [q], {"net_input": {"src_tokens": src, "src_lengths": lengths}}
        )
    out = FastGenerator(q, d, beam_size=5).generate(src, lengths)
    assert out[0][0]["tokens"].tolist() == ref[0][0]["tokens"].tolist()


def test_int8_keeps_layer_sharing_one_packed_map_per_shared_map():
    from lightcompress.deploy.quantize import quantize_model_int8
    from lightcompress.measure.candidates import state_dict_bytes
    from lightcompress.measure.specs import build_random_model

    arch, flags = FAMILIES["lightformer"]  # 4 encoder layers in 2 groups, 2 decoder layers in 1
    torch.manual_seed(0)
    model = build_random_model(arch, 300, flags, True).eval()
    q = quantize_model_int8(model)
    enc, dec = q.encoder.layers, q.decoder.layers
    assert enc[0].fc1.first is enc[1].fc1.first and enc[2].fc1.first is enc[3].fc1.first
    assert enc[0].fc1.first is not enc[2].fc1.first
    assert dec[0].self_attn.q_proj.second is dec[1].self_attn.q_proj.second
    no_groups = [
        "0" if before in ("--lc-encoder-groups", "--lc-decoder-groups") else flag
        for before, flag in zip(["", *flags], flags)
    ]
    unshared = build_random_model(arch, 300, no_groups, True).eval()
    # the shared model stores about half the encoder and decoder maps of the unshared one
    assert state_dict_bytes(q) < 0.75 * state_dict_bytes(quantize_model_int8(unshared))


# --------------------------------------------------------------------------------------------
# ONNX Runtime: lightcompress-export-onnx and its torch-free runtime
# --------------------------------------------------------------------------------------------


@pytest.mark.parametrize("family", ONNX_FAMILIES)
def test_onnx_export_gives_fairseqs_hypotheses_and_scores_on_every_lean_family(family, tmp_path):
    from fairseq.sequence_generator import SequenceGenerator

    from lightcompress.deploy.onnx_export import export_onnx
    from lightcompress.measure.specs import build_random_model
    from lightcompress_runtime import OnnxGenerator

    arch, flags = FAMILIES_ONNX[family]
    torch.manual_seed(0)
    vocab = 40
    model, task, _ = build_random_model(
        arch, vocab, flags + ["--dropout", "0.3"], True, return_task=True
    )
    model.eval()  # (dropout must stay off in the graphs: the exporter once switched it on)
    d = task.target_dictionary
    g = torch.Generator().manual_seed(1)
    src = torch.randint(4, vocab, (4, 6), generator=g)
    with torch.no_grad():
        spread = float(model(src, torch.full((4,), 6), src)[0].std())
    model.decoder.output_projection = _EosBias(
        model.decoder.output_projection, d.eos(), EOS_BIAS * spread
    )
    export_onnx(model, task, str(tmp_path / "onnx"))
    assert not model.training
    # LightFormer's attentions (rank 8 under the head width 16) run in their factors' space:
    # caches of [1 x 8] per hypothesis, the encoder's cross-attention outputs ck, cv, cross_b
    with open(tmp_path / "onnx" / "config.json") as f:
        layers = json.load(f)["layers"]
    # and so do the Smartformer's self-attentions: a CP map is a low-rank map (rank 4 here;
    # factor_attention.cp_first), its cross-attention's output map is dense
    factor_space = {
        "lightformer": [{"k_cache": [1, 8], "v_cache": [1, 8], "cross_factors": True}] * 2,
        "smartformer": [{"k_cache": [1, 4], "v_cache": [1, 4]}] * 2,
        "composed": [{"k_cache": [1, 4], "v_cache": [1, 4]}] * 2,
    }
    assert [{k: s[k] for k in s if k not in ("heads", "head_dim", "cross")} for s in layers] == (
        factor_space.get(family, [{}] * len(layers))
    )
    # fairseq's encoder layers (every family but Subformer's) are exported lean: the heads'
    # shapes are computed once, not per reshape as fairseq's traced attention computes them
    import onnx

    from lightcompress.deploy.onnx_encoder import lean_encoder_error

    why = lean_encoder_error(model)
    assert (why is None) == (arch != "subformer"), why
    nodes = onnx.load(str(tmp_path / "onnx" / "encoder.onnx"), load_external_data=False).graph.node
    attention_shapes = sum(n.op_type == "Shape" and "self_attn" in n.name for n in nodes)
    assert attention_shapes == 0 if why is None else attention_shapes > 0
    # LightFormer's low-rank input table: the step looks up u and takes one product with the
    # scaled v, without fairseq's padding mask (Equal, Unsqueeze, Where) and scale (Mul)
    if family == "lightformer":
        nodes = onnx.load(str(tmp_path / "onnx" / "decoder.onnx"), load_external_data=False)
        nodes = nodes.graph.node
        assert not [n for n in nodes if n.name.startswith("/embed_tokens/")]
        (lookup,) = [
            n
            for n in nodes
            if n.op_type == "Gather" and n.input[0].endswith(".u") and "embed_tokens" in n.input[0]
        ]
        assert [n.op_type for n in nodes if lookup.output[0] in n.input] == ["MatMul"]
    if family == "composed":  # every TT map of the step: one float product per core
        from lightcompress.deploy.tt_graph import TT_MATRIX
        from lightcompress.modules.tensor_train import TTLinear

        nodes = onnx.load(str(tmp_path / "onnx" / "decoder.onnx"), load_external_data=False)
        cores = [m for m in model.decoder.layers.modules() if isinstance(m, TTLinear)]
        assert len(cores) == 6  # fc1, fc2 and the query's TT part, in each layer
        assert sum(TT_MATRIX in n.input[-1] for n in nodes.graph.node if n.op_type == "MatMul") == (
            sum(len(m.cores) for m in cores)
        )
    if family == "subformer_wide":  # the sandwich and query-projected attention are exercised
        from lightcompress.modules.safe import QueryProjectedAttention

        assert any(
            isinstance(layer.encoder_attn, QueryProjectedAttention)
            for layer in model.decoder.layers
        )
    sentences = [
        torch.cat([torch.randint(4, vocab, (int(n),), generator=g), torch.tensor([d.eos()])])
        for n in torch.randint(2, 9, (6,), generator=g)
    ]
    lengths = set()
    for beam in (1, 5):
        settings = {"beam_size": beam, "max_len_a": 1.0, "max_len_b": 3}
        ours = OnnxGenerator(str(tmp_path / "onnx"), **settings)
        fairseq = SequenceGenerator([model], d, **settings)
        for _idx, src, src_lengths in _batches(sentences, 3):  # padded batches that shrink
            with torch.inference_mode():
                ref = fairseq.generate(
                    [model], {"net_input": {"src_tokens": src, "src_lengths": src_lengths}}
                )
            out = ours.generate(src.numpy(), src_lengths.numpy())
            for r, o in zip(ref, out):
                assert [h["tokens"].tolist() for h in o] == [h["tokens"].tolist() for h in r]
                assert [h["score"] for h in o] == pytest.approx(
                    [float(h["score"]) for h in r], abs=1e-4
                )
                lengths |= {len(h["tokens"]) for h in o}
    assert len(lengths) > 2  # hypotheses finished at different steps


def test_onnx_runtime_sinusoid_rows_are_fairseqs_table_to_rounding():
    """The runtime computes the sinusoidal rows it feeds the decoder graph (``pos_emb``) from
    the frequencies the export wrote: fairseq's table to one float32 rounding."""
    from fairseq.modules import SinusoidalPositionalEmbedding

    from lightcompress.deploy.onnx_graphs import sinusoid_frequencies
    from lightcompress_runtime import sinusoid

    positions = np.arange(2, 1026)
    for dim in (8, 9, 256, 512):
        table = SinusoidalPositionalEmbedding.get_embedding(1026, dim, 1)[positions].numpy()
        rows = sinusoid(positions, dim, sinusoid_frequencies(dim).tolist())
        assert rows.dtype == np.float32 and rows.shape == table.shape
        assert np.abs(rows - table).max() <= 1.2e-7
        assert np.abs(sinusoid(positions, dim) - table).max() < 2e-4  # (numpy's own exp)


def test_onnx_regrouped_maps_give_the_modules_outputs_and_keep_shared_weights_once():
    """The exporter's regrouping (Q/K/V first factors or dense weights stacked into one
    product, the query scaling folded into the last weight) computes what the modules do;
    maps of layers that share their weights get one regrouped weight; other kinds of maps
    are applied as they are."""
    from lightcompress.deploy.onnx_graphs import Regrouped
    from lightcompress.modules.lowrank import LowRankLinear

    torch.manual_seed(0)
    x = torch.randn(5, 16)
    lowrank = [LowRankLinear(16, 16, 4), LowRankLinear(16, 16, 4), LowRankLinear(16, 12, 3)]
    dense = [torch.nn.Linear(16, 16), torch.nn.Linear(16, 8)]
    mixed = [LowRankLinear(16, 16, 4), torch.nn.Linear(16, 16)]
    for maps in (lowrank, dense, mixed):
        scales = [0.25] + [1.0] * (len(maps) - 1)
        regrouped = Regrouped()
        regrouped.prepare(maps, scales)
        with torch.no_grad():
            got = regrouped.apply(x, maps, scales)
            want = [m(x) * sc for m, sc in zip(maps, scales)]
        assert [g.shape for g in got] == [w.shape for w in want]
        for g, w in zip(got, want):
            assert torch.allclose(g, w, atol=1e-6)
        assert (len(list(regrouped.parameters())) == 0) == (maps is mixed)
    # a second layer sharing the first one's parameters (layer sharing ties the tensors)
    regrouped = Regrouped()
    regrouped.prepare(lowrank, [0.25, 1.0, 1.0])
    twins = [LowRankLinear(16, 16, 4), LowRankLinear(16, 16, 4), LowRankLinear(16, 12, 3)]
    for twin, m in zip(twins, lowrank):
        twin.u, twin.v, twin.bias = m.u, m.v, m.bias
    before = len(list(regrouped.parameters()))
    regrouped.prepare(twins, [0.25, 1.0, 1.0])
    assert len(list(regrouped.parameters())) == before == 3  # stacked first factors, q: u, b


@pytest.mark.parametrize("case", ["low-rank out", "dense out, no biases", "ranks over d"])
def test_attention_in_the_factors_space_is_fairseqs_attention(case):
    """Self-attention (three incremental steps, reordered caches) and cross-attention
    (padded sentences, two hypotheses each) of low-rank maps computed in their factors' space
    (:mod:`lightcompress.deploy.factor_attention`) give fairseq's outputs; ranks over the head
    width are not regrouped."""
    from fairseq.modules import MultiheadAttention

    from lightcompress.deploy.factor_attention import cross_plan, layout, self_plan
    from lightcompress.deploy.onnx_graphs import Regrouped
    from lightcompress.modules.lowrank import LowRankLinear

    torch.manual_seed(0)
    c, h, rank = 32, 4, 12 if case == "ranks over d" else 6  # (head width 8)
    bias = case != "dense out, no biases"

    def low_rank(m):
        new = LowRankLinear(c, c, rank, bias=bias)
        if bias:  # (non-zero biases: their terms must be kept or cancel exactly)
            torch.nn.init.normal_(new.bias)
        return new

    def attention(**kw):
        a = MultiheadAttention(c, h, **kw).eval()
        a.q_proj, a.k_proj, a.v_proj = low_rank(a.q_proj), low_rank(a.k_proj), low_rank(a.v_proj)
        if case != "dense out, no biases":
            a.out_proj = low_rank(a.out_proj)
        return a

    class Layer(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.self_attn = attention(self_attention=True)
            self.encoder_attn = attention(encoder_decoder_attention=True)

    layer, owner = Layer(), Regrouped()
    sp, cp = self_plan(owner, layer.self_attn), cross_plan(owner, layer)
    if case == "ranks over d":
        assert sp is None and cp is None and layout(layer) == {}
        return
    caches = {"k_cache": [1, rank], "v_cache": [1, rank]}
    if case == "low-rank out":
        assert cp is not None and layout(layer) == {**caches, "cross_factors": True}
    else:  # (the cross plan needs a low-rank output map)
        assert cp is None and layout(layer) == caches
    n = 4
    state: dict = {}
    past_k, past_v = torch.zeros(n, 1, 0, rank), torch.zeros(n, 1, 0, rank)
    order = torch.arange(n)
    with torch.no_grad():
        for step in range(3):
            x = torch.randn(n, c)
            if step:  # reorder the hypotheses, as the beam search does
                order = torch.tensor([1, 0, 3, 3])
                layer.self_attn.reorder_incremental_state(state, order)
            want, _ = layer.self_attn(x[None], x[None], x[None], incremental_state=state)
            got, past_k, past_v = sp.step(x, past_k, past_v, order)
            assert past_k.shape == (n, 1, step + 1, rank)
            assert torch.allclose(got, want[0], atol=1e-5), (got - want[0]).abs().max()
        if cp is None:
            return
        bsz, beam, src_len = 2, 2, 5
        enc = torch.randn(src_len, bsz, c)
        pad = torch.zeros(bsz, src_len, dtype=torch.bool)
        pad[1, :2] = True
        a = layer.encoder_attn
        k = a.k_proj(enc).reshape(src_len, bsz, h, -1).permute(1, 2, 0, 3)  # [B x H x S x d]
        v = a.v_proj(enc).reshape(src_len, bsz, h, -1).permute(1, 2, 0, 3)
        enc_bias = torch.where(pad, float("-inf"), 0.0)[:, None, None, :]
        ck, cv, cb = cp.keys_values(k, v, enc_bias)
        assert ck.shape == cv.shape == (bsz, h, src_len, rank) and cb.shape == (bsz, h, 1, src_len)
        x = torch.randn(bsz * beam, c)
        rows = lambda y, heads, d: y.reshape(bsz, -1, heads, d)
        got = cp.step(x, ck, cv, cb, rows)
        enc_rep = enc.repeat_interleave(beam, dim=1)
        want, _ = a(
            x[None],
            enc_rep,
            enc_rep,
            key_padding_mask=pad.repeat_interleave(beam, 0),
            static_kv=True,
        )
        assert torch.allclose(got, want[0], atol=1e-5), (got - want[0]).abs().max()


def test_onnx_factor_space_export_without_query_biases_gives_fairseqs_hypotheses(tmp_path):
    """A LightFormer whose query maps have no bias (the encoder graph's ``cross_b`` is then the
    padding mask per head, and the self-attention's ``q'`` has no bias term) exports in the
    factors' space and translates as fairseq does."""
    from fairseq.sequence_generator import SequenceGenerator

    from lightcompress.deploy.onnx_export import export_onnx
    from lightcompress.measure.specs import build_random_model
    from lightcompress_runtime import OnnxGenerator

    arch, flags = FAMILIES["lightformer"]
    torch.manual_seed(0)
    model, task, _ = build_random_model(arch, 40, flags, True, return_task=True)
    for layer in model.decoder.layers:
        layer.self_attn.q_proj.bias = None
        layer.encoder_attn.q_proj.bias = None
    model.eval()
    export_onnx(model, task, str(tmp_path / "onnx"))
    with open(tmp_path / "onnx" / "config.json") as f:
        assert all(s.get("cross_factors") and s.get("k_cache") for s in json.load(f)["layers"])
    d = task.target_dictionary
    g = torch.Generator().manual_seed(1)
    sentences = [
        torch.cat([torch.randint(4, 40, (int(n),), generator=g), torch.tensor([d.eos()])])
        for n in torch.randint(2, 9, (6,), generator=g)
    ]
    settings = {"beam_size": 3, "max_len_a": 1.0, "max_len_b": 3}
    ours = OnnxGenerator(str(tmp_path / "onnx"), **settings)
    fairseq = SequenceGenerator([model], d, **settings)
    for _idx, src, src_lengths in _batches(sentences, 3):
        with torch.inference_mode():
            ref = fairseq.generate(
                [model], {"net_input": {"src_tokens": src, "src_lengths": src_lengths}}
            )
        for r, o in zip(ref, ours.generate(src.numpy(), src_lengths.numpy())):
            assert [h["tokens"].tolist() for h in o] == [h["tokens"].tolist() for h in r]
            assert [h["score"] for h in o] == pytest.approx(
                [float(h["score"]) for h in r], abs=1e-4
            )


def _unique_parameter_bytes(model) -> int:
    seen, total = set(), 0
    for p in model.parameters():  # a shared parameter once
        if id(p) not in seen:
            seen.add(id(p))
            total += p.numel() * p.element_size()
    return total


def test_onnx_export_keeps_the_compressed_size_shared_layers_and_tables_once(tmp_path):
    import onnx
    from onnx import numpy_helper

    from lightcompress.deploy.onnx_export import export_onnx
    from lightcompress.measure.specs import build_random_model

    flags = [
        "--encoder-embed-dim",
        "64",
        "--decoder-embed-dim",
        "64",
        "--encoder-ffn-embed-dim",
        "128",
        "--decoder-ffn-embed-dim",
        "128",
        "--encoder-attention-heads",
        "2",
        "--decoder-attention-heads",
        "2",
        "--encoder-layers",
        "6",
        "--decoder-layers",
        "2",
        "--lc-rank",
        "16",
        "--lc-embed-rank",
        "16",
        "--lc-encoder-groups",
        "2",
    ]
    model, task, _ = build_random_model(
        "lightformer_iwslt_de_en", 500, flags, True, return_task=True
    )
    out = tmp_path / "onnx"
    export_onnx(model.eval(), task, str(out))
    unique = _unique_parameter_bytes(model)
    every = sum(p.numel() * 4 for _n, p in model.named_parameters(remove_duplicate=False))
    assert every > 1.5 * unique  # the encoder shares layers and the table is tied
    stored = os.path.getsize(out / "weights.bin")
    for name in ("encoder.onnx", "decoder.onnx"):  # constants under 4 KiB stay in the graphs
        graph = onnx.load(str(out / name), load_external_data=False).graph
        stored += sum(
            numpy_helper.to_array(i).nbytes for i in graph.initializer if i.data_location != 1
        )
    # (below: torch's exporter stores equal initializers once, e.g. layer norms at their
    # initial values; the decoder's attentions in their factors' space store the folded
    # products, W_q and Z, instead of four second factors and the output's first: 9 % fewer
    # bytes for this model)
    assert 0.85 * unique <= stored <= unique * 1.02 + 64 * 1024, (unique, stored)


def test_onnx_int8_export_translates_the_trained_teacher_like_float32(toy, tmp_path):
    from lightcompress.deploy.onnx_export import export_onnx
    from lightcompress_runtime import OnnxTranslator

    model, task = _load(toy["teacher"], toy["data"])
    export_onnx(model, task, str(tmp_path / "f32"), spm=toy["spm"])
    config = export_onnx(model, task, str(tmp_path / "int8"), int8="all", spm=toy["spm"])
    assert set(config["int8_error"]) == {"encoder", "decoder"}  # recorded, as a relative error
    assert all(0 < e < 0.5 for e in config["int8_error"].values()), config["int8_error"]
    with open(os.path.join(toy["raw"], "test.de")) as f:
        lines = [line.strip() for line in f]
    f32 = OnnxTranslator(str(tmp_path / "f32"), beam=5).translate(lines)
    int8 = OnnxTranslator(str(tmp_path / "int8"), beam=5).translate(lines)
    # int8 weights and activations move some near-ties on this barely trained toy model (30
    # updates): most translations stay the same, the rest stay close
    import sacrebleu

    same = sum(a == b for a, b in zip(f32, int8))
    bleu = sacrebleu.corpus_bleu(int8, [f32]).score
    assert same >= 0.5 * len(lines) and bleu >= 60, (same, bleu)
    print("int8 vs float32:", same, "of", len(lines), "identical, BLEU", bleu)
    assert os.path.getsize(tmp_path / "int8" / "weights.bin") < os.path.getsize(
        tmp_path / "f32" / "weights.bin"
    )


@pytest.mark.parametrize("case", ["tied", "untied", "tied-shortlist"])
def test_int8_export_stores_the_embedding_tables_once_in_int8(tmp_path, case, monkeypatch):
    """ONNX Runtime's quantizer gives the output projection an int8 copy of a tied table and
    leaves the lookups on the float32 one: the export stores the table once, in int8, and the
    lookups dequantize its rows. Tables that are only looked up (an untied model's; with the
    shortlist, the tied table whose candidates' rows rows.onnx gathers) are stored in int8 too."""
    import onnx
    import onnxruntime as ort
    from onnx import TensorProto, numpy_helper

    from lightcompress.deploy import onnx_tools
    from lightcompress.deploy.onnx_export import export_onnx
    from lightcompress.measure.specs import build_random_model

    tied, shortlist = case != "untied", case == "tied-shortlist"
    flags = [
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
        "1",
        "--decoder-layers",
        "1",
    ]
    torch.manual_seed(0)
    model, task, _ = build_random_model("transformer", 4100, flags, tied, return_task=True)
    extra = {}
    if shortlist:  # 3 candidates per source symbol
        rng = np.random.default_rng(0)
        src, tgt = task.source_dictionary.symbols, task.target_dictionary.symbols
        lines = ["\t" + " ".join(tgt[i] for i in (6, 7))] + [
            src[s] + "\t" + " ".join(tgt[t] for t in rng.choice(range(4, len(tgt)), 3))
            for s in range(4, len(src))
        ]
        from lightcompress_runtime import shortlist_text

        (tmp_path / "sl.txt").write_text(shortlist_text(lines, "test"), encoding="utf-8")
        extra = {"shortlist": str(tmp_path / "sl.txt")}
    export_onnx(model.eval(), task, str(tmp_path / "f32"), **extra)
    config = export_onnx(model, task, str(tmp_path / "int8"), int8="large", **extra)
    # 4100 x 32 tables: the large maps (the FFN and attention maps are small)
    tables = [model.encoder.embed_tokens.weight.detach().numpy()]
    if not tied:
        tables.append(model.decoder.embed_tokens.weight.detach().numpy())
    names = ["encoder", "decoder"] + (["rows"] if shortlist else [])
    graphs = {n: onnx.load(str(tmp_path / "int8" / f"{n}.onnx")) for n in names}
    floats = [
        i.name
        for g in graphs.values()
        for i in g.graph.initializer
        if i.data_type == TensorProto.FLOAT and list(i.dims[-2:]) in ([4100, 32], [32, 4100])
    ]
    assert floats == []  # no float32 copy of any table
    dequantized = {
        n: sum(x.op_type == "DequantizeLinear" for x in g.graph.node) for n, g in graphs.items()
    }
    assert dequantized == {"encoder": 1, "decoder": 1, **({"rows": 1} if shortlist else {})}
    # every table stored once, in int8 (a quarter of its float32 bytes)
    f32_size = os.path.getsize(tmp_path / "f32" / "weights.bin")
    int8_size = os.path.getsize(tmp_path / "int8" / "weights.bin")
    assert int8_size <= f32_size - 0.7 * sum(t.nbytes for t in tables), (int8_size, f32_size)
    # the lookups see the int8 table's rows: within half a quantization step of the table
    weights = {
        i.name: numpy_helper.to_array(i) for g in graphs.values() for i in g.graph.initializer
    }
    for table in tables:
        scale = np.abs(table).max() / 127
        rows = [
            w.astype(np.float32) * scale
            for w in weights.values()
            if w.dtype == np.int8 and w.size == table.size
        ]
        rows = [r if r.shape == table.shape else r.T for r in rows]
        assert any(np.abs(r - table).max() <= 0.51 * scale for r in rows)
    assert 0 < config["int8_error"]["encoder"] < 0.05  # (float32 lookups: 0)
    if case != "tied":
        return
    lookups = [n.op_type for n in graphs["encoder"].graph.node if "/int8/" in n.name]
    assert lookups == ["Gather", "DequantizeLinear", "Transpose"]
    # where shape inference cannot tell the ids' rank, the general form gives the same
    monkeypatch.setattr(onnx_tools, "_ranks", lambda proto: {})
    export_onnx(model, task, str(tmp_path / "general"), int8="large")
    src = np.array([[5, 6, 7, 2], [9, 4100 - 1, 3, 2]], dtype=np.int64)
    outs = []
    for name in ("int8", "general"):
        graph = onnx.load(str(tmp_path / name / "encoder.onnx")).graph
        ops = [n.op_type for n in graph.node if "/int8/" in n.name]
        assert len(ops) == (3 if name == "int8" else 7), ops
        sess = ort.InferenceSession(str(tmp_path / name / "encoder.onnx"))
        outs.append(sess.run(None, {"src_tokens": src}))
    assert all(np.array_equal(a, b) for a, b in zip(*outs))


def _no_torch_env(tmp_path) -> dict:
    """An environment where ``import torch`` (and fairseq, lightcompress) fails."""
    block = tmp_path / "block"
    for name in ("torch", "fairseq", "lightcompress"):
        (block / name).mkdir(parents=True)
        (block / name / "__init__.py").write_text(f"raise ImportError('{name} is blocked')\n")
    return dict(os.environ, PYTHONPATH=str(block), PYTHONWARNINGS="ignore", OMP_NUM_THREADS="1")


def test_onnx_export_command_and_its_torch_free_translate_py_give_the_fast_paths_text(
    toy, tmp_path
):
    from lightcompress.deploy import Translator

    out = tmp_path / "onnx"
    proc = harness.run(
        [
            sys.executable,
            "-c",
            "from lightcompress.deploy.onnx_export import cli_main; cli_main()",
            "--path",
            toy["teacher"],
            "--data",
            toy["data"],
            "--spm",
            toy["spm"],
            "-o",
            str(out),
        ],
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
        env=dict(os.environ, PYTHONPATH=SOURCES, PYTHONWARNINGS="ignore"),
    )
    assert proc.returncode == 0, proc.stderr
    assert sorted(os.listdir(out)) == [
        "MANIFEST.sha256",
        "config.json",
        "decoder.onnx",
        "dict.src.txt",
        "dict.tgt.txt",
        "encoder.onnx",
        "runtime",
        "spm.model",
        "translate.py",
        "weights.bin",
    ]
    # the runtime package, file for file (no module renamed), and the script that runs it
    package = os.path.join(REPO_ROOT, "runtime", "lightcompress_runtime")
    shipped = sorted(os.listdir(out / "runtime"))
    assert shipped == sorted(n for n in os.listdir(package) if n.endswith(".py")), shipped
    for name in shipped:
        with open(os.path.join(package, name), "rb") as f:
            assert (out / "runtime" / name).read_bytes() == f.read(), name
    with open(os.path.join(toy["raw"], "test.de")) as f:
        lines = [line.strip() for line in f][:12]
    lines[4] = ""
    expected = Translator(toy["teacher"], toy["data"], spm=toy["spm"], beam=5).translate(lines)
    proc = subprocess.run(
        [sys.executable, str(out / "translate.py"), str(out), "--beam", "5", "--batch-size", "3"],
        input="\n".join(lines) + "\n",
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
        env=_no_torch_env(tmp_path),
        cwd=str(tmp_path),
    )
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.split("\n")[:-1] == expected
    assert expected[4] == "" and all(expected[i] for i in range(12) if i != 4)


def test_onnx_bad_input_is_one_line_and_writes_nothing(toy, tmp_path, capsys):
    from lightcompress.deploy.onnx_export import main
    from lightcompress_runtime import main as translate_main

    # a decoder with cross self-attention (keys and values from the source and the prefix),
    # which the decoder step does not compute
    crossself = make_checkpoint(
        toy["data"],
        str(tmp_path / "crossself.pt"),
        "transformer",
        T32
        + [
            "--encoder-layers",
            "1",
            "--decoder-layers",
            "1",
            "--share-all-embeddings",
            "--cross-self-attention",
        ],
    )
    notspm = tmp_path / "not.model"
    notspm.write_text("hello\n")
    full = tmp_path / "full"
    full.mkdir()
    (full / "x").write_text("x")
    out = str(tmp_path / "out")
    small = tmp_path / "small"
    small.mkdir()
    for name in ("dict.de.txt", "dict.en.txt"):  # dictionaries of another size
        with open(os.path.join(toy["data"], name)) as f:
            (small / name).write_text("".join(f.readlines()[:10]))
    base = ["--path", toy["teacher"], "--data", toy["data"]]
    cases = [
        (
            ["--path", str(tmp_path / "none.pt"), "--data", toy["data"], "-o", out],
            "checkpoint not found",
        ),
        (["--path", toy["teacher"], "--data", str(small), "-o", out], "do not fit"),
        (base + ["-o", str(full)], "give a new or empty directory"),
        (
            base + ["-o", out, "--spm", str(tmp_path / "none.model")],
            "sentencepiece model not found",
        ),
        (base + ["-o", out, "--spm", str(notspm)], "cannot load the sentencepiece model"),
        (
            ["--path", crossself, "--data", toy["data"], "-o", out],
            "cannot be exported to ONNX: decoder.layers.0: cross self-attention",
        ),
    ]
    for args, message in cases:
        assert main(args) == 2, args
        lines = capsys.readouterr().err.strip().splitlines()
        assert len(lines) == 1 and message in lines[0], (args, lines)
        assert lines[0].startswith("lightcompress-export-onnx: error: ")
    assert sorted(os.listdir(tmp_path)) == ["crossself.pt", "full", "not.model", "small"]
    assert os.listdir(full) == ["x"]
    # the runtime: a directory that is not an export, a missing input, bad settings
    cases = [
        ([str(full)], "is not an ONNX export (no config.json)"),
        ([str(tmp_path / "none")], "model directory not found"),
        ([str(full), "-o", str(tmp_path / "no" / "out.txt")], "is not a writable directory"),
        ([str(full), "-i", str(tmp_path / "none.txt")], "input file not found"),
    ]
    for args, message in cases:
        assert translate_main(args) == 2, args
        lines = capsys.readouterr().err.strip().splitlines()
        assert len(lines) == 1 and message in lines[0], (args, lines)


def test_measure_speed_times_onnx_exports_with_fairseqs_bleu_and_size(toy, tmp_path):
    out = tmp_path / "speed.json"
    crossself = make_checkpoint(  # (--cross-self-attention: no ONNX export)
        toy["data"],
        str(tmp_path / "crossself.pt"),
        "transformer",
        T32
        + [
            "--encoder-layers",
            "1",
            "--decoder-layers",
            "1",
            "--share-all-embeddings",
            "--cross-self-attention",
        ],
    )
    proc = _measure(
        "--data",
        toy["data"],
        "--path",
        f"teacher={toy['teacher']},crossself={crossself}",
        "--onnx",
        "--bleu",
        "--runs",
        "1",
        "--warmup",
        "0",
        "--num-sentences",
        "4",
        "--src-len",
        "6",
        "--quiet",
        "--json",
        str(out),
    )
    assert proc.returncode == 0, proc.stderr
    result = json.loads(out.read_text())
    rows = {(r["label"], r["engine"], r["precision"]): r for r in result["models"]}
    assert ("teacher", "onnxruntime", "float32") in rows
    assert not any(k[0] == "crossself" and k[1] == "onnxruntime" for k in rows)
    assert "crossself: no ONNX export" in proc.stdout
    onnx, ref = rows["teacher", "onnxruntime", "float32"], rows["teacher", "fairseq", "float32"]
    assert onnx["bleu"] == pytest.approx(ref["bleu"], abs=0.1)  # fairseq's translations
    assert onnx["tokens_per_s"] > 0 and onnx["size_bytes"] > 0
