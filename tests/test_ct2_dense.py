"""``lightcompress-export-ct2`` on compressed students: the dense Transformer their factors
multiply out to (:mod:`lightcompress.deploy.densify`), on CTranslate2.

Students converted in this process (``lightcompress-convert``) from a 2-2 Transformer trained
for 30 updates on the toy corpus: LightFormer (low-rank maps and table, tied output from the
factors, one shared encoder layer), Smartformer (CP attention maps) and Hypoformer without Admin
(HTT table, fused HTT Q/K/V map, no attention output maps, low-rank FFN). Their exports must
translate as the factorized students do (float32: equal or a near tie; int8: within int8's
tolerance), what cannot be multiplied out is one line and writes nothing. No test asserts a
timing.
"""

import io
import json
import os
from argparse import Namespace
from pathlib import Path

import pytest
import torch
from harness import make_parallel_corpus
from test_deploy import TINY, _binarize, _fairseq_nbest, _load, make_checkpoint

STUDENTS = {
    "lightformer": [
        "-a",
        "lightformer_iwslt_de_en",
        "--lc-rank",
        "8",
        "--lc-embed-rank",
        "8",
        "--lc-encoder-groups",
        "1",
    ],
    "smartformer": ["-a", "smartformer_iwslt_de_en", "--sm-rank", "4"],
    "hypoformer": [
        "-a",
        "hypoformer_iwslt_de_en",
        "--admin-init",
        "none",
        "--hypo-embed-rank",
        "4",
        "--hypo-ffn-rank",
        "16",
        "--hypo-drop-out-proj",
    ],
}
# what each family's export multiplies out
KINDS = {
    "lightformer": {"LowRankEmbedding", "LowRankLinear", "TiedOutputProjection"},
    "smartformer": {"CPLinear"},
    "hypoformer": {"HTTEmbedding", "FusedQKV", "Identity", "LowRankLinear", "TiedOutputProjection"},
}


@pytest.fixture(scope="module")
def toy(tmp_path_factory):
    """The toy corpus, a 2-2 Transformer trained on it for 30 updates, and its three students
    (``toy[family]``: checkpoint path)."""
    from lightcompress.convert.cli import convert_checkpoint

    root = tmp_path_factory.mktemp("ct2_dense")
    raw = make_parallel_corpus(str(root / "raw"), n_train=400, n_valid=10, n_test=30)
    data = _binarize(raw, str(root / "bin"))
    teacher = make_checkpoint(data, str(root / "teacher.pt"), "transformer", TINY, updates=30)
    out = {"data": data, "raw": raw, "teacher": teacher, "root": root}
    for name, flags in STUDENTS.items():
        out[name] = str(root / f"{name}.pt")
        convert_checkpoint(
            ["-i", teacher, "-o", out[name], *TINY, *flags, "--quiet"], out=io.StringIO()
        )
    return out


@pytest.fixture(scope="module")
def exports(toy):
    """``{family: CTranslate2 directory}``: each student exported in float32."""
    from lightcompress.deploy.ct2 import export_ctranslate2

    return {
        name: export_ctranslate2(toy[name], toy["data"], str(toy["root"] / f"{name}_ct2"))
        for name in STUDENTS
    }


def _sources(task, n=None):
    task.load_dataset("test")
    ds = task.dataset("test")
    return [ds.src[i].long() for i in range(len(ds) if n is None else n)]


def _runner(path, model, task, compute_type="float32", use_vmap=False):
    from lightcompress.measure.engines import CT2Runner

    return CT2Runner(
        path,
        compute_type,
        1,
        task.source_dictionary,
        task.target_dictionary,
        model.max_decoder_positions(),
        model.max_positions(),
        use_vmap=use_vmap,
    )


GREEDY = Namespace(beam=1, lenpen=1.0, min_len=1, max_len_a=1.2, max_len_b=10)
BEAM = Namespace(beam=5, lenpen=1.0, min_len=1, max_len_a=1.2, max_len_b=10)


