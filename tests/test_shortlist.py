"""The vocabulary shortlist (issue 27 item 2): built from the training corpus by
``lightcompress-shortlist``, used by the PyTorch fast path and the ONNX export.

- a shortlist that covers the whole vocabulary never changes a translation: fairseq's
  hypotheses and scores on a dense Transformer, a LightFormer (low-rank tied table: rows of its
  factor) and a Hypoformer (HTT tied table), on both paths; an export with a shortlist run
  without it too;
- a small shortlist gives fairseq's translations of the model whose logits outside the batch's
  candidates are -inf (what renormalizing over the candidates means), every token among them;
- the builder lists, per source word, the target words it occurs with (the toy task translates
  word for word: its own translation first), always the most frequent ones, EOS and UNK, never
  PAD; bad input is one line, exit status 2, nothing written.

No test asserts a timing.
"""

import os
import subprocess
import sys

import harness
import numpy as np
import pytest
import torch
from harness import REPO_ROOT, SOURCES, make_parallel_corpus
from test_deploy import EOS_BIAS, FAMILIES, _batches, _binarize, _EosBias, make_checkpoint

SHORTLIST_FAMILIES = ["transformer", "lightformer", "hypoformer"]
VOCAB = 40


class _EosBiasRows(_EosBias):
    """:class:`_EosBias` that the shortlist restricts through the real projection's rows
    (``shortlist_rows``: the hook :func:`output_rows` asks first): the same logits."""

    def shortlist_rows(self, ids):
        from lightcompress.deploy.shortlist import output_rows

        rows = output_rows(self.projection, ids)
        onehot = (ids == self.eos).float() * self.value
        return lambda x: rows(x) + onehot


class _EosBiasSplit(_EosBiasRows):
    """:class:`_EosBiasRows` whose rows an ONNX export gathers once per batch (``rows.onnx``):
    the real projection's split rows, plus the EOS bias of the candidates as one more row
    tensor (``shortlist_split``: the hook :func:`split_output_rows` asks first)."""

    def shortlist_split(self):
        from lightcompress.deploy.shortlist import split_output_rows

        gather, score = split_output_rows(self.projection)

        def rows(ids):
            return (*gather(ids), (ids == self.eos).float() * self.value)

        return rows, lambda x, r: score(x, r[:-1]) + r[-1]


class _Masked(torch.nn.Module):
    """An output projection whose logits outside ``ids`` are -inf: fairseq's search on it is
    the search over the candidates with the log-softmax renormalized over them."""

    def __init__(self, projection, ids, vocab):
        super().__init__()
        self.projection = projection
        self.mask = torch.full((vocab,), float("-inf"))
        self.mask[torch.as_tensor(ids)] = 0.0

    def forward(self, x):
        return self.projection(x) + self.mask


def _model(family, split=False):
    """A random model of ``family`` whose projection adds an EOS bias (:class:`_EosBiasRows`;
    ``split``: :class:`_EosBiasSplit`, its rows gathered by the ONNX export's ``rows.onnx``)."""
    from lightcompress.measure.specs import build_random_model

    arch, flags = FAMILIES[family]
    torch.manual_seed(0)
    model, task, _ = build_random_model(arch, VOCAB, flags, True, return_task=True)
    model.eval()
    d = task.target_dictionary
    g = torch.Generator().manual_seed(1)
    src = torch.randint(4, VOCAB, (4, 6), generator=g)
    with torch.no_grad():
        spread = float(model(src, torch.full((4,), 6), src)[0].std())
    model.decoder.output_projection = (_EosBiasSplit if split else _EosBiasRows)(
        model.decoder.output_projection, d.eos(), EOS_BIAS * spread
    )
    sentences = [
        torch.cat([torch.randint(4, VOCAB, (int(n),), generator=g), torch.tensor([d.eos()])])
        for n in torch.randint(2, 9, (6,), generator=g)
    ]
    return model, task, sentences


def _write(path, lines, header=None):
    """A shortlist file of ``lines`` (the builder's header: line count and checksum), or with
    another ``header`` line."""
    from lightcompress_runtime import shortlist_text

    with open(path, "w", encoding="utf-8") as f:
        if header is None:
            f.write(shortlist_text(lines, "test"))
        else:
            f.write("\n".join([header, *lines]) + "\n")
    return str(path)


def _full_shortlist(path, task):
    """Every target symbol always included (the special ones too)."""
    return _write(path, ["\t" + " ".join(task.target_dictionary.symbols)])


