"""The ONNX files of an export (:mod:`lightcompress.deploy.onnx_export`): tracing, the top-k
size as a graph input, shape-neutral reshapes removed, weights shared in one external file,
ONNX Runtime's dynamic int8, the manifest, and the check of the graphs against the model.
"""

from __future__ import annotations

import hashlib
import os
import shutil

import torch

from lightcompress.deploy.onnx_graphs import K_PLACEHOLDER, ExportError, max_abs_error
from lightcompress.deploy.tt_graph import TT_MATRIX

__all__ = ["MANIFEST", "WEIGHTS"]

MANIFEST = "MANIFEST.sha256"  # (the same name as lightcompress_runtime.MANIFEST)
WEIGHTS = "weights.bin"
RUNTIME = "runtime"  # (the package lightcompress_runtime, as an export carries it)
LAUNCHER = "translate.py"

# the export's translate.py: runs the package beside it (also when a program loads this file by
# its path: the folder goes first on sys.path, so the export's own copy is the one imported)
_LAUNCHER_TEXT = '''#!/usr/bin/env python3
"""Translate with the model in this folder: ``python translate.py DIR [--beam 5 ...] < in > out``
(``--help``: the options). The code is the package ``runtime/`` beside this file (numpy and
onnxruntime; sentencepiece or sacremoses + subword-nmt for raw text): lightcompress_runtime,
export format version {version}."""

import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
try:
    from runtime import OnnxError, OnnxGenerator, OnnxTranslator, main
except ImportError as exc:
    if __name__ != "__main__":
        raise
    if exc.name in ("numpy", "onnxruntime"):
        why = f"it needs numpy and onnxruntime (pip install numpy onnxruntime): {{exc}}"
    else:
        why = f"runtime/ beside it does not load ({{exc}}): an incomplete export, export it again"
    print(f"{{os.path.basename(sys.argv[0])}}: error: {{why}}", file=sys.stderr)
    sys.exit(2)

__all__ = ["OnnxError", "OnnxGenerator", "OnnxTranslator", "main"]

if __name__ == "__main__":
    sys.exit(main())
'''


def trace_module(module, args, path, input_names, output_names, dynamic_axes) -> None:
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # tracer warnings about Python values (checked below)
        torch.onnx.export(
            module,
            args,
            path,
            input_names=input_names,
            output_names=output_names,
            dynamic_axes=dynamic_axes,
            opset_version=17,
            dynamo=False,
            do_constant_folding=False,
        )


def k_as_input(model_proto) -> None:
    """The traced ``TopK`` has a constant ``k``: make it the graph input ``k`` ([1] int64)."""
    import onnx
    from onnx import TensorProto, helper

    g = model_proto.graph
    topk = [n for n in g.node if n.op_type == "TopK"]
    if len(topk) != 1:
        raise ExportError(f"the decoder graph has {len(topk)} TopK nodes, expected 1")
    topk[0].input[1] = "k"
    g.input.append(helper.make_tensor_value_info("k", TensorProto.INT64, [1]))
    for out in g.output:  # [N x k]: k is now an input
        if out.name in ("top_lp", "top_ids"):
            dim = out.type.tensor_type.shape.dim[1]
            dim.ClearField("dim_value")
            dim.dim_param = "K"
    onnx.checker.check_model(model_proto)


def simplify_graph(model_proto) -> None:
    """Remove the reshapes that do not change a shape, and what only computed their target
    shapes (the modules' ``x.view(*lead, out)`` on inputs that already have that shape: one
    third of a factorized decoder step's nodes), by ONNX Runtime's symbolic shape inference."""
    from onnxruntime.tools.symbolic_shape_infer import SymbolicShapeInference

    g = model_proto.graph
    try:
        inferred = SymbolicShapeInference.infer_shapes(model_proto, auto_merge=True)
    except Exception:  # noqa: BLE001  (an optimization: without shapes, the graph stays as is)
        return
    shapes: dict = {}
    for vi in list(inferred.graph.value_info) + list(inferred.graph.input):
        t = vi.type.tensor_type
        if t.HasField("shape"):
            shapes[vi.name] = [
                d.dim_param
                if d.HasField("dim_param")
                else (d.dim_value if d.HasField("dim_value") else None)
                for d in t.shape.dim
            ]
    outputs = {o.name for o in g.output}
    rename: dict = {}
    keep = []
    for n in g.node:
        for i, name in enumerate(n.input):
            if name in rename:
                n.input[i] = rename[name]
        if n.op_type == "Reshape" and n.output[0] not in outputs:
            a, b = shapes.get(n.input[0]), shapes.get(n.output[0])
            if a is not None and a == b and None not in a and "" not in a:
                rename[n.output[0]] = n.input[0]
                continue
        keep.append(n)
    # dead nodes (the shape computations of the removed reshapes), iterated to a fixed point
    while True:
        used = outputs | {i for n in keep for i in n.input}
        alive = [n for n in keep if any(o in used for o in n.output)]
        if len(alive) == len(keep):
            break
        keep = alive
    _set_nodes(g, keep)