@pytest.mark.parametrize("family", list(STUDENTS))
def test_the_export_is_the_dense_transformer_and_translates_as_the_factorized_student(
    toy, exports, family
):
    """Greedy: the same tokens as fairseq's search on the factorized student; beam 5: its best
    hypothesis or one within 0.02 of it (float rounding, as for the dense teacher's export)."""
    out = exports[family]
    assert sorted(os.listdir(out)) == [
        "check.json",
        "config.json",
        "model.bin",
        "shared_vocabulary.json",
    ]
    check = json.loads(Path(out, "check.json").read_text())
    assert check["quantization"] == "float32" and check["max_abs_logprob_difference"] < 1e-4
    assert check["translations"]["differ"] == 0 and check["translations"]["sentences"] == 4
    dense = check["densified"]
    assert set(dense["kinds"]) == KINDS[family], dense
    assert dense["dense_params"] > dense["params"]  # the dense shape, larger by design
    model, task = _load(toy[family], toy["data"])
    sources = _sources(task)
    runner = _runner(out, model, task)
    greedy = [_fairseq_nbest(model, task, s, GREEDY)[0]["tokens"].tolist()[:-1] for s in sources]
    assert runner.translate(sources, GREEDY, batch_size=8) == greedy
    assert any(len(h) > 2 for h in greedy)  # (the students translate: not all empty)
    same = 0
    for src, hyp in zip(sources, runner.translate(sources, BEAM, batch_size=8)):
        nbest = _fairseq_nbest(model, task, src, BEAM)
        best = nbest[0]["tokens"].tolist()[:-1]
        if hyp == best:
            same += 1
            continue
        scores = {tuple(h["tokens"].tolist()[:-1]): float(h["score"]) for h in nbest}
        assert tuple(hyp) in scores, (hyp, best)
        assert scores[tuple(best)] - scores[tuple(hyp)] < 0.02
    assert same >= 0.8 * len(sources)


def test_int8_export_translates_as_the_student_within_int8_tolerance(toy):
    """int8 weights: the deviation is recorded (not refused), and the greedy translations are
    the factorized student's for most sentences."""
    from lightcompress.deploy.ct2 import export_ctranslate2

    for family in STUDENTS:
        out = export_ctranslate2(
            toy[family], toy["data"], str(toy["root"] / f"{family}_int8"), quantization="int8"
        )
        check = json.loads(Path(out, "check.json").read_text())
        assert check["quantization"] == "int8" and check["tolerance"] is None
        assert 0 < check["max_abs_logprob_difference"] < 0.5, (family, check)
        t = check["translations"]
        assert t["equal"] + t["near_ties"] + t["differ"] == t["sentences"] == 4
        model, task = _load(toy[family], toy["data"])
        sources = _sources(task, 16)
        ours = [_fairseq_nbest(model, task, s, GREEDY)[0]["tokens"].tolist()[:-1] for s in sources]
        theirs = _runner(out, model, task, "int8").translate(sources, GREEDY, batch_size=8)
        same = sum(a == b for a, b in zip(ours, theirs))
        assert same >= 0.8 * len(sources), (family, same, len(sources))


def test_shared_layers_and_tied_tables_are_stored_once(toy, exports):
    """LightFormer's shared encoder layer becomes two equal dense layers, and its low-rank
    table tied to the output (whose padding row is the padding token's logit, not zero) one
    dense matrix: CTranslate2 stores each once, so the export is smaller than the teacher's."""
    from lightcompress.checkpoint import load_checkpoint
    from lightcompress.deploy.ct2 import export_ctranslate2
    from lightcompress.deploy.densify import densify_model

    student, task, args = load_checkpoint(toy["lightformer"], toy["data"])
    pad = task.target_dictionary.pad()
    assert student.encoder.embed_tokens.u[pad].abs().sum() > 0  # (the case is exercised)
    dense = densify_model(student, args, task)
    m = dense.model
    assert type(m).__name__ == "TransformerModel" and dense.args.arch == "transformer"
    assert dense.args.share_all_embeddings and m.decoder.output_projection.weight is (
        m.encoder.embed_tokens.weight
    )
    first, second = (layer.state_dict() for layer in m.encoder.layers)
    assert first.keys() == second.keys()
    assert all(torch.equal(first[k], second[k]) for k in first)
    assert dense.translations == {"sentences": 4, "equal": 4, "near_ties": 0}
    teacher = export_ctranslate2(toy["teacher"], toy["data"], str(toy["root"] / "teacher_ct2"))
    size = lambda d: os.path.getsize(os.path.join(d, "model.bin"))
    # the same dense shape as the teacher, one encoder layer stored once
    assert size(exports["lightformer"]) < size(teacher) <= size(exports["smartformer"]) + 1024