def _small_shortlist(path, task, seed=0):
    """Per ordinary source symbol 3 random target symbols; 2 always: candidates of a batch are
    well under the vocabulary."""
    rng = np.random.default_rng(seed)
    src, tgt = task.source_dictionary.symbols, task.target_dictionary.symbols
    lines = ["\t" + " ".join(tgt[i] for i in (6, 7))]
    for s in range(4, len(src)):
        lines.append(src[s] + "\t" + " ".join(tgt[t] for t in rng.choice(range(4, len(tgt)), 3)))
    return _write(path, lines)


def _fairseq(model, d, src, lengths, **settings):
    from fairseq.sequence_generator import SequenceGenerator

    generator = SequenceGenerator([model], d, **settings)
    with torch.inference_mode():
        return generator.generate(
            [model], {"net_input": {"src_tokens": src, "src_lengths": lengths}}
        )


def _same(out, ref, tol):
    for r, o in zip(ref, out):
        assert [list(map(int, h["tokens"])) for h in o] == [h["tokens"].tolist() for h in r]
        assert [float(h["score"]) for h in o] == pytest.approx(
            [float(h["score"]) for h in r], abs=tol
        )


# --------------------------------------------------------------------------------------------
# the fast path
# --------------------------------------------------------------------------------------------


@pytest.mark.parametrize("family", SHORTLIST_FAMILIES)
def test_fast_path_shortlist_covering_the_vocabulary_gives_fairseqs_translations(family, tmp_path):
    from lightcompress.deploy.generator import FastGenerator
    from lightcompress.deploy.shortlist import load_shortlist

    model, task, sentences = _model(family)
    d = task.target_dictionary
    sl = load_shortlist(_full_shortlist(tmp_path / "full.txt", task), task.source_dictionary, d)
    assert sl.candidates(np.array([[5, 6]])).tolist() == list(range(len(d)))
    for beam in (1, 5):
        settings = {"beam_size": beam, "max_len_a": 1.0, "max_len_b": 3}
        fast = FastGenerator(model, d, shortlist=sl, **settings)
        for _idx, src, lengths in _batches(sentences, 3):
            _same(fast.generate(src, lengths), _fairseq(model, d, src, lengths, **settings), 1e-5)


@pytest.mark.parametrize("family", SHORTLIST_FAMILIES)
def test_fast_path_small_shortlist_searches_the_candidates_only(family, tmp_path):
    from lightcompress.deploy.generator import FastGenerator
    from lightcompress.deploy.shortlist import load_shortlist

    model, task, sentences = _model(family)
    d = task.target_dictionary
    sl = load_shortlist(_small_shortlist(tmp_path / "sl.txt", task), task.source_dictionary, d)
    projection = model.decoder.output_projection
    sizes = []
    for beam in (1, 5):
        settings = {"beam_size": beam, "max_len_a": 1.0, "max_len_b": 3}
        fast = FastGenerator(model, d, shortlist=sl, **settings)
        for _idx, src, lengths in _batches(sentences, 3):
            cands = sl.candidates(src.numpy())
            sizes.append(len(cands))
            assert {0, 1, 2, 3} <= set(cands.tolist())  # BOS, PAD, EOS, UNK keep their ids
            out = fast.generate(src, lengths)
            for hyps in out:
                for h in hyps:
                    assert set(h["tokens"].tolist()) <= set(cands.tolist())
            model.decoder.output_projection = _Masked(projection, cands, len(d))
            try:
                ref = _fairseq(model, d, src, lengths, **settings)
            finally:
                model.decoder.output_projection = projection
            _same(out, ref, 1e-5)
    assert max(sizes) < len(d)  # (the candidates are a real subset)


@pytest.mark.parametrize("family", SHORTLIST_FAMILIES + ["linear-with-bias"])
def test_split_rows_score_as_the_projection_at_the_candidates(family):
    """split_output_rows: the rows gathered once, then scored, give the projection's logits at
    the candidates (fairseq's Linear with and without bias, LightFormer's factorized tied
    table, Hypoformer's HTT table); a module it does not know has none."""
    from lightcompress.deploy.shortlist import split_output_rows

    if family == "linear-with-bias":
        torch.manual_seed(0)
        proj, dim = torch.nn.Linear(16, VOCAB), 16
    else:
        model, _task, _ = _model(family)
        proj = model.decoder.output_projection.projection  # (the real one, unwrapped)
        dim = model.decoder.output_embed_dim
    ids = torch.tensor([0, 2, 3, 7, 11, VOCAB - 1])
    x = torch.randn(5, dim, generator=torch.Generator().manual_seed(2))
    gather, score = split_output_rows(proj)
    rows = gather(ids)
    assert all(r.shape[0] == len(ids) for r in rows)
    with torch.no_grad():
        torch.testing.assert_close(score(x, rows), proj(x)[:, ids], rtol=1e-5, atol=1e-5)
    assert split_output_rows(torch.nn.Sequential(proj)) is None