def _set_nodes(g, nodes) -> None:
    """Make ``nodes`` the graph's nodes and drop the initializers no node reads any more."""
    del g.node[:]
    g.node.extend(nodes)
    used = {i for n in nodes for i in n.input} | {i.name for i in g.input}
    inits = [i for i in g.initializer if i.name in used]
    del g.initializer[:]
    g.initializer.extend(inits)


def share_weights(protos: dict, out_dir: str) -> None:
    """Every initializer of the graphs (but constants under 4 KiB) into one ``weights.bin``
    (equal tensors once; ONNX external data)."""
    from onnx import numpy_helper

    offsets: dict = {}
    size = 0
    with open(os.path.join(out_dir, WEIGHTS), "wb") as f:
        for proto in protos.values():
            for init in proto.graph.initializer:
                array = numpy_helper.to_array(init)
                raw = array.tobytes()
                if len(raw) < 4096:  # small constants (shapes, axes) stay in the graph
                    continue
                key = (init.data_type, tuple(init.dims), hashlib.sha256(raw).hexdigest())
                if key not in offsets:
                    pad = (-size) % 64  # aligned (memory-mappable) offsets
                    f.write(b"\0" * pad)
                    size += pad
                    offsets[key] = size
                    f.write(raw)
                    size += len(raw)
                init.ClearField("raw_data")
                for field in ("float_data", "int32_data", "int64_data", "double_data"):
                    init.ClearField(field)
                init.data_location = 1  # EXTERNAL
                del init.external_data[:]
                for k, v in (
                    ("location", WEIGHTS),
                    ("offset", str(offsets[key])),
                    ("length", str(len(raw))),
                ):
                    entry = init.external_data.add()
                    entry.key, entry.value = k, v


def quantize_graph(path: str, out_path: str, min_elements: int) -> int:
    """ONNX Runtime dynamic int8 of the MatMul / Gemm nodes whose weight has at least
    ``min_elements`` entries (weights folded first, so transposed weights qualify). Returns
    how many maps it quantized."""
    import onnx
    import onnxruntime as ort
    from onnx import numpy_helper
    from onnxruntime.quantization import QuantType, quantize_dynamic

    folded = out_path + ".folded.onnx"
    so = ort.SessionOptions()
    so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_BASIC
    so.optimized_model_filepath = folded
    ort.InferenceSession(path, so, providers=["CPUExecutionProvider"])
    proto = onnx.load(folded)
    sizes = {i.name: int(numpy_helper.to_array(i).size) for i in proto.graph.initializer}
    nodes = []
    for n in proto.graph.node:
        if n.op_type not in ("MatMul", "Gemm") or TT_MATRIX in n.input[1]:
            continue  # (a tensor-train core's product stays float32: tt_graph.TT_MATRIX)
        if sizes.get(n.input[1], 0) >= max(min_elements, 1):
            # (the quantizer turns a Gemm into a MatMul named <gemm>_MatMul first)
            nodes += [n.name, f"{n.name}_MatMul"] if n.op_type == "Gemm" else [n.name]
    if nodes:
        import logging

        level = logging.getLogger().level
        logging.getLogger().setLevel(logging.ERROR)  # the quantizer logs every node
        try:
            quantize_dynamic(
                folded,
                out_path,
                weight_type=QuantType.QInt8,
                op_types_to_quantize=["MatMul", "Gemm"],
                nodes_to_quantize=nodes,
            )
        finally:
            logging.getLogger().setLevel(level)
    else:
        shutil.copyfile(folded, out_path)
    os.remove(folded)
    return len(set(nodes) & {n.name for n in proto.graph.node})  # (a Gemm once)


