"""Tracing an export's graphs (for :mod:`lightcompress.deploy.onnx_export`): the encoder, the
decoder step and, with a float output layer's shortlist rows, ``rows.onnx``, traced into
``*.raw.onnx`` files on a probe batch, and the probe (its inputs, names, dynamic axes and the
model's outputs on it) that the exported graphs are checked with."""

from __future__ import annotations

import os
from typing import NamedTuple

import torch

from lightcompress.deploy.onnx_encoder import encoder_module, probe_batch
from lightcompress.deploy.onnx_graphs import (
    DecoderStep,
    OutputRows,
    positions_in_graph,
    sinusoid_rows,
    tied_htt,
)
from lightcompress.deploy.onnx_tools import trace_module
from lightcompress.deploy.tt_graph import tt_in_graph

__all__: list[str] = []


def _names(layers: list):
    """The decoder graph's cache inputs (after ``enc_bias``) and outputs, in the step's order;
    a layer without cross-attention (Subformer's SAFE block) has no ``cross_*``."""
    cache_in = ["enc_bias"]
    cache_out = []
    for i, spec in enumerate(layers):
        cache_in += [f"past_k{i}", f"past_v{i}"]
        if spec["cross"]:
            cache_in += [f"cross_k{i}", f"cross_v{i}"]
        if spec.get("cross_factors"):  # (the per-head mask and query-bias scores)
            cache_in.append(f"cross_b{i}")
        cache_out += [f"new_k{i}", f"new_v{i}"]
    return cache_in, cache_out


class _Probe(NamedTuple):
    """The probe the graphs were traced on and are checked with: the decoder's feed (input
    name -> tensor), the step's outputs on it, the source batch and the encoder's outputs."""

    feed: dict
    ref: tuple
    src: torch.Tensor
    cross: tuple


def _trace_graphs(model, task, config: dict, tmp: str, shortlist: bool, split) -> _Probe:
    """Trace the encoder, the decoder step (and with ``split``, a float output layer's rows,
    ``rows.onnx``) into ``tmp`` (``*.raw.onnx``) on a probe batch; returns the probe."""
    tgt_dict = task.target_dictionary
    rows_graph = split is not None
    layers = config["layers"]
    src = probe_batch(task.source_dictionary)
    cache_in, cache_out = _names(layers)
    enc_out = ["enc_bias"] + [n for n in cache_in if n.startswith("cross_")]
    enc_axes = {"src_tokens": {0: "B", 1: "S"}}
    enc_axes.update(
        {n: {0: "B", 3 if n == "enc_bias" or n.startswith("cross_b") else 2: "S"} for n in enc_out}
    )
    with torch.no_grad(), positions_in_graph(model), tt_in_graph(model):
        # (eval wrappers: the exporter puts a module back into its own mode afterwards,
        # and a new module is in training mode, which would switch dropout on)
        encoder = encoder_module(model, src)  # (lean where it is the model's encoder)
        trace_module(
            encoder,
            (src,),
            os.path.join(tmp, "encoder.raw.onnx"),
            ["src_tokens"],
            enc_out,
            enc_axes,
        )
        cross = encoder(src)
        # (a tied HTT table: rows.onnx also gives each id's place among the candidates, the
        # step's input rows; DecoderStep)
        places = len(tgt_dict) if rows_graph and tied_htt(model.decoder) else 0
        rows_module = OutputRows(model, split[0], places).eval() if rows_graph else None
        n_rows = len(split[0](torch.zeros(1, dtype=torch.long))) if rows_graph else 0
        n_rows += 1 if places else 0
        step = DecoderStep(
            model, shortlist=shortlist, rows=n_rows, score=split[1] if rows_graph else None
        ).eval()
        args, arg_names, dec_axes = _decoder_probe(step, config, tgt_dict, cross, cache_in)
        for name in cache_out:
            dec_axes[name] = {0: "N", 2: "t1"}
        if shortlist:  # every other id (and the special symbols) as candidates
            args, arg_names = _shortlist_probe(args, arg_names, dec_axes, config, tgt_dict)
            if rows_module is not None:  # rows.onnx: cands -> rows (the step's inputs)
                cands = args[arg_names.index("cands")]
                rows = tuple(rows_module(cands))
                row_names = [f"rows{i}" for i in range(n_rows)]
                # (the rows of the candidates: [C x ...]; the places: [V])
                row_axes = {r: {0: "C"} for r in row_names[: n_rows - (1 if places else 0)]}
                trace_module(
                    rows_module,
                    (cands,),
                    os.path.join(tmp, "rows.raw.onnx"),
                    ["cands"],
                    row_names,
                    {"cands": {0: "C"}, **row_axes},
                )
                config["shortlist_rows_outputs"] = row_names
                at = arg_names.index("bias")  # (the step takes the candidates' bias)
                args = (*args[:at], args[at].index_select(0, cands), cands, *rows, *args[at + 2 :])
                arg_names = [*arg_names[: at + 2], *row_names, *arg_names[at + 2 :]]
                dec_axes["bias"] = {0: "C"}
                dec_axes.update(row_axes)
        out_names = ["top_lp", "top_ids"] + cache_out
        trace_module(
            step, args, os.path.join(tmp, "decoder.raw.onnx"), arg_names, out_names, dec_axes
        )
        ref = step(*args)
    return _Probe(dict(zip(arg_names, args)), ref, src, cross)


