"""DA-WID's fused model on the deployment path: the ONNX export (per-layer widths, per-head
query/key and value widths zero-padded to the widest head, heads without query/key width that
attend uniformly, attention blocks pruned to their residual) gives fairseq's hypotheses and
scores, with and without the shortlist, and in int8; the PyTorch fast path does too.

Tiny models: a DA-WID student fused after random masks (test_wid's), and a fused model built
from hand-written shapes that hold every pruned case. No test asserts a timing.
"""

import argparse
import json
import os

import numpy as np
import pytest
import torch
from test_deploy import EOS_BIAS, _batches, _EosBias
from test_shortlist import _fairseq, _op_types, _same, _small_shortlist
from test_wid import VOCAB, _pruned_student

import lightcompress.plugin  # noqa: F401  (registers the plugin)


def _task():
    from lightcompress.build import dictionary_of_size

    d = dictionary_of_size(VOCAB)
    return argparse.Namespace(source_dictionary=d, target_dictionary=d)


def _fused_from_masks():
    from lightcompress.wid.fused_model import fuse_model

    targs, _, student = _pruned_student()
    fused, _, shapes = fuse_model(student, targs)
    return fused, shapes, targs


def _fused_from_shapes(targs, shapes):
    """A fused model of ``shapes`` with random weights (fairseq's initialization)."""
    from lightcompress.build import build_model_without_data
    from lightcompress.wid.fused_model import fused_args

    torch.manual_seed(3)
    return build_model_without_data(fused_args(targs, shapes), VOCAB, VOCAB).eval()


def _every_pruned_case(shapes):
    """``shapes`` with its decoder's attentions changed (the widths between blocks kept): layer
    0's self-attention has a head without query/key width, its cross-attention only such
    heads; layer 1's self-attention has no head and its FFN no hidden unit."""
    shapes = json.loads(json.dumps(shapes))
    self0, cross0, _ = shapes["decoder"]["layers"][0]
    self0.update(qk=[0, 3], v=[2, 4])
    cross0.update(qk=[0, 0], v=[3, 1])
    self1, cross1, ffn1 = shapes["decoder"]["layers"][1]
    self1.update(qk=[], v=[])
    cross1.update(qk=[2, 5], v=[5, 2])
    ffn1.update(ffn=0)
    return shapes


def _models():
    fused, shapes, targs = _fused_from_masks()
    return {"masks": fused, "pruned": _fused_from_shapes(targs, _every_pruned_case(shapes))}


def _with_eos_bias(model, d, scale):
    """The model with its output projection plus an EOS logit of ``scale`` logit spreads
    (hypotheses then end at different steps: finalization and batch shrinking get exercised)."""
    g = torch.Generator().manual_seed(1)
    src = torch.randint(4, VOCAB, (4, 6), generator=g)
    with torch.no_grad():
        spread = float(model(src, torch.full((4,), 6), src)[0].std())
    model.decoder.output_projection = _EosBias(
        model.decoder.output_projection, d.eos(), scale * spread
    )
    return model


def _sentences(d, n=6, seed=2):
    g = torch.Generator().manual_seed(seed)
    return [
        torch.cat([torch.randint(4, VOCAB, (int(k),), generator=g), torch.tensor([d.eos()])])
        for k in torch.randint(2, 9, (n,), generator=g)
    ]