def _ranks(proto) -> dict:
    """The rank of every value of the graph that ONNX's shape inference can tell."""
    import onnx

    try:
        inferred = onnx.shape_inference.infer_shapes(proto)
    except Exception:  # noqa: BLE001  (without ranks the lookups take the general form)
        return {}
    out = {}
    for vi in [*inferred.graph.input, *inferred.graph.value_info, *inferred.graph.output]:
        t = vi.type.tensor_type
        if t.HasField("shape"):
            out[vi.name] = len(t.shape.dim)
    return out


def int8_lookups(protos: dict) -> int:
    """Embedding lookups from the int8 copy of a tied table (after :func:`quantize_graph`).

    ONNX Runtime's quantizer gives the output projection ``x E^T`` an int8 copy of the table
    (``MatMulInteger`` on ``E^T``) and leaves the lookups (``Gather``) on the float32 ``E``, so a
    tied table would be stored twice (float32 and int8) and the int8 export would be larger than
    the float32 one. Every ``Gather`` of a float32 table whose transpose is the int8 weight of a
    ``MatMulInteger`` (checked by value: each entry within half a quantization step) gathers
    that weight's columns instead and dequantizes them (``DequantizeLinear``: the int8 row times
    the map's scale), in every graph; the float32 table is then dropped. The lookups see the
    table as the output projection does (int8); the table is stored once, in int8. Returns
    how many lookups it changed."""
    import numpy as np
    from onnx import TensorProto, helper, numpy_helper

    # the int8 weights of the quantized products: name -> (int8 array, scale, zero point, protos)
    qmaps: dict = {}
    for proto in protos.values():
        inits = {i.name: i for i in proto.graph.initializer}
        for n in proto.graph.node:
            q = n.input[1] if n.op_type == "MatMulInteger" else ""
            zp = n.input[3] if len(n.input) > 3 else ""
            scale = q[: -len("_quantized")] + "_scale" if q.endswith("_quantized") else ""
            if q in inits and zp in inits and scale in inits and len(inits[q].dims) == 2:
                qmaps[q] = (inits[q], inits[scale], inits[zp])
    arrays = {q: tuple(numpy_helper.to_array(t) for t in v) for q, v in qmaps.items()}
    changed = 0
    for proto in protos.values():
        g = proto.graph
        inits = {i.name: i for i in g.initializer}
        ranks = _ranks(proto)
        nodes = []
        for n in g.node:
            table = inits.get(n.input[0]) if n.op_type == "Gather" else None
            axis = next((a.i for a in n.attribute if a.name == "axis"), 0)
            match = None
            if table is not None and axis == 0 and table.data_type == TensorProto.FLOAT:
                t = numpy_helper.to_array(table)
                for q, (qa, sa, za) in arrays.items():
                    if t.ndim == 2 and qa.shape == t.shape[::-1]:
                        steps = t.T / np.float32(sa) - (qa.astype(np.float32) - np.float32(za))
                        if np.all(np.abs(steps) <= 0.5 + 1e-3):
                            match = q
                            break
            if match is None:
                nodes.append(n)
                continue
            for init in qmaps[match]:  # (a graph without the product, e.g. the encoder)
                if init.name not in inits:
                    g.initializer.append(init)
                    inits[init.name] = init
            p = f"{n.name or n.output[0]}/int8"
            q, scale, zp = (i.name for i in qmaps[match])
            ids, rank = n.input[1], ranks.get(n.input[1])
            # int8 columns of E^T [d x *ids] -> float -> the lookup's [*ids x d]
            nodes += [
                helper.make_node("Gather", [q, ids], [f"{p}/cols"], axis=1, name=f"{p}/g"),
                helper.make_node(
                    "DequantizeLinear", [f"{p}/cols", scale, zp], [f"{p}/fcols"], name=f"{p}/dq"
                ),
            ]
            if rank is not None:  # (the ids' rank known: one transpose)
                perm = [*range(1, rank + 1), 0]
                nodes.append(
                    helper.make_node(
                        "Transpose", [f"{p}/fcols"], [n.output[0]], perm=perm, name=f"{p}/t"
                    )
                )
            else:  # [d x N] -> [N x d] -> [*ids x d]
                width = int(t.shape[1])
                g.initializer.extend(
                    [
                        numpy_helper.from_array(
                            np.array([width, -1], dtype=np.int64), f"{p}/by_row"
                        ),
                        numpy_helper.from_array(np.array([width], dtype=np.int64), f"{p}/width"),
                    ]
                )
                nodes += [
                    helper.make_node(
                        "Reshape", [f"{p}/fcols", f"{p}/by_row"], [f"{p}/flat"], name=f"{p}/r1"
                    ),
                    helper.make_node(
                        "Transpose", [f"{p}/flat"], [f"{p}/rows"], perm=[1, 0], name=f"{p}/t"
                    ),
                    helper.make_node("Shape", [ids], [f"{p}/ids_shape"], name=f"{p}/s"),
                    helper.make_node(
                        "Concat",
                        [f"{p}/ids_shape", f"{p}/width"],
                        [f"{p}/shape"],
                        axis=0,
                        name=f"{p}/c",
                    ),
                    helper.make_node(
                        "Reshape", [f"{p}/rows", f"{p}/shape"], [n.output[0]], name=f"{p}/r2"
                    ),
                ]
            changed += 1
        _set_nodes(g, nodes)
    return changed


