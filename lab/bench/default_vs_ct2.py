#!/usr/bin/env python3
"""The default compress student where the user measures it: against the teacher in CTranslate2
int8 (what a fairseq user deploys today), without and with a vocabulary map, at batch 1 and 32.

    python lab/bench/default_vs_ct2.py --teacher teacher.pt --student student.pt --data DATA_BIN \\
        --spm spm.model --shortlist shortlist.txt [--batch1-sentences 150] \\
        [--batch32-sentences 960] [--runs 3] --out lab/bench/results/default-vs-ct2.json

One ``measure_speed`` run per batch size times every engine interleaved (the best of
``--runs``): the teacher and the student in fairseq float32, their ONNX Runtime exports in
float32 and in int8 of every map (compress's default export), with and without the shortlist,
and CTranslate2 float32 / int8 of every model it can export (the teacher; a student whose
factors multiply out, as its dense equivalent), CTranslate2 with the shortlist as its vocabulary
map. The test split's sentences at their natural lengths (every k-th), one thread, beam 5,
outputs capped at 1.2 x source + 10 tokens. Then:

- the ratios of issue 55: ``b1``, ``b32`` (the default export, ONNX Runtime int8 + shortlist,
  over CTranslate2 int8 on the teacher without its vocabulary map), ``b1_vmap``, ``b32_vmap``
  (over CTranslate2 int8 with the same shortlist as its map: like for like), and
  ``size_vs_ct2_int8`` (the default export's model files: graphs and weights, over the
  teacher's CTranslate2 int8 ``model.bin``; the export's whole folder too);
- ``bleu_delta_vs_float32``: BLEU of the default export (int8 + shortlist) minus BLEU of the
  float32 export (no shortlist: fairseq's translations) on the whole test split;
- the arithmetic of one batch-1 decoder step (multiply-accumulates of its maps at beam 5,
  counted from the decoder graph's weights, the candidates' output rows and the attention at
  the mean output length) against the time per step, with this machine's single-thread
  float32 GEMM rate (a 512^3 product) as the yardstick, and the decoder graph's node count
  against the time ONNX Runtime takes per node of a graph that does nothing but run nodes.

Bad input: one line, exit status 2.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import platform
import subprocess
import sys
import tempfile
import time

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..")
sys.path.insert(0, ROOT)


class BenchError(ValueError):
    """Bad input (one line)."""


def _machine() -> str:
    name = platform.processor() or platform.machine()
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as f:
            for line in f:
                if line.startswith("model name"):
                    name = line.split(":", 1)[1].strip()
                    break
    except OSError:
        pass
    return f"{name} x{os.cpu_count()}"


def _commit() -> str:
    try:
        out = subprocess.run(
            ["git", "-C", ROOT, "rev-parse", "--short=12", "HEAD"],
            capture_output=True,
            text=True,
            check=True,
        )
        return out.stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return "unknown"


def measure(args, batch: int, sentences: int, out: str) -> dict:
    """One interleaved ``measure_speed`` run at ``batch``; its JSON."""
    cmd = [
        sys.executable,
        "-m",
        "lightcompress.measure.speed",
        "--path",
        f"teacher={args.teacher},student={args.student}",
        "--data",
        args.data,
        "--natural",
        "--num-sentences",
        str(sentences),
        "--timing-batch-size",
        str(batch),
        "--runs",
        str(args.runs),
        "--threads",
        "1",
        "--beam",
        "5",
        "--max-len-a",
        "1.2",
        "--max-len-b",
        "10",
        "--onnx",
        "--compare-int8",
        "--ct2",
        "--shortlist",
        args.shortlist,
        "--quiet",
        "--json",
        out,
    ]
    env = dict(os.environ, OMP_NUM_THREADS="1", MKL_NUM_THREADS="1", PYTHONWARNINGS="ignore")
    proc = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, check=False)
    if proc.returncode != 0:
        last = (proc.stderr.strip().splitlines() or [f"exit {proc.returncode}"])[-1]
        raise BenchError(f"measure_speed at batch {batch} failed: {last}")
    with open(out, encoding="utf-8") as f:
        return json.load(f)


def rows_of(doc: dict) -> dict:
    """``(label, engine, precision) -> record``, shortlist rows as engine ``...+shortlist``."""
    from lightcompress.compress.report import read_speed

    with tempfile.NamedTemporaryFile("w", suffix=".json", delete=False) as f:
        json.dump(doc, f)
    try:
        return read_speed(f.name)
    finally:
        os.remove(f.name)


def ratios(speeds: dict) -> dict:
    """The issue's ratios of the default export over CTranslate2 int8 on the teacher, and every
    row's tokens/s, per batch size."""
    from lightcompress.compress.report import best_rate

    out: dict = {"tokens_per_s": {}}
    for batch, rows in speeds.items():
        rates = {
            f"{lab} {eng} {prec}": round(best_rate(r), 1)
            for (lab, eng, prec), r in sorted(rows.items())
            if best_rate(r)
        }
        out["tokens_per_s"][f"b{batch}"] = rates
        mine = best_rate(rows.get(("student", "onnxruntime+shortlist", "int8"), {}))
        for key, eng in ((f"b{batch}", "ctranslate2"), (f"b{batch}_vmap", "ctranslate2+shortlist")):
            theirs = best_rate(rows.get(("teacher", eng, "int8"), {}))
            if mine and theirs:
                out[key] = round(mine / theirs, 3)
        dense = best_rate(rows.get(("student", "ctranslate2+shortlist", "int8"), {}))
        theirs = best_rate(rows.get(("teacher", "ctranslate2+shortlist", "int8"), {}))
        if dense and theirs:  # the student's shape, densified, on CTranslate2 (like for like)
            out[f"b{batch}_student_dense_ct2_vmap"] = round(dense / theirs, 3)
    return out