def _decoder_probe(step, config: dict, tgt_dict, cross, cache_in: list):
    """The decoder step's probe inputs (two sentences, two hypotheses each), their names and
    dynamic axes."""
    n = 4
    caches = [cross[0]]  # (the encoder's outputs: once per sentence)
    kv = iter(cross[1:])
    for i, spec in enumerate(config["layers"]):
        h, d = spec["heads"], spec["head_dim"]
        g = torch.Generator().manual_seed(i)
        for c in ("k_cache", "v_cache"):  # ([heads, width] per hypothesis)
            heads, width = spec.get(c, (h, d))
            caches.append(torch.randn(n, heads, 3, width, generator=g))
        if spec["cross"]:
            caches += [next(kv) for _ in range(3 if spec.get("cross_factors") else 2)]
    prev = torch.randint(4, len(tgt_dict), (n,))
    pos = torch.tensor([config["position_offset"] + 4])
    pos_name = "pos"
    if step.position_kind == "sinusoidal":  # (the runtime feeds the row: 6 fewer nodes)
        pos = sinusoid_rows(pos, config["position_dim"])
        pos_name = "pos_emb"
    order = torch.tensor([1, 0, 3, 2])
    bias = torch.zeros(len(tgt_dict))
    bias[tgt_dict.pad()] = float("-inf")
    dec_axes = {
        "prev": {0: "N"},
        "order": {0: "N"},
        "enc_bias": {0: "B", 3: "S"},
        "top_lp": {0: "N"},
        "top_ids": {0: "N"},
    }
    for name in cache_in[1:]:
        if name.startswith("cross_b"):  # (a mask: [B x H x 1 x S])
            dec_axes[name] = {0: "B", 3: "S"}
        else:
            cross_name = name.startswith("cross_")
            dec_axes[name] = {0: "B" if cross_name else "N", 2: "S" if cross_name else "t"}
    return (
        (prev, pos, order, bias, *caches),
        ["prev", pos_name, "order", "bias"] + cache_in,
        dec_axes,
    )


def _shortlist_probe(args: tuple, arg_names: list, dec_axes: dict, config: dict, tgt_dict):
    """The probe with candidate ids ``cands`` after ``bias``: every other id and the special
    symbols, the previous tokens among them (as in a translation: a step whose input rows are
    the candidates' rows needs it)."""
    ids = torch.arange(len(tgt_dict))
    cands = ids[(ids % 2 == 0) | (ids <= max(config[k] for k in ("pad", "eos", "unk")))]
    n = len(args[0])
    prev = cands[torch.randint(4, len(cands), (n,), generator=torch.Generator().manual_seed(0))]
    at = arg_names.index("bias") + 1
    dec_axes["cands"] = {0: "C"}
    return (prev, *args[1:at], cands, *args[at:]), [*arg_names[:at], "cands", *arg_names[at:]]