def int8_tables(protos: dict, min_elements: int, vocab_sizes) -> int:
    """Token embedding tables that are only looked up (``Gather``), stored in int8: after
    :func:`int8_lookups`, a float32 table of at least ``min_elements`` entries whose rows are
    the vocabulary (``vocab_sizes``) and which every graph only gathers (an untied model's
    tables; with the shortlist, the tied table whose candidates' rows ``rows.onnx`` gathers) is
    quantized like ONNX Runtime's int8 weights (per tensor, symmetric: ``scale = max|E| / 127``,
    zero point 0), and each lookup gathers int8 rows and dequantizes them. Positional tables
    (their rows are positions) stay float32. Returns how many tables it quantized."""
    import numpy as np
    from onnx import TensorProto, helper, numpy_helper

    tables: dict = {}  # name -> the float32 array, from the first graph that has it
    only_gathered: dict = {}
    for proto in protos.values():
        inits = {i.name: i for i in proto.graph.initializer}
        for n in proto.graph.node:
            for k, name in enumerate(n.input):
                if name not in inits:
                    continue
                init = inits[name]
                axis = next((a.i for a in n.attribute if a.name == "axis"), 0)
                gathered = n.op_type == "Gather" and k == 0 and axis == 0
                only_gathered[name] = only_gathered.get(name, True) and gathered
                if (
                    gathered
                    and name not in tables
                    and init.data_type == TensorProto.FLOAT
                    and len(init.dims) == 2
                    and init.dims[0] in vocab_sizes
                    and init.dims[0] * init.dims[1] >= max(min_elements, 1)
                ):
                    tables[name] = numpy_helper.to_array(init)
    tables = {k: v for k, v in tables.items() if only_gathered.get(k)}
    for name, t in tables.items():
        scale = np.float32(max(float(np.abs(t).max()), 1e-12) / 127.0)
        q = np.clip(np.rint(t / scale), -127, 127).astype(np.int8)
        made = [
            numpy_helper.from_array(q, f"{name}_int8"),
            numpy_helper.from_array(np.array(scale, dtype=np.float32), f"{name}_int8_scale"),
            numpy_helper.from_array(np.array(0, dtype=np.int8), f"{name}_int8_zero_point"),
        ]
        for proto in protos.values():
            g = proto.graph
            if not any(i.name == name for i in g.initializer):
                continue
            nodes = []
            for n in g.node:
                if n.op_type != "Gather" or n.input[0] != name:
                    nodes.append(n)
                    continue
                p = f"{n.name or n.output[0]}/int8"
                nodes += [
                    helper.make_node(
                        "Gather", [made[0].name, n.input[1]], [f"{p}/rows"], axis=0, name=f"{p}/g"
                    ),
                    helper.make_node(
                        "DequantizeLinear",
                        [f"{p}/rows", made[1].name, made[2].name],
                        [n.output[0]],
                        name=f"{p}/dq",
                    ),
                ]
            g.initializer.extend(made)
            _set_nodes(g, nodes)  # (the float32 table: read by no node now)
    return len(tables)


def write_dict(d, path: str) -> None:
    with open(path, "w", encoding="utf-8") as f:
        f.writelines(sym + "\n" for sym in d.symbols)