def export(args, work: str) -> tuple[str, str, str]:
    """The student's default export (int8 of every map + the shortlist), its float32 export (no
    shortlist: fairseq's translations) and the teacher's CTranslate2 int8 model."""
    from lightcompress.deploy import ct2, onnx_export

    default, f32, teacher_ct2 = (os.path.join(work, n) for n in ("default", "f32", "teacher-ct2"))
    common = ["--path", args.student, "--data", args.data, "--spm", args.spm]
    if onnx_export.main([*common, "-o", default, "--int8", "all", "--shortlist", args.shortlist]):
        raise BenchError("the default export failed")
    if onnx_export.main([*common, "-o", f32]):
        raise BenchError("the float32 export failed")
    if ct2.main(
        ["--path", args.teacher, "--data", args.data, "-o", teacher_ct2, "--quantization", "int8"]
    ):
        raise BenchError("the teacher's CTranslate2 export failed")
    return default, f32, teacher_ct2


def model_bytes(folder: str) -> int:
    """An export's model files: its graphs and weights (not the tokenizer, dictionaries,
    shortlist or the runtime's sources)."""
    return sum(
        os.path.getsize(os.path.join(folder, n))
        for n in os.listdir(folder)
        if n.endswith((".onnx", ".bin"))
    )


def dir_bytes(folder: str) -> int:
    return sum(os.path.getsize(os.path.join(d, n)) for d, _, ns in os.walk(folder) for n in ns)


def bleu_delta(args, default: str, f32: str) -> dict:
    """BLEU of both exports on the whole test split (sacreBLEU on the raw references when
    ``--ref`` is given, else the data's post-processed targets)."""
    from lightcompress.compress.int8 import translate_split
    from lightcompress.compress.report import score

    out = {}
    for name, folder, shortlist in (("default", default, True), ("float32", f32, False)):
        rows = translate_split(
            folder,
            args.data,
            args.source_lang,
            args.target_lang,
            "test",
            beam=5,
            max_len_a=1.2,
            max_len_b=10,
            batch_size=64,
            post_process="sentencepiece",
            shortlist=shortlist,
        )
        hyps = [h for _, _, _, h in rows]
        refs = [r for _, r, _, _ in rows]
        if args.ref:
            with open(args.ref, encoding="utf-8") as f:
                refs = [line.rstrip("\n") for line in f]
        out[name] = score(hyps, refs)
    out["bleu_delta_vs_float32"] = round(out["default"]["bleu"] - out["float32"]["bleu"], 2)
    return out


