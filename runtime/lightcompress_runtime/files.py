"""The files of an ONNX export as the runtime reads them: its ``config.json`` (checked against
``MANIFEST.sha256`` and its format version), its graphs' ONNX Runtime sessions, its
dictionaries and the sinusoidal position rows. numpy and onnxruntime only.
"""

from __future__ import annotations

import hashlib
import json
import os
from collections.abc import Sequence

import numpy as np

__all__ = [
    "FILE_KEYS",
    "FORMAT",
    "MANIFEST",
    "VERSION",
    "VERSIONS",
    "WEIGHTS",
    "OnnxError",
    "check_graphs",
    "config_path",
    "file_sha256",
    "load_config",
    "ort_errors",
    "read_symbols",
    "session",
    "sinusoid",
]

FORMAT = "lightcompress-onnx"
#: the export format this runtime writes (2: the runtime ships as the package ``runtime/``
#: beside ``translate.py``; 1: as the module copies ``translate.py`` and ``onnx_files.py``)
VERSION = 2
#: the versions it reads (the files the runtime reads are the same in both)
VERSIONS = (1, 2)


#: the file that marks a web page export (lightcompress-export-web): the page's model files
#: (its shortlist, the browser's format) are not an ONNX export's
WEB_PAGE = "web.json"


class OnnxError(ValueError):
    """An input the runtime cannot use (one line for the user)."""


def ort_errors() -> tuple:
    """onnxruntime's own exception types (they derive from Exception only)."""
    from onnxruntime.capi import onnxruntime_pybind11_state as errors

    names = (
        "Fail",
        "InvalidArgument",
        "NoSuchFile",
        "InvalidProtobuf",
        "InvalidGraph",
        "RuntimeException",
        "NotImplemented",
        "EPFail",
    )
    return tuple(getattr(errors, n) for n in names if hasattr(errors, n))


def session(path: str, threads: int):
    """An ONNX Runtime CPU session of ``path`` on ``threads`` intra-op threads."""
    import onnxruntime as ort

    so = ort.SessionOptions()
    so.intra_op_num_threads = threads
    so.inter_op_num_threads = 1
    so.execution_mode = ort.ExecutionMode.ORT_SEQUENTIAL
    so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
    so.log_severity_level = 3
    try:
        return ort.InferenceSession(path, so, providers=["CPUExecutionProvider"])
    except (*ort_errors(), OSError, RuntimeError) as exc:
        detail = " ".join(str(exc).split())[:200]
        raise OnnxError(f"cannot load {path}: {detail}") from None


def sinusoid(positions: np.ndarray, dim: int, freq: Sequence[float] | None = None) -> np.ndarray:
    """fairseq's sinusoidal embeddings of ``positions`` ``[P]`` -> ``[P x dim]`` float32
    (``SinusoidalPositionalEmbedding.get_embedding``'s rows, its float32 arithmetic);
    ``freq``: the frequencies as torch computed them (the export's ``config.json``)."""
    half = dim // 2
    if freq is None:
        scaled = np.arange(half, dtype=np.float32) * np.float32(-np.log(10000) / (half - 1))
        freq = np.exp(scaled.astype(np.float64))
    freq = np.asarray(freq, dtype=np.float32)
    angles = (positions.astype(np.float32)[:, None] * freq[None, :]).astype(np.float64)
    emb = np.concatenate([np.sin(angles), np.cos(angles)], axis=1)  # (float64: exact rounding)
    if dim % 2 == 1:
        emb = np.pad(emb, ((0, 0), (0, 1)))
    return np.ascontiguousarray(emb, dtype=np.float32)