def test_fast_path_int8_shortlist_covering_the_vocabulary_changes_nothing(tmp_path):
    """int8 (every map, the output projection too): the rows of the packed int8 weight."""
    from lightcompress.deploy.generator import FastGenerator
    from lightcompress.deploy.quantize import quantize_model_int8
    from lightcompress.deploy.shortlist import load_shortlist

    model, task, sentences = _model("transformer")
    model.decoder.output_projection = model.decoder.output_projection.projection  # (plain)
    q = quantize_model_int8(model)
    d = task.target_dictionary
    assert "Linear" in type(q.decoder.output_projection).__name__
    sl = load_shortlist(_full_shortlist(tmp_path / "full.txt", task), task.source_dictionary, d)
    settings = {"beam_size": 5, "max_len_a": 1.0, "max_len_b": 3}
    with_sl = FastGenerator(q, d, shortlist=sl, **settings)
    without = FastGenerator(q, d, **settings)
    for _idx, src, lengths in _batches(sentences, 3):
        _same(with_sl.generate(src, lengths), without.generate(src, lengths), 1e-5)


# --------------------------------------------------------------------------------------------
# the ONNX export
# --------------------------------------------------------------------------------------------


def _stored_shapes(out: str) -> set:
    """The shapes of every weight an export's graphs hold: initializers and constants."""
    import onnx

    shapes = set()
    for name in ("encoder.onnx", "decoder.onnx", "rows.onnx"):
        if not os.path.exists(os.path.join(out, name)):
            continue
        graph = onnx.load(os.path.join(out, name), load_external_data=False).graph
        shapes |= {tuple(i.dims) for i in graph.initializer}
        shapes |= {
            tuple(a.t.dims)
            for n in graph.node
            if n.op_type == "Constant"
            for a in n.attribute
            if a.name == "value"
        }
    return shapes


def _op_types(out: str, graph: str) -> set:
    import onnx

    model = onnx.load(os.path.join(out, graph + ".onnx"), load_external_data=False)
    return {n.op_type for n in model.graph.node}