def test_densify_writes_a_fairseq_checkpoint_of_the_dense_transformer(toy, tmp_path, capsys):
    """``python -m lightcompress.deploy.densify``: fairseq's ``transformer`` (no plugin class),
    the student's translations; an existing output is one line."""
    from fairseq.models.transformer import TransformerModel

    from lightcompress.checkpoint import checkpoint_arch, read_checkpoint
    from lightcompress.deploy.densify import main

    out = tmp_path / "hypo_dense.pt"
    assert main(["--path", toy["hypoformer"], "--data", toy["data"], "-o", str(out)]) == 0
    printed = capsys.readouterr().out
    assert printed.startswith(f"wrote {out} (") and "multiplied out" in printed, printed
    assert "FusedQKV" in printed and "4 of 4 greedy probe translations equal" in printed
    assert checkpoint_arch(read_checkpoint(str(out))) == "transformer"
    dense, task = _load(str(out), toy["data"])
    assert type(dense) is TransformerModel
    student, _ = _load(toy["hypoformer"], toy["data"])
    sources = _sources(task, 12)
    hyps = lambda m: [_fairseq_nbest(m, task, s, GREEDY)[0]["tokens"].tolist() for s in sources]
    assert hyps(dense) == hyps(student)
    assert main(["--path", toy["hypoformer"], "--data", toy["data"], "-o", str(out)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err == [f"lightcompress-densify: error: {out} exists (pass --force to replace it)"]


def test_what_cannot_be_multiplied_out_is_one_line_and_nothing_is_written(toy, tmp_path, capsys):
    """Admin residual scaling and Subformer through the command; a map without a dense
    equivalent, one whose to_dense() is not its forward, a parameter outside every slot, and a
    student with ``densify=False`` through the library (each one ExportError line, no
    directory left)."""
    from torch import nn

    from lightcompress.checkpoint import load_checkpoint
    from lightcompress.deploy.ct2 import ExportError, export_model, main
    from lightcompress.modules import LowRankLinear

    T32 = TINY[:-3]  # (without --share-all-embeddings / --dropout: given below)
    admin = make_checkpoint(
        toy["data"],
        str(tmp_path / "admin.pt"),
        "hypoformer_iwslt_de_en",
        [
            *T32,
            "--share-all-embeddings",
            "--hypo-embed-rank",
            "2",
            "--hypo-ffn-rank",
            "8",
            "--admin-init",
            "closed-form",
        ],
    )
    subformer = make_checkpoint(
        toy["data"],
        str(tmp_path / "sub.pt"),
        "subformer",
        [*T32, "--safe-dim", "16", "--safe-heads", "2"],
    )
    for path, message in (
        (admin, "scales residuals (Admin, --admin-init)"),
        (subformer, "Subformer's SAFE and sandwich layers"),
    ):
        status = main(["--path", path, "--data", toy["data"], "-o", str(tmp_path / "out")])
        lines = capsys.readouterr().err.strip().splitlines()
        assert status == 2 and len(lines) == 1 and message in lines[0], lines
        assert lines[0].startswith(f"lightcompress-export-ct2: error: {path}: ")

    class Lying(LowRankLinear):
        def to_dense(self):
            return 2 * super().to_dense()

    def broken(kind):
        model, task, args = load_checkpoint(toy["lightformer"], toy["data"])
        layer = model.encoder.layers[0]
        if kind == "opaque":
            layer.fc1 = nn.Sequential(nn.Linear(32, 64))
        elif kind == "lying":
            lying = Lying(32, 64, 8)
            lying.load_state_dict(layer.fc1.state_dict())
            layer.fc1 = lying
        else:
            layer.gate = nn.Parameter(torch.ones(32))
        return model, task, args

    for kind, message in (
        ("opaque", "encoder.layers.0.fc1 is a Sequential, which has no dense equivalent"),
        ("lying", "encoder.layers.0.fc1 (Lying) does not multiply out to one matrix"),
        ("extra", "the student's encoder.layers.0.gate has no place in the dense Transformer"),
    ):
        with pytest.raises(ExportError, match=message.replace("(", r"\(").replace(")", r"\)")):
            export_model(*broken(kind), str(tmp_path / "out"))
    with pytest.raises(ExportError, match="is not dense: encoder.embed_tokens is a LowRankEmb"):
        export_model(
            *load_checkpoint(toy["lightformer"], toy["data"]), str(tmp_path / "out"), densify=False
        )
    assert sorted(os.listdir(tmp_path)) == ["admin.pt", "sub.pt"]


def test_the_shortlist_ships_as_the_vocabulary_map_of_the_dense_export(toy, tmp_path, capsys):
    """``--shortlist`` on a student: ``vmap.txt`` beside the multiplied-out model; a list that
    covers the vocabulary translates as without it, a small one keeps to its candidates."""
    import ctranslate2

    from lightcompress.deploy.ct2 import main
    from lightcompress.deploy.shortlist import load_shortlist
    from lightcompress.deploy.shortlist_build import main as build
    from lightcompress_runtime import shortlist_text

    _, task = _load(toy["smartformer"], toy["data"])
    src_d, tgt_d = task.source_dictionary, task.target_dictionary
    small, full = tmp_path / "sl.txt", tmp_path / "full.txt"
    assert build(["--data", toy["data"], "--k", "2", "--frequent", "1", "-o", str(small)]) == 0
    full.write_text(shortlist_text(["\t" + " ".join(tgt_d.symbols)], "test"), encoding="utf-8")
    base = ["--path", toy["smartformer"], "--data", toy["data"]]
    for name, sl in (("full", full), ("small", small)):
        assert main([*base, "-o", str(tmp_path / name), "--shortlist", str(sl)]) == 0
        printed = capsys.readouterr().out
        assert "multiplied out 18 factorized maps (CPLinear)" in printed
        assert "translate with use_vmap=True" in printed and "model.bin" in printed
        assert "vmap.txt" in os.listdir(tmp_path / name)
    with open(os.path.join(toy["raw"], "test.de")) as f:
        sources = [line.split() for line in f.read().splitlines()[:12]]
    options = {"beam_size": 5, "max_decoding_length": 12}

    def translate(name, vmap):
        t = ctranslate2.Translator(str(tmp_path / name), device="cpu", intra_threads=1)
        return [
            t.translate_batch([src], use_vmap=vmap, **options)[0].hypotheses[0] for src in sources
        ]

    plain = translate("full", False)
    assert translate("full", True) == plain
    short = load_shortlist(str(small), src_d, tgt_d)
    for src, hyp in zip(sources, translate("small", True)):
        allowed = {
            tgt_d[i]
            for i in short.candidates(torch.tensor([[src_d.index(w) for w in src]]).numpy())
        }
        assert set(hyp) <= allowed, (src, hyp)


def test_measure_speed_ct2_times_the_student_multiplied_out(toy, tmp_path):
    """``measure_speed --ct2`` on a student: CTranslate2 rows of its dense shape (float32 and
    int8), no note; larger on disk than the factorized student's fairseq weights."""
    from lightcompress.measure.candidates import load_candidates, with_ct2

    candidates = load_candidates([f"lf={toy['lightformer']}"], data=toy["data"])
    ct2, notes = with_ct2(candidates, str(tmp_path / "ct2"), threads=1)
    assert notes == []
    assert [(c.label, c.engine, c.precision) for c in ct2] == [
        ("lf", "ctranslate2", "float32"),
        ("lf", "ctranslate2", "int8"),
    ]
    from lightcompress.modules import count_unique_params

    student_bytes = 4 * count_unique_params(candidates[0].model)  # (float32 weights)
    assert ct2[0].size_bytes > ct2[1].size_bytes and ct2[0].size_bytes > student_bytes
