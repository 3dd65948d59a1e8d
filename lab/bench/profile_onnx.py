#!/usr/bin/env python3
"""Where the time of an ONNX export's translation goes: the share of the encoder graph, of the
decoder graph and of the numpy beam search around them, and, from ONNX Runtime's own profiler,
the decoder graph's kernels by operator type and its most expensive nodes.

    python lab/bench/profile_onnx.py model-onnx --input test.de --batch-size 32 \
        --num-sentences 640 [--shortlist] [--json profile.json]

Lines of ``--input`` are raw text (the export's sentencepiece model encodes them; without one,
space-separated pieces); every k-th line is taken (k = lines // ``--num-sentences``), at its own
length. One thread, beam 5 and fairseq's length rules as set. The wall-time shares come from a
run without the profiler (best of ``--runs``); the kernel shares from a second run with it
(the profiler adds its own cost to every node: its times are larger than the run's, so they
are given as shares of the kernels' total and per step). Bad input: one line, exit status 2.
"""

from __future__ import annotations

import argparse
import collections
import json
import os
import sys
import tempfile
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", ".."))

import lightcompress_runtime as runtime
from lightcompress_runtime import onnx_step


class ProfileError(ValueError):
    """Bad input (one line)."""


def sample_lines(path: str, n: int) -> list[str]:
    """Every k-th non-blank line of ``path`` (k = lines // ``n``), at most ``n`` (also
    ``compare_exports.py``'s sentences)."""
    try:
        with open(path, encoding="utf-8") as f:
            lines = [line.rstrip("\n") for line in f if line.strip()]
    except OSError as exc:
        raise ProfileError(f"cannot read --input {path}: {exc.strerror}") from None
    except UnicodeDecodeError:
        raise ProfileError(f"--input {path} is not UTF-8 text") from None
    if not lines:
        raise ProfileError(f"--input {path} has no sentences")
    return lines[:: max(1, len(lines) // n)][:n]


def _translator(args, profile_dir: str | None):
    """An OnnxTranslator, its decoder session profiled into ``profile_dir`` when given."""
    if profile_dir is None:
        return runtime.OnnxTranslator(args.model_dir, **_settings(args))
    import onnxruntime as ort

    plain = onnx_step.session

    def session(path, threads):
        if os.path.basename(path) != "decoder.onnx":
            return plain(path, threads)
        so = ort.SessionOptions()
        so.intra_op_num_threads, so.inter_op_num_threads = threads, 1
        so.execution_mode = ort.ExecutionMode.ORT_SEQUENTIAL
        so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
        so.log_severity_level = 3
        so.enable_profiling = True
        so.profile_file_prefix = os.path.join(profile_dir, "decoder")
        return ort.InferenceSession(path, so, providers=["CPUExecutionProvider"])

    onnx_step.session = session  # (the sessions OnnxGenerator opens)
    try:
        return runtime.OnnxTranslator(args.model_dir, **_settings(args))
    finally:
        onnx_step.session = plain


def _settings(args) -> dict:
    return {
        "beam": args.beam,
        "batch_size": args.batch_size,
        "threads": 1,
        "max_len_a": args.max_len_a,
        "max_len_b": args.max_len_b,
        "shortlist": args.shortlist,
        "tokenized": args.tokenized,
    }


def wall_shares(translator, sentences, runs: int) -> dict:
    """Best of ``runs``: seconds, tokens, steps, and the encoder / decoder / beam-search shares."""
    gen = translator.generator.step  # (the ONNX step: its sessions and decoder call)
    spent = {"encoder": 0.0, "decoder": 0.0, "steps": 0}
    enc_run, dec_run = gen.encoder.run, gen._run_decoder

    def encoder(*a, **kw):
        t = time.perf_counter()
        out = enc_run(*a, **kw)
        spent["encoder"] += time.perf_counter() - t
        return out

    def decoder(feed):
        t = time.perf_counter()
        out = dec_run(feed)
        spent["decoder"] += time.perf_counter() - t
        spent["steps"] += 1
        return out

    gen.encoder.run, gen._run_decoder = encoder, decoder
    translator.translate_ids(sentences[:4])  # (warm-up)
    best = None
    for _ in range(runs):
        spent.update(encoder=0.0, decoder=0.0, steps=0)
        t = time.perf_counter()
        out = translator.translate_ids(sentences)
        seconds = time.perf_counter() - t
        if best is None or seconds < best["seconds"]:
            best = {"seconds": seconds, **spent}
    tokens = sum(len(o) for o in out)
    s = best["seconds"]
    return {
        "seconds": s,
        "tokens": tokens,
        "tokens_per_s": tokens / s,
        "steps": best["steps"],
        "ms_per_step": 1e3 * best["decoder"] / max(1, best["steps"]),
        "share": {
            "encoder": best["encoder"] / s,
            "decoder": best["decoder"] / s,
            "beam_search": 1 - (best["encoder"] + best["decoder"]) / s,
        },
    }


def kernel_profile(translator, sentences, top: int) -> dict:
    """Translate once with the decoder's profiler on: kernel time by operator and by node."""
    gen = translator.generator.step  # (the ONNX step: its sessions and decoder call)
    # (the session's public run: the profiler records each call)
    gen._run_decoder = lambda feed: gen.decoder.run(gen._dec_outputs, feed)
    translator.translate_ids(sentences)
    path = gen.decoder.end_profiling()
    with open(path, encoding="utf-8") as f:
        events = json.load(f)
    by_op, by_node, ops = collections.Counter(), collections.Counter(), {}
    steps = sum(1 for e in events if e.get("name") == "model_run")
    for e in events:
        if e.get("cat") == "Node" and e.get("name", "").endswith("_kernel_time"):
            node = e["name"][: -len("_kernel_time")]
            by_op[e["args"]["op_name"]] += e["dur"]
            by_node[node] += e["dur"]
            ops[node] = e["args"]["op_name"]
    total = sum(by_op.values()) or 1
    return {
        "steps": steps,
        "nodes_run": len(by_node),
        "by_op": [
            {"op": op, "share": d / total, "us_per_step": d / max(1, steps)}
            for op, d in by_op.most_common()
        ],
        "top_nodes": [
            {"node": n, "op": ops[n], "share": d / total, "us_per_step": d / max(1, steps)}
            for n, d in by_node.most_common(top)
        ],
    }


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("model_dir", help="a lightcompress-export-onnx export")
    p.add_argument("--input", required=True, help="raw source text, one sentence per line")
    p.add_argument("--num-sentences", type=int, default=150)
    p.add_argument("--batch-size", type=int, default=1)
    p.add_argument("--beam", type=int, default=5)
    p.add_argument("--max-len-a", type=float, default=1.2)
    p.add_argument("--max-len-b", type=int, default=10)
    p.add_argument("--runs", type=int, default=3, help="timed runs, the best kept (default 3)")
    p.add_argument("--top", type=int, default=12, help="nodes listed (default 12)")
    p.add_argument("--shortlist", action="store_true", help="score the export's shortlist only")
    p.add_argument(
        "--tokenized",
        action="store_true",
        help="--input is the data's subword tokens (space-separated)",
    )
    p.add_argument("--json", help="also write the figures to this file")
    args = p.parse_args(argv)
    prog = "profile_onnx.py"
    try:
        for name in ("num_sentences", "batch_size", "beam", "runs"):
            if getattr(args, name) < 1:
                raise ProfileError(f"--{name.replace('_', '-')} must be >= 1")
        lines = sample_lines(args.input, args.num_sentences)
        translator = _translator(args, None)
        sentences = [translator.encode(line) for line in lines]
        wall = wall_shares(translator, sentences, args.runs)
        with tempfile.TemporaryDirectory(prefix="profile_onnx.") as tmp:
            kernels = kernel_profile(_translator(args, tmp), sentences, args.top)
    except (ProfileError, runtime.OnnxError) as exc:
        print(f"{prog}: error: {exc}", file=sys.stderr)
        return 2
    sh = wall["share"]
    print(
        f"{args.model_dir}: {len(sentences)} sentences, batch {args.batch_size}, beam "
        f"{args.beam}, 1 thread{', shortlist' if args.shortlist else ''}: "
        f"{wall['tokens_per_s']:.0f} tokens/s, {wall['steps']} decoder steps, "
        f"{wall['ms_per_step']:.3f} ms per step"
    )
    print(
        f"wall time: encoder {sh['encoder']:.0%}, decoder graph {sh['decoder']:.0%}, "
        f"beam search (numpy) {sh['beam_search']:.0%}"
    )
    print(
        f"decoder kernels ({kernels['nodes_run']} nodes run per step; profiler times, "
        "shares of their total):"
    )
    for row in kernels["by_op"][:10]:
        print(f"  {row['op']:<24} {row['share']:6.1%} {row['us_per_step']:9.1f} us/step")
    print("most expensive nodes:")
    for row in kernels["top_nodes"]:
        print(f"  {row['node'][:48]:<48} {row['op']:<18} {row['share']:6.1%}")
    if args.json:
        with open(args.json, "w", encoding="utf-8") as f:
            json.dump(
                {
                    "model_dir": args.model_dir,
                    "batch_size": args.batch_size,
                    "num_sentences": len(sentences),
                    "wall": wall,
                    "kernels": kernels,
                },
                f,
                indent=1,
            )
    return 0


if __name__ == "__main__":
    sys.exit(main())