@pytest.mark.parametrize("case", ["masks", "pruned"])
def test_onnx_export_of_a_fused_dawid_model_gives_fairseqs_hypotheses_and_scores(case, tmp_path):
    from lightcompress.deploy.onnx_export import export_onnx
    from lightcompress_runtime import OnnxGenerator

    task = _task()
    d = task.target_dictionary
    model = _models()[case]
    layers = model.decoder.layers
    if case == "pruned":  # (what the shapes hold: each case is exercised)
        assert layers[0].blocks[0].sub.qk == [0, 3] and layers[0].blocks[1].sub.q_proj is None
        assert layers[1].blocks[0].sub is None and layers[1].blocks[2].sub is None
    else:  # per-layer widths and per-head widths
        assert len({b.residual.out_features for layer in layers for b in layer.blocks}) > 1
    # (the random pruned model's logits spread less: a smaller EOS bias lets its hypotheses
    # end at different steps too)
    model = _with_eos_bias(model, d, EOS_BIAS if case == "masks" else 0.2)
    out = str(tmp_path / "onnx")
    config = export_onnx(model, task, out)  # (its own proof: fairseq's beam search, beam 2)
    assert config["architecture"] == "DAWIDFusedModel"
    # the encoder graph is the lean one (the heads' shapes computed once, not per reshape)
    import onnx

    from lightcompress.deploy.onnx_encoder import lean_encoder_error

    assert lean_encoder_error(model) is None
    nodes = onnx.load(os.path.join(out, "encoder.onnx"), load_external_data=False).graph.node
    assert sum(n.op_type == "Shape" for n in nodes) <= 2
    for spec, layer in zip(config["layers"], layers):  # the caches: [heads, widest head]
        a = layer.blocks[0].sub
        if a is None:
            assert spec["k_cache"] == spec["v_cache"] == [1, 1]
        else:
            assert spec["v_cache"] == [a.num_heads, max(a.v)]
            assert spec["k_cache"] == [a.num_heads, max(max(a.qk), 1)]
        assert spec["cross"] == (layer.blocks[1].sub is not None)
    sentences = _sentences(d)
    lengths = set()
    for beam in (1, 5):
        settings = {"beam_size": beam, "max_len_a": 1.0, "max_len_b": 3}
        ours = OnnxGenerator(out, **settings)
        for _idx, src, src_lengths in _batches(sentences, 3):  # padded batches that shrink
            got = ours.generate(src.numpy(), src_lengths.numpy())
            _same(got, _fairseq(model, d, src, src_lengths, **settings), 1e-4)
            lengths |= {len(h["tokens"]) for hyps in got for h in hyps}
    assert len(lengths) > 2  # hypotheses finished at different steps


def test_fused_dawid_shortlist_and_int8_exports_and_the_fast_path(tmp_path):
    """The shortlist export (the output rows gathered once per batch) gives the fast path's
    translations with the same shortlist and fairseq's without it; int8 of every map runs and
    records how many probe sentences it keeps; the fast path (the export's step, run eagerly)
    gives fairseq's hypotheses."""
    from lightcompress.deploy.generator import FastGenerator
    from lightcompress.deploy.onnx_export import export_onnx
    from lightcompress.deploy.shortlist import load_shortlist
    from lightcompress_runtime import OnnxGenerator

    task = _task()
    d = task.target_dictionary
    model = _models()["masks"]  # (its output projection: the shared table, a Linear)
    path = _small_shortlist(tmp_path / "sl.txt", task)
    sl = load_shortlist(path, task.source_dictionary, d)
    out = str(tmp_path / "sl")
    config = export_onnx(model, task, out, shortlist=path)
    assert config["shortlist_rows"] == "rows.onnx"
    sentences = _sentences(d, seed=4)
    settings = {"beam_size": 5, "max_len_a": 1.0, "max_len_b": 3}
    fast = FastGenerator(model, d, **settings)
    assert fast.lean, fast.why_not_lean  # (fused layers: the export's step)
    fast_sl = FastGenerator(model, d, shortlist=sl, **settings)
    short = OnnxGenerator(out, shortlist=True, **settings)
    full = OnnxGenerator(out, **settings)
    for _idx, src, src_lengths in _batches(sentences, 3):
        ref = _fairseq(model, d, src, src_lengths, **settings)
        _same(fast.generate(src, src_lengths), ref, 1e-4)
        _same(full.generate(src.numpy(), src_lengths.numpy()), ref, 1e-4)
        got = short.generate(src.numpy(), src_lengths.numpy())
        _same(got, fast_sl.generate(src, src_lengths), 1e-4)
        cands = set(sl.candidates(src.numpy()).tolist())
        assert all(set(map(int, h["tokens"])) <= cands for hyps in got for h in hyps)
    q = str(tmp_path / "int8")
    config = export_onnx(model, task, q, int8="all")
    assert config["int8"] == "all" and 0.0 <= config["int8_probe_agreement"] <= 1.0
    assert any("Integer" in t or "Quantize" in t for t in _op_types(q, "decoder"))
    hyps = OnnxGenerator(q, **settings).generate(
        *(t.numpy() for t in _batches(sentences, 3)[0][1:])
    )
    assert all(len(h) == 5 and np.isfinite([x["score"] for x in h]).all() for h in hyps)