def step_arithmetic(default: str, mean_steps: float, mean_src: float, beam: int = 5) -> dict:
    """Multiply-accumulates of one decoder step at batch 1 (``beam`` hypotheses): every product
    with a constant weight (its rows x columns per hypothesis), the candidates' output rows
    (``C`` x their width), and the attention over ``mean_steps`` past tokens and ``mean_src``
    source tokens (scores and weighted sums, per head)."""
    import onnx

    g = onnx.load(os.path.join(default, "decoder.onnx"), load_external_data=False).graph
    shapes = {i.name: list(i.dims) for i in g.initializer}
    macs = 0
    for n in g.node:
        if n.op_type in ("MatMul", "Gemm", "MatMulInteger", "DynamicQuantizeMatMul"):
            w = shapes.get(n.input[1])
            if w and len(w) == 2:
                macs += w[0] * w[1]
    with open(os.path.join(default, "config.json"), encoding="utf-8") as f:
        config = json.load(f)
    width = 0
    for i in g.initializer:  # (the tied table's factor: the output rows' width)
        if len(i.dims) == 2 and i.dims[0] == config["vocab_size"]:
            width = int(i.dims[1])
    cands = _mean_candidates(default)
    attn = 0
    for layer in config["layers"]:
        heads = layer["heads"]
        kdim = layer.get("k_cache", [heads, layer["head_dim"]])
        attn += 2 * heads * mean_steps * kdim[1]  # (self: scores and sum, in the cache's width)
        attn += 2 * heads * mean_src * layer["head_dim"]  # (cross)
    per_hyp = macs + cands * width + attn
    return {
        "macs_per_step": int(per_hyp * beam),
        "weights_macs_per_hypothesis": macs,
        "mean_candidates": round(cands, 1),
        "output_row_width": width,
        "graph_nodes": _optimized_nodes(os.path.join(default, "decoder.onnx")),
    }


def _mean_candidates(export: str) -> float:
    """The shortlist's candidates per test-length sentence: read from the runtime at startup
    of a real batch is costly to replicate here, so the mean over 50 test sentences."""
    import numpy as np

    from lightcompress_runtime import OnnxStep

    step = OnnxStep(export, threads=1, shortlist=True)
    rng = np.random.default_rng(0)
    sizes = []
    for _ in range(50):
        src = rng.integers(4, step.vocab_size, size=(1, 12))
        sizes.append(len(step.shortlist.candidates(src, 10)))
    return float(np.mean(sizes))


def _optimized_nodes(path: str) -> int:
    """Nodes of the graph after ONNX Runtime's optimizations (what runs per step)."""
    import onnx
    import onnxruntime as ort

    with tempfile.TemporaryDirectory() as tmp:
        so = ort.SessionOptions()
        so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
        so.log_severity_level = 3
        so.optimized_model_filepath = os.path.join(tmp, "opt.onnx")
        ort.InferenceSession(path, so, providers=["CPUExecutionProvider"])
        return len(onnx.load(so.optimized_model_filepath, load_external_data=False).graph.node)


def machine_rates() -> dict:
    """This machine's single-thread float32 GEMM rate (multiply-accumulates per second, a
    512^3 numpy product, best of 5) and ONNX Runtime's cost per node (a graph of 52 Adds of a
    [5 x 256] tensor, best of 5 x 500 runs, less a graph of one)."""
    import numpy as np
    import onnxruntime as ort
    from onnx import TensorProto, helper

    a = np.random.default_rng(0).standard_normal((512, 512), dtype=np.float32)
    best = 1e9
    for _ in range(5):
        t0 = time.perf_counter()
        a @ a
        best = min(best, time.perf_counter() - t0)
    gemm = 512**3 / best

    def chain(n):
        nodes = [
            helper.make_node("Add", ["x" if i == 0 else f"a{i - 1}", "x"], [f"a{i}"])
            for i in range(n)
        ]
        vi = helper.make_tensor_value_info
        g = helper.make_graph(
            nodes,
            "g",
            [vi("x", TensorProto.FLOAT, [5, 256])],
            [vi(f"a{n - 1}", TensorProto.FLOAT, [5, 256])],
        )
        so = ort.SessionOptions()
        so.intra_op_num_threads = 1
        so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
        model = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
        s = ort.InferenceSession(model.SerializeToString(), so, providers=["CPUExecutionProvider"])
        x = np.ones((5, 256), dtype=np.float32)
        out = f"a{n - 1}"
        times = []
        for _ in range(5):
            t0 = time.perf_counter()
            for _ in range(500):
                s.run([out], {"x": x})
            times.append((time.perf_counter() - t0) / 500)
        return min(times)

    per_node = (chain(52) - chain(1)) / 51
    return {"gemm_macs_per_s": gemm, "ort_seconds_per_node": per_node}