@pytest.mark.parametrize("family", SHORTLIST_FAMILIES)
def test_onnx_shortlist_export_gives_fairseqs_translations_without_it_and_the_fast_paths_with_it(
    family, tmp_path
):
    import json

    from lightcompress.deploy.generator import FastGenerator
    from lightcompress.deploy.onnx_export import export_onnx
    from lightcompress.deploy.shortlist import load_shortlist
    from lightcompress_runtime import OnnxError, OnnxGenerator

    # the transformer's projection has no split rows: its export gathers them at every step
    split = family != "transformer"
    model, task, sentences = _model(family, split=split)
    d = task.target_dictionary
    path = _small_shortlist(tmp_path / "sl.txt", task)
    out = str(tmp_path / "onnx")
    if family == "hypoformer":  # its tables cached, as after fairseq's validation: a traced
        with torch.no_grad():  # lookup once stored the cached V x d table in the export
            model.eval().encoder.embed_tokens.weight, model.decoder.embed_tokens.weight
    export_onnx(model, task, out, shortlist=path)  # (its proof: without the list, fairseq's)
    with open(os.path.join(out, "config.json")) as f:
        config = json.load(f)
    assert config["shortlist"] == "shortlist.npz"  # (the packed form, not the text)
    with open(os.path.join(out, "MANIFEST.sha256")) as f:
        listed = f.read()
    assert "shortlist.npz" in listed and not os.path.exists(os.path.join(out, "shortlist.txt"))
    step_inputs = [i.name for i in OnnxGenerator(out).decoder.get_inputs()]
    if split:  # the candidates' output rows: gathered once per batch by rows.onnx
        assert config["shortlist_rows"] == "rows.onnx" and "rows.onnx" in listed
        # (the model's rows and the EOS bias's: two inputs of the step)
        assert len(config["shortlist_rows_outputs"]) == 2
        assert set(config["shortlist_rows_outputs"]) <= set(step_inputs)
    else:
        assert "shortlist_rows" not in config and "rows.onnx" not in listed
    if family == "hypoformer":  # the HTT table's factors are stored, not the V x d table,
        # and every graph picks its rows from the TT cores (the ids' multi-indices: Mod), not
        # from a full table built at every call (the traced lookup did one or the other)
        width = model.decoder.embed_tokens.embedding_dim
        assert model.decoder.embed_tokens.tt is not None
        assert not {(len(d), width), (width, len(d))} & _stored_shapes(out)
        assert all("Mod" in _op_types(out, g) for g in ("encoder", "decoder", "rows"))
    sl = load_shortlist(path, task.source_dictionary, d)
    for beam in (1, 5):
        settings = {"beam_size": beam, "max_len_a": 1.0, "max_len_b": 3}
        full = OnnxGenerator(out, **settings)
        short = OnnxGenerator(out, shortlist=True, **settings)
        fast = FastGenerator(model, d, shortlist=sl, **settings)
        for _idx, src, lengths in _batches(sentences, 3):
            _same(
                full.generate(src.numpy(), lengths.numpy()),
                _fairseq(model, d, src, lengths, **settings),
                1e-4,
            )
            got = short.generate(src.numpy(), lengths.numpy())
            _same(got, fast.generate(src, lengths), 1e-4)
            cands = set(sl.candidates(src.numpy()).tolist())
            assert all(set(map(int, h["tokens"])) <= cands for hyps in got for h in hyps)
    if family == "hypoformer":  # the output table itself (no EOS bias around it): the step
        # takes its input rows from the candidates' output rows, not from the TT cores
        # (the same model object: the searches above left it as they found it)
        model.decoder.output_projection = model.decoder.output_projection.projection
        tied = str(tmp_path / "tied")
        export_onnx(model, task, tied, shortlist=path)
        assert "Mod" in _op_types(tied, "rows") and "Mod" not in _op_types(tied, "decoder")
        settings = {"beam_size": 5, "max_len_a": 1.0, "max_len_b": 3}
        short = OnnxGenerator(tied, shortlist=True, **settings)
        fast = FastGenerator(model, d, shortlist=sl, **settings)
        for _idx, src, lengths in _batches(sentences, 3):
            _same(short.generate(src.numpy(), lengths.numpy()), fast.generate(src, lengths), 1e-4)
            _same(
                OnnxGenerator(tied, **settings).generate(src.numpy(), lengths.numpy()),
                _fairseq(model, d, src, lengths, **settings),
                1e-4,
            )
    if split:  # an export whose rows graph is missing is refused, in one line
        os.remove(os.path.join(out, "rows.onnx"))
        with pytest.raises(OnnxError, match="lacks rows.onnx"):
            OnnxGenerator(out, shortlist=True)


def test_onnx_export_shortlist_bad_input_is_one_line(tmp_path):
    from lightcompress.deploy.onnx_export import export_onnx
    from lightcompress.deploy.onnx_graphs import ExportError
    from lightcompress_runtime import OnnxError, OnnxGenerator

    model, task, _ = _model("transformer")
    bad = _write(tmp_path / "bad.txt", ["\tnot-a-symbol"])
    with pytest.raises(ExportError, match="'not-a-symbol' is not in the model's dictionaries"):
        export_onnx(model, task, str(tmp_path / "a"), shortlist=bad, check=False)
    assert not os.path.exists(tmp_path / "a")
    foreign = _write(tmp_path / "foreign.txt", [], header="# something else")
    with pytest.raises(ExportError, match="is not a lightcompress shortlist"):
        export_onnx(model, task, str(tmp_path / "a"), shortlist=foreign, check=False)
    export_onnx(model, task, str(tmp_path / "plain"), check=False)
    with pytest.raises(OnnxError, match="has no shortlist: export it with --shortlist FILE"):
        OnnxGenerator(str(tmp_path / "plain"), shortlist=True)