def load_config(model_dir: str) -> dict:
    """The export's ``config.json``, checked: its keys, the files it names (inside the export's
    folder, :func:`config_path`) and ``MANIFEST.sha256`` (required: every file the runtime
    reads must be listed in it, with the sha256 it has)."""
    path = os.path.join(model_dir, "config.json")
    if not os.path.isdir(model_dir):
        raise OnnxError(f"model directory not found: {model_dir}")
    if os.path.isfile(os.path.join(model_dir, WEB_PAGE)):
        raise OnnxError(
            f"{model_dir} is a web page (lightcompress-export-web: {WEB_PAGE}), whose files are "
            "for the browser: serve the folder and open its index.html, or translate here with "
            "the ONNX export it was made from (lightcompress-export-onnx)"
        )
    try:
        with open(path, encoding="utf-8") as f:
            config = json.load(f)
    except FileNotFoundError:
        raise OnnxError(f"{model_dir} is not an ONNX export (no config.json)") from None
    except (OSError, ValueError) as exc:
        raise OnnxError(f"cannot read {path}: {exc}") from None
    if not isinstance(config, dict) or config.get("format") != FORMAT:
        raise OnnxError(f"{path} is not a lightcompress ONNX export")
    version = config.get("version", 1)
    if not _ints(version) or version not in VERSIONS:
        raise OnnxError(
            f"{model_dir} is an export of format version {version!r}, this runtime reads "
            f"versions {VERSIONS[0]} to {VERSIONS[-1]}: translate with the export's own "
            "translate.py, or export the model again with this lightcompress"
        )
    _check_keys(path, config)
    needed = ["config.json", "encoder.onnx", "decoder.onnx", "dict.src.txt", "dict.tgt.txt"]
    needed += [config[k] for k in FILE_KEYS if config.get(k) is not None]
    bpe = config.get("bpe")
    if bpe is not None:  # Moses + subword-nmt: the codes
        if not isinstance(bpe, dict) or not isinstance(bpe.get("codes"), str):
            raise OnnxError(
                f"{path} has 'bpe' = {bpe!r}, not the BPE settings: export the model again"
            )
        needed.append(bpe["codes"])
    if os.path.lexists(os.path.join(model_dir, WEIGHTS)):
        needed.append(WEIGHTS)
    for name in needed:
        if not os.path.isfile(_inside(model_dir, name, "config.json names")):
            raise OnnxError(f"{model_dir} lacks {name} (an incomplete export)")
    _verify_manifest(model_dir, needed)
    return config


MANIFEST = "MANIFEST.sha256"
WEIGHTS = "weights.bin"
#: the keys of ``config.json`` that name a file of the export (checked by :func:`load_config`)
FILE_KEYS = ("spm", "shortlist", "shortlist_rows")
_INT_KEYS = (
    "pad",
    "eos",
    "unk",
    "src_pad",
    "src_eos",
    "src_unk",
    "vocab_size",
    "src_vocab_size",
    "max_decoder_positions",
    "position_offset",
)


def _check_keys(path: str, config: dict) -> None:
    """What the runtime reads from ``config.json`` is there and has the right type."""

    def bad(why: str) -> OnnxError:
        return OnnxError(f"{path} {why} (an incomplete or edited export): export the model again")

    for key in (*_INT_KEYS, "layers"):
        if key not in config:
            raise bad(f"lacks {key!r}")
    for key in _INT_KEYS:
        value = config[key]
        if not _ints(value) or value < 0:
            raise bad(f"has {key!r} = {value!r}, not a count or an id")
    for side in ("", "src_"):
        size = config[f"{side}vocab_size"]
        for key in (f"{side}pad", f"{side}eos", f"{side}unk"):
            if config[key] >= size:
                raise bad(f"has {key!r} = {config[key]}, outside its {size} symbols")
    layers = config["layers"]
    specs = layers if isinstance(layers, list) else []
    if not specs or not all(
        isinstance(x, dict) and _ints(x.get("heads"), x.get("head_dim")) for x in specs
    ):
        raise bad("has no list of decoder layers (each with 'heads' and 'head_dim')")
    for key in FILE_KEYS:
        if config.get(key) is not None and not isinstance(config[key], str):
            raise bad(f"has {key!r} = {config[key]!r}, not a file name")
    if config.get("shortlist_rows") and not isinstance(config.get("shortlist_rows_outputs"), list):
        raise bad("lacks 'shortlist_rows_outputs'")
    if config.get("position_kind") == "sinusoidal" and not _ints(config.get("position_dim")):
        raise bad("lacks 'position_dim'")
    for key in ("max_source_positions", "position_dim"):  # (optional)
        if config.get(key) is not None and not _ints(config[key]):
            raise bad(f"has {key!r} = {config[key]!r}, not a count")


def _ints(*values) -> bool:
    return all(isinstance(v, int) and not isinstance(v, bool) for v in values)