def get_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--teacher", required=True, help="the teacher's fairseq checkpoint")
    p.add_argument("--student", required=True, help="the default compress student's checkpoint")
    p.add_argument("--data", required=True, help="the data-bin (its test split is timed)")
    p.add_argument("-s", "--source-lang", default="de")
    p.add_argument("-t", "--target-lang", default="en")
    p.add_argument("--spm", required=True, help="the data's sentencepiece model")
    p.add_argument(
        "--shortlist", required=True, help="lightcompress-shortlist of the training split"
    )
    p.add_argument("--ref", help="raw references of the test split (default: the data's targets)")
    p.add_argument("--batch1-sentences", type=int, default=150)
    p.add_argument("--batch32-sentences", type=int, default=960)
    p.add_argument("--runs", type=int, default=3)
    p.add_argument("--work", help="keep the exports and measure_speed's JSON here")
    p.add_argument("--out", required=True, help="the JSON written")
    return p


def main(argv=None) -> int:
    args = get_parser().parse_args(argv)
    try:
        for name in ("teacher", "student", "spm", "shortlist"):
            if not os.path.isfile(getattr(args, name)):
                raise BenchError(f"--{name} {getattr(args, name)} not found")
        if not os.path.isdir(args.data):
            raise BenchError(f"--data {args.data} is not a directory")
        work = args.work or tempfile.mkdtemp(prefix="default-vs-ct2.")
        os.makedirs(work, exist_ok=True)
        started = datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds")
        default, f32, teacher_ct2 = export(args, work)
        docs = {
            b: measure(args, b, n, os.path.join(work, f"speed-b{b}.json"))
            for b, n in ((1, args.batch1_sentences), (32, args.batch32_sentences))
        }
        speeds = {b: rows_of(d) for b, d in docs.items()}
        result = {
            "machine": _machine(),
            "commit": _commit(),
            "date": started,
            "protocol": {
                "threads": 1,
                "beam": 5,
                "max_len": "1.2 x source + 10",
                "sentences": {"b1": args.batch1_sentences, "b32": args.batch32_sentences},
                "runs": args.runs,
                "lengths": "natural (every k-th test sentence)",
            },
        }
        result.update(ratios(speeds))
        ct2_bin = os.path.join(teacher_ct2, "model.bin")
        result["student_export_model_bytes"] = model_bytes(default)
        result["student_export_dir_bytes"] = dir_bytes(default)
        result["teacher_ct2_int8_model_bin_bytes"] = os.path.getsize(ct2_bin)
        result["size_vs_ct2_int8"] = round(model_bytes(default) / os.path.getsize(ct2_bin), 3)
        result.update(bleu_delta(args, default, f32))
        rec = speeds[1].get(("student", "onnxruntime+shortlist", "int8"), {})
        steps = rec.get("tokens_per_run")
        mean_out = steps / args.batch1_sentences if steps else 20.0
        arith = step_arithmetic(default, mean_out / 2, 12.0)
        rates = machine_rates()
        result["arithmetic"] = {**arith, **{k: float(f"{v:.4g}") for k, v in rates.items()}}
        from lightcompress.compress.report import best_rate

        tps = best_rate(rec)
        if tps:
            per_token = 1 / tps  # (batch 1: one step per output token of the sentence)
            floor = arith["macs_per_step"] / rates["gemm_macs_per_s"]
            result["arithmetic"].update(
                seconds_per_token_b1=float(f"{per_token:.4g}"),
                arithmetic_seconds_per_step=float(f"{floor:.4g}"),
                time_over_arithmetic=round(per_token / floor, 2),
                node_floor_seconds_per_step=float(
                    f"{arith['graph_nodes'] * rates['ort_seconds_per_node']:.4g}"
                ),
            )
    except BenchError as exc:
        print(f"default_vs_ct2.py: error: {exc}", file=sys.stderr)
        return 2
    os.makedirs(os.path.dirname(os.path.abspath(args.out)), exist_ok=True)
    with open(args.out, "w", encoding="utf-8") as f:
        json.dump(result, f, indent=1)
        f.write("\n")
    print(json.dumps({k: v for k, v in result.items() if k != "tokens_per_s"}, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