def test_packed_shortlist_gives_the_texts_candidates_and_refuses_a_bad_file_in_one_line(tmp_path):
    import zipfile

    from lightcompress_runtime import OnnxError, Shortlist

    _, task, _ = _model("transformer")
    s, d = task.source_dictionary, task.target_dictionary
    specials = (d.bos(), d.pad(), d.eos(), d.unk())
    # a list with a repeated id and a source symbol with an empty list (edge cases of packing)
    lines = ["\t" + d.symbols[6], s.symbols[4] + "\t" + " ".join(d.symbols[t] for t in (9, 5, 9))]
    lines.append(s.symbols[5] + "\t")
    for path in (_small_shortlist(tmp_path / "sl.txt", task), _write(tmp_path / "e.txt", lines)):
        text = Shortlist(path, s.symbols, d.symbols, specials)
        packed_path = str(tmp_path / "sl.npz")
        text.save_packed(packed_path)
        packed = Shortlist(packed_path, s.symbols, d.symbols, specials)
        assert packed.always.tolist() == text.always.tolist()
        assert np.diff(packed.offsets).tolist() == np.diff(text.offsets).tolist()
        rng = np.random.default_rng(0)
        for _ in range(20):
            src = rng.integers(0, len(s), size=(3, 7))
            assert packed.candidates(src).tolist() == text.candidates(src).tolist()
    # (the second file: source 4's list, the id always included, the specials; 5's list empty)
    assert set(packed.candidates(np.array([[4, 5]])).tolist()) == set(specials) | {5, 6, 9}
    # bad files: each one line, naming the file
    with pytest.raises(OnnxError, match=r"built for vocabularies of \[\d+, \d+\] types"):
        Shortlist(packed_path, s.symbols, d.symbols + ["extra"], specials)
    with open(packed_path, "rb") as f:
        whole = f.read()
    cut = _write_bytes(tmp_path / "cut.npz", whole[: len(whole) // 2])
    with pytest.raises(OnnxError, match="cut.npz is not a usable packed shortlist"):
        Shortlist(cut, s.symbols, d.symbols, specials)
    arrays = dict(np.load(packed_path))
    for name, change, why in (
        ("format", np.array("something else"), "format 'something else'"),
        ("counts", arrays["counts"] + 1, "its list lengths do not match its ids"),
        ("deltas", arrays["deltas"].astype(np.int64) + len(d), "ids outside the target vocabulary"),
        ("always", None, "no 'always' array"),
    ):
        changed = {k: v for k, v in arrays.items() if k != name}
        if change is not None:
            changed[name] = change
        np.savez(tmp_path / "changed.npz", **changed)
        with pytest.raises(OnnxError, match=why):
            Shortlist(str(tmp_path / "changed.npz"), s.symbols, d.symbols, specials)
    with zipfile.ZipFile(tmp_path / "pickled.npz", "w") as z:  # (an object array: not loaded)
        import io

        buf = io.BytesIO()
        np.save(buf, np.array([{"a": 1}], dtype=object), allow_pickle=True)
        for name in arrays:
            z.writestr(name + ".npy", buf.getvalue())
    with pytest.raises(OnnxError, match="pickled.npz is not a usable packed shortlist"):
        Shortlist(str(tmp_path / "pickled.npz"), s.symbols, d.symbols, specials)


def _write_bytes(path, data: bytes) -> str:
    with open(path, "wb") as f:
        f.write(data)
    return str(path)


# --------------------------------------------------------------------------------------------
# the builder and the commands
# --------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def words(tmp_path_factory):
    """The toy corpus (word-for-word translation) binarized with joined dictionaries, and a
    2-2 Transformer trained on it for 30 updates."""
    root = tmp_path_factory.mktemp("shortlist")
    raw = make_parallel_corpus(str(root / "raw"), n_train=400, n_valid=10, n_test=30)
    data = _binarize(raw, str(root / "bin"))
    tiny = FAMILIES["transformer"][1] + ["--share-all-embeddings"]
    teacher = make_checkpoint(data, str(root / "teacher.pt"), "transformer", tiny, updates=30)
    return {"raw": raw, "data": data, "teacher": teacher, "root": root}


def _cli(module, *args, stdin=""):
    return harness.run(
        [sys.executable, "-c", f"from {module} import cli_main; cli_main()", *map(str, args)],
        capture_output=True,
        text=True,
        cwd=REPO_ROOT,
        timeout=300,
        check=False,
        input=stdin,
        env=dict(os.environ, PYTHONPATH=SOURCES, PYTHONWARNINGS="ignore"),
    )


BUILD = "lightcompress.deploy.shortlist_build"


def test_builder_lists_cooccurring_targets_and_always_the_frequent_ones_eos_and_unk(words):
    from fairseq.data import Dictionary

    out = words["root"] / "sl.txt"
    proc = _cli(BUILD, "--data", words["data"], "--k", "3", "--frequent", "2", "-o", out)
    assert proc.returncode == 0, proc.stderr
    assert proc.stderr.startswith("lightcompress-shortlist: wrote")
    lines = out.read_text(encoding="utf-8").split("\n")
    assert lines[0].startswith("#lightcompress-shortlist 2 lines=")
    assert " source=de target=en pairs=400 k=3" in lines[0]
    assert lines[-1] == ""
    always = lines[1].split("\t")[1].split()
    # the two most frequent target words of the training split, by count
    counts: dict = {}
    with open(os.path.join(words["raw"], "train.en")) as f:
        for line in f:
            for w in line.split():
                counts[w] = counts.get(w, 0) + 1
    tgt = Dictionary.load(os.path.join(words["data"], "dict.en.txt"))
    frequent = sorted(counts, key=lambda w: (-counts[w], tgt.index(w)))[:2]
    assert sorted(always) == sorted(["</s>", "<unk>", *frequent])
    assert "<pad>" not in always
    # per source word: at most 3 targets, none always included, its own translation first
    # unless it is always included, ranked by the number of sentence pairs they share
    pairs = []
    with (
        open(os.path.join(words["raw"], "train.de")) as fs,
        open(os.path.join(words["raw"], "train.en")) as ft,
    ):
        pairs = [(set(a.split()), set(b.split())) for a, b in zip(fs, ft)]
    lists = dict(line.split("\t") for line in lines[2:-1])
    assert len(lists) == len({w for s, _t in pairs for w in s})
    for src, targets in lists.items():
        targets = targets.split()
        assert 1 <= len(targets) <= 3 and not set(targets) & set(always)
        own = "t" + src[1:]
        if own not in always:
            assert targets[0] == own
        shared = [sum(src in s and t in tt for s, tt in pairs) for t in targets]
        assert shared == sorted(shared, reverse=True)


def _in_process(main, args, capsys):
    """``main(args)`` here (no interpreter to start): its exit status and standard error."""
    try:
        rc = main([str(a) for a in args])
    except SystemExit as exc:  # (argparse)
        rc = exc.code
    return rc, capsys.readouterr().err


def test_builder_bad_input_is_one_line_and_writes_nothing(words, tmp_path, capsys):
    from lightcompress.deploy.shortlist_build import main

    out = tmp_path / "sl.txt"
    cases = [
        (["--data", tmp_path / "nope", "-o", out], "data directory not found"),
        (["--data", words["data"], "--k", "-1", "-o", out], "--k and --frequent must be >= 0"),
        (["--data", words["data"], "--split", "dev", "-o", out], "language pairs found: none"),
        (["--data", words["data"], "-s", "de", "-t", "fr", "-o", out], "no binarized train"),
        (["--data", words["data"], "-o", tmp_path], "is a directory"),
        (["--data", words["data"], "--k", "x", "-o", out], "invalid int value"),
    ]
    for i, (args, message) in enumerate(cases):
        # the first as a command (nothing else on its standard error), the others in this process
        if i == 0:
            proc = _cli(BUILD, *args)
            rc, err = proc.returncode, proc.stderr
        else:
            rc, err = _in_process(main, args, capsys)
        assert rc == 2, (args, err)
        lines = err.strip().split("\n")
        assert len(lines) == 1 and lines[0].startswith("lightcompress-shortlist: error:"), lines
        assert message in lines[0], lines
        assert not out.exists()
    # data that do not fit the dictionaries: a target dictionary cut short
    import shutil

    cut = tmp_path / "cut"
    shutil.copytree(words["data"], cut)
    with open(cut / "dict.en.txt") as f:
        head = f.readlines()[:5]
    (cut / "dict.en.txt").write_text("".join(head))
    rc, err = _in_process(main, ["--data", cut, "-o", out], capsys)
    assert rc == 2 and "do not fit" in err and err.count("\n") == 1, err
    assert not out.exists()


def _here(main, *args, stdin=""):
    """``main(args)`` in this process, as :func:`_cli` runs its command (no interpreter to start
    importing torch and fairseq: about 3 s): its status, standard output and error."""
    import contextlib
    import io

    out, err, saved = io.StringIO(), io.StringIO(), sys.stdin
    sys.stdin = io.TextIOWrapper(io.BytesIO(stdin.encode("utf-8")), encoding="utf-8")
    try:
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            try:
                rc = main([str(a) for a in args])
            except SystemExit as exc:  # (argparse)
                rc = exc.code
    finally:
        sys.stdin = saved
    return subprocess.CompletedProcess(args, rc, out.getvalue(), err.getvalue())


def test_translate_commands_take_the_shortlist(words, tmp_path):
    """``lightcompress-translate --shortlist`` and the export's ``translate.py`` (which uses
    the export's shortlist by default, ``--no-shortlist`` every token): a list that covers the
    vocabulary gives the text without it; a real list runs; a bad file is one line."""
    from lightcompress.deploy import onnx_export, shortlist_build, torch_translator
    from lightcompress.deploy.torch_translator import Translator

    sl = tmp_path / "sl.txt"
    args = ["--data", words["data"], "--k", "2", "--frequent", "1", "-o", sl]
    assert _here(shortlist_build.main, *args).returncode == 0
    t = Translator(words["teacher"], words["data"], beam=5)
    full = _full_shortlist(tmp_path / "full.txt", t.task)
    with open(os.path.join(words["raw"], "test.de")) as f:
        text = f.read()
    base = ["--path", words["teacher"], "--data", words["data"]]
    # the commands with a shortlist (a real one, a bad one) as commands; the others in this
    # process (the same main)
    plain = _here(torch_translator.main, *base, stdin=text)
    covered = _here(torch_translator.main, *base, "--shortlist", full, stdin=text)
    short = _cli("lightcompress.deploy.torch_translator", *base, "--shortlist", sl, stdin=text)
    assert plain.returncode == covered.returncode == short.returncode == 0, short.stderr
    assert covered.stdout == plain.stdout
    assert len(short.stdout.split("\n")) == len(plain.stdout.split("\n"))
    bad = _write(tmp_path / "bad.txt", [], header="nonsense")
    proc = _cli("lightcompress.deploy.torch_translator", *base, "--shortlist", bad, stdin=text)
    assert proc.returncode == 2 and proc.stderr.count("\n") == 1, proc.stderr
    assert "is not a lightcompress shortlist" in proc.stderr
    # the export: --shortlist ships the file; translate.py --shortlist uses it
    out = tmp_path / "onnx"
    proc = _here(onnx_export.main, *base, "--shortlist", sl, "-o", out)
    assert proc.returncode == 0, proc.stderr
    runtime = [sys.executable, str(out / "translate.py"), str(out), "--beam", "5", "--tokenized"]
    run = lambda *a: subprocess.run(
        [*runtime, *a], input=text, capture_output=True, text=True, check=False, timeout=300
    )
    onnx_short = run("--shortlist")
    assert onnx_short.returncode == 0 and onnx_short.stdout == short.stdout, onnx_short.stderr
    # the export's translators use its shortlist by default (issue 55), --no-shortlist scores
    # every token (fairseq's translations); the list changes some translations here, so the
    # default is told apart from either
    assert short.stdout != plain.stdout
    assert run().stdout == short.stdout
    assert run("--no-shortlist").stdout == plain.stdout
    from lightcompress_runtime import OnnxTranslator

    lines = text.splitlines()
    default = OnnxTranslator(str(out), beam=5, tokenized=True).translate(lines)
    assert default == OnnxTranslator(str(out), beam=5, tokenized=True, shortlist=True).translate(
        lines
    )
    assert "\n".join(
        OnnxTranslator(str(out), beam=5, tokenized=True, shortlist=False).translate(lines)
    ) == plain.stdout.rstrip("\n")


def test_ct2_export_ships_the_shortlist_as_its_vocabulary_map(words, tmp_path):
    """``lightcompress-export-ct2 --shortlist``: the list as CTranslate2's ``vmap.txt`` (the
    same lists, token for token); a list that covers the vocabulary translates as without it;
    a small one keeps every output token among its batch's candidates; a list of other
    dictionaries is one line and nothing is written."""
    import ctranslate2

    from lightcompress.deploy import ct2, shortlist_build
    from lightcompress.deploy.shortlist import load_shortlist
    from lightcompress.deploy.torch_translator import Translator

    task = Translator(words["teacher"], words["data"], beam=5).task
    src_d, tgt_d = task.source_dictionary, task.target_dictionary
    sl = tmp_path / "sl.txt"
    args = ["--data", words["data"], "--k", "2", "--frequent", "1", "-o", sl]
    assert _here(shortlist_build.main, *args).returncode == 0
    full = _full_shortlist(tmp_path / "full.txt", task)
    base = ["--path", words["teacher"], "--data", words["data"]]
    export = "lightcompress.deploy.ct2"
    for name, path in (("plain", None), ("full", full), ("small", sl)):
        extra = ["--shortlist", path] if path else []
        # (the one with the small list as a command, the others in this process: the same main)
        if name == "small":
            proc = _cli(export, *base, "-o", tmp_path / name, *extra)
        else:
            proc = _here(ct2.main, *base, "-o", tmp_path / name, *extra)
        assert proc.returncode == 0, proc.stderr
        assert ("vmap.txt" in os.listdir(tmp_path / name)) == (path is not None)
    # the map holds the list: the tokens always included, then each source token's targets
    short = load_shortlist(str(sl), src_d, tgt_d)
    with open(tmp_path / "small" / "vmap.txt", encoding="utf-8") as f:
        lines = [line.rstrip("\n").split("\t") for line in f]
    assert lines[0][0] == "" and lines[0][1].split() == [tgt_d[i] for i in short.listed]
    mapped = {src: targets.split() for src, targets in lines[1:]}
    expected = {
        src_d[i]: [tgt_d[t] for t in short.targets[short.offsets[i] : short.offsets[i + 1]]]
        for i in range(len(src_d))
        if short.offsets[i + 1] > short.offsets[i]
    }
    assert mapped == expected and len(expected) > 5
    # translations: a covering list changes nothing; a small list keeps to the candidates
    with open(os.path.join(words["raw"], "test.de")) as f:
        sources = [line.split() for line in f.read().splitlines()[:12]]
    options = {"beam_size": 5, "max_decoding_length": 12, "return_scores": True}

    def translate(name, vmap):  # (one sentence a batch: its candidates are its own list's)
        t = ctranslate2.Translator(str(tmp_path / name), device="cpu", intra_threads=1)
        return [
            t.translate_batch([src], use_vmap=vmap, **options)[0].hypotheses[0] for src in sources
        ]

    plain = translate("plain", False)
    assert translate("full", True) == plain
    small = translate("small", True)
    outside = 0
    for src, hyp, free in zip(sources, small, plain):
        allowed = {tgt_d[i] for i in short.candidates(np.array([[src_d.index(w) for w in src]]))}
        assert set(hyp) <= allowed < set(tgt_d.symbols), (src, hyp)
        outside += not set(free) <= allowed
    assert outside > 0  # (without the map, other tokens: the map restricted something)
    # a list of other dictionaries: one line, nothing written
    other = _write(tmp_path / "other.txt", ["\t" + "nonsense-token"])
    proc = _here(ct2.main, *base, "-o", tmp_path / "bad", "--shortlist", other)
    assert proc.returncode == 2 and proc.stderr.count("\n") == 1, proc.stderr
    assert proc.stderr.startswith("lightcompress-export-ct2: error: --shortlist")
    proc = _cli(export, *base, "-o", tmp_path / "bad", "--shortlist", tmp_path / "missing.txt")
    assert proc.returncode == 2 and "file not found" in proc.stderr, proc.stderr
    assert not [p for p in os.listdir(tmp_path) if "bad" in p]


def test_measure_speed_times_onnx_and_ct2_with_and_without_the_shortlist(words, tmp_path):
    # (the fast path, --fast: the lab's measure_speed, lab/tests/test_measure_lab.py)
    import json

    sl = tmp_path / "sl.txt"
    assert (
        _cli(BUILD, "--data", words["data"], "--k", "2", "--frequent", "1", "-o", sl).returncode
        == 0
    )
    out = tmp_path / "speed.json"
    proc = subprocess.run(
        [
            os.path.join(REPO_ROOT, "scripts", "measure_speed.sh"),
            "--data",
            words["data"],
            "--path",
            f"teacher={words['teacher']}",
            "--onnx",
            "--ct2",
            "--shortlist",
            str(sl),
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
        ],
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
        env=dict(os.environ, PYTHON=sys.executable, PYTHONWARNINGS="ignore"),
    )
    assert proc.returncode == 0, proc.stderr
    rows = {(r["engine"], r.get("shortlist")): r for r in json.loads(out.read_text())["models"]}
    assert set(rows) == {
        ("fairseq", None),
        ("onnxruntime", None),
        ("onnxruntime", str(sl)),
        ("ctranslate2", None),
        ("ctranslate2", str(sl)),
    }
    for r in rows.values():
        assert r["tokens_per_s"] > 0 and 0 <= r["bleu"] <= 100
    assert "onnxruntime+shortlist" in proc.stdout
    assert "ctranslate2+shortlist" in proc.stdout
    # CTranslate2 with its vocabulary map keeps to the same candidates: at most a beam's tie
    # apart from the other engines with the shortlist (BLEU on 4 sentences: a wide margin)
    assert 0 <= rows["ctranslate2", str(sl)]["bleu"] <= 100
    # --shortlist alone, or a missing file: one line before anything is measured
    for extra, message in (
        (["--shortlist", str(sl)], "--shortlist needs --onnx or --ct2"),
        (["--onnx", "--shortlist", str(tmp_path / "no")], "file not found"),
    ):
        proc = subprocess.run(
            [
                os.path.join(REPO_ROOT, "scripts", "measure_speed.sh"),
                "--data",
                words["data"],
                "--path",
                words["teacher"],
                *extra,
            ],
            capture_output=True,
            text=True,
            timeout=600,
            check=False,
            env=dict(os.environ, PYTHON=sys.executable, PYTHONWARNINGS="ignore"),
        )
        assert proc.returncode == 2 and proc.stderr.count("\n") == 1 and message in proc.stderr