def write_runtime(directory: str) -> None:
    """The runtime an export carries: the package :mod:`lightcompress_runtime`, file for file,
    as ``runtime/``, and ``translate.py``, which runs it."""
    import lightcompress_runtime as runtime
    from lightcompress_runtime.files import VERSION

    source = os.path.dirname(os.path.abspath(runtime.__file__))
    os.makedirs(os.path.join(directory, RUNTIME))
    for name in sorted(os.listdir(source)):
        if name.endswith(".py"):
            shutil.copyfile(os.path.join(source, name), os.path.join(directory, RUNTIME, name))
    path = os.path.join(directory, LAUNCHER)
    with open(path, "w", encoding="utf-8") as f:
        f.write(_LAUNCHER_TEXT.format(version=VERSION))
    os.chmod(path, 0o755)


def write_manifest(directory: str) -> None:
    """``MANIFEST.sha256`` (``sha256sum`` format) of every file the runtime reads: it refuses
    an export whose config, dictionaries or weights were edited after it was written (the
    runtime's own code is not among them)."""
    from lightcompress_runtime.files import file_sha256

    lines = []
    for name in sorted(os.listdir(directory)):
        if name in (LAUNCHER, RUNTIME, MANIFEST):  # (the runtime's code)
            continue
        lines.append(f"{file_sha256(os.path.join(directory, name))}  {name}\n")
    with open(os.path.join(directory, MANIFEST), "w", encoding="utf-8") as f:
        f.writelines(lines)


def relative_error(got, ref) -> float:
    """Relative (Frobenius) error over the finite entries (``inf`` where they disagree)."""
    import numpy as np

    if got.shape != ref.shape or not np.array_equal(np.isfinite(got), np.isfinite(ref)):
        return float("inf")
    if np.isnan(got).any() or np.isnan(ref).any():  # (as max_abs_error: NaN is never equal)
        return float("inf")
    fin = np.isfinite(ref)
    g, r = got[fin].astype(np.float64), ref[fin].astype(np.float64)
    return float(np.linalg.norm(g - r) / max(np.linalg.norm(r), 1e-12))


def check_exported_graphs(folder, args: dict, ref, src, cross, strict: bool) -> dict:
    """Run the graphs in ``folder`` on the probe inputs against the traced modules' outputs.
    ``strict`` (float32): equal to 1e-3 or :class:`ExportError`. Returns the relative errors
    ``{"encoder": ..., "decoder": ...}`` (int8 exports record them: int8 weights and
    activations move the outputs; ONNX Runtime quantizes activations per tensor, which deep
    random-weight encoders feel most)."""
    import numpy as np
    import onnxruntime as ort

    so = ort.SessionOptions()
    so.intra_op_num_threads = 1
    so.log_severity_level = 3
    enc = ort.InferenceSession(
        os.path.join(folder, "encoder.onnx"), so, providers=["CPUExecutionProvider"]
    )
    dec = ort.InferenceSession(
        os.path.join(folder, "decoder.onnx"), so, providers=["CPUExecutionProvider"]
    )
    got = enc.run(None, {"src_tokens": src.numpy()})
    feed = {i.name: args[i.name].numpy() for i in dec.get_inputs() if i.name != "k"}
    feed["k"] = np.array([K_PLACEHOLDER], dtype=np.int64)
    out = dec.run(None, feed)
    pairs = {
        "encoder": [(g, r.numpy()) for g, r in zip(got, cross)],
        "decoder": [(out[0], ref[0].numpy())],
    }
    if os.path.exists(os.path.join(folder, "rows.onnx")):  # the shortlist's rows, per batch
        rows = ort.InferenceSession(
            os.path.join(folder, "rows.onnx"), so, providers=["CPUExecutionProvider"]
        )
        got_rows = rows.run(None, {"cands": args["cands"].numpy()})
        names = [o.name for o in rows.get_outputs()]
        pairs["rows"] = [(g, args[n].numpy()) for g, n in zip(got_rows, names)]
    errors = {}
    for part, items in pairs.items():
        if strict:
            worst = max(max_abs_error(g, r) for g, r in items)
            scale = max(float(np.abs(r[np.isfinite(r)]).max(initial=0.0)) for _g, r in items)
            if not worst <= 1e-3 * max(1.0, scale):
                raise ExportError(
                    f"the exported {part} does not reproduce the model (check failed: largest "
                    f"difference {worst:.3g})"
                )
        errors[part] = round(max(relative_error(g, r) for g, r in items), 6)
    return errors