def _inside(model_dir: str, name: str, what: str) -> str:
    """``model_dir/name``, refused unless it lies inside ``model_dir``: no absolute path, no
    ``..``, no link that leads out of the folder."""
    parts = name.replace("\\", "/").split("/")
    if not name or os.path.isabs(name) or ".." in parts:
        raise OnnxError(
            f"{what} {name!r}: an export reads only files inside its own folder "
            "(a copied or edited export): export the model again"
        )
    path = os.path.join(model_dir, name)
    root = os.path.realpath(model_dir)
    if os.path.commonpath([root, os.path.realpath(path)]) != root:
        raise OnnxError(
            f"{path} is a link to a file outside {model_dir}: an export reads only "
            "files inside its own folder (copy the file in, or export again)"
        )
    return path


def config_path(model_dir: str, config: dict, key: str) -> str | None:
    """The path of the file ``config[key]`` names (None: no such file), inside ``model_dir``."""
    name = config.get(key)
    return None if not name else _inside(model_dir, name, f"config.json's {key!r} is")


def file_sha256(path: str) -> str:
    """The SHA-256 of a file, read in 1 MiB blocks (hex, as ``sha256sum`` writes it)."""
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def _verify_manifest(model_dir: str, needed: Sequence[str] = ()) -> None:
    """Refuse an export without ``MANIFEST.sha256``, one whose manifest leaves out a file of
    ``needed``, or whose files differ from what the exporter wrote."""
    path = os.path.join(model_dir, MANIFEST)
    again = "export the model again with lightcompress-export-onnx (it writes one)"
    if not os.path.isfile(path):
        raise OnnxError(
            f"{model_dir} has no {MANIFEST}, so its files cannot be checked (a "
            f"copied or edited export is refused): {again}"
        )
    try:
        with open(path, encoding="utf-8") as f:
            entries = [line.rstrip("\n").split("  ", 1) for line in f if line.strip()]
    except (OSError, UnicodeDecodeError) as exc:
        raise OnnxError(f"cannot read {path}: {exc}") from None
    listed = {e[1] for e in entries if len(e) == 2}
    for name in needed:
        if name not in listed:
            raise OnnxError(f"{path} does not list {name}, so it cannot be checked: {again}")
    for entry in entries:
        if len(entry) != 2:
            raise OnnxError(f"{path} is damaged (not sha256sum lines)")
        expected, name = entry
        file = _inside(model_dir, name, f"{MANIFEST} lists")
        if not os.path.isfile(file):
            raise OnnxError(f"{model_dir} lacks {name} (an incomplete export)")
        if file_sha256(file) != expected:
            raise OnnxError(
                f"{name} in {model_dir} was changed after the export was written (its sha256 "
                f"differs from {MANIFEST}): export the model again instead of editing it"
            )


def check_graphs(model_dir: str, config: dict, encoder, decoder) -> None:
    """The graphs' inputs and outputs are the ones ``config.json`` describes (another model's
    graphs in the folder are refused here, not by ONNX Runtime at the first step)."""
    layers = config["layers"]
    dec = {i.name: i.shape for i in decoder.get_inputs()}
    enc_in = [i.name for i in encoder.get_inputs()]
    pasts = sorted(n for n in dec if n.startswith("past_"))
    want = sorted(f"past_{c}{i}" for i in range(len(layers)) for c in ("k", "v"))
    why = None
    if enc_in != ["src_tokens"] or not {"prev", "order", "bias", "k"} <= set(dec):
        why = "they are not a lightcompress export's encoder and decoder step"
    elif pasts != want:
        why = f"the decoder has {len(pasts) // 2} layers, config.json {len(layers)}"
    else:
        for i, spec in enumerate(layers):
            for c in ("k", "v"):
                shape = dec[f"past_{c}{i}"]
                heads, width = spec.get(f"{c}_cache", (spec["heads"], spec["head_dim"]))
                got = [d if isinstance(d, int) else None for d in (shape[1], shape[3])]
                if got != [heads, width] and None not in got:
                    why = f"layer {i}'s cache is {got[0]} x {got[1]}, config.json {heads} x {width}"
        bias = dec["bias"]
        if why is None and isinstance(bias[0], int) and bias[0] != config["vocab_size"]:
            why = f"the decoder scores {bias[0]} tokens, config.json has {config['vocab_size']}"
    if why is not None:
        raise OnnxError(
            f"the graphs in {model_dir} do not fit its config.json ({why}): another "
            "model's files? export the model again"
        )


def read_symbols(path: str) -> list[str]:
    """The symbols of a fairseq dictionary the exporter wrote (one per line)."""
    with open(path, encoding="utf-8") as f:
        return [line.rstrip("\n") for line in f]
