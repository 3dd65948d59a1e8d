"""The files of an ONNX export as the runtime reads them: its ``config.json`` (checked against
``MANIFEST.sha256``), its graphs' ONNX Runtime sessions, the sinusoidal position rows and the
vocabulary shortlist. numpy and onnxruntime only: the exporter ships this file next to the
export's ``translate.py`` (:mod:`lightcompress.deploy.onnx_runtime`), which imports it.
"""

from __future__ import annotations

import json
import os
from collections.abc import Sequence

import numpy as np

__all__ = ["FORMAT", "MANIFEST", "PACKED_FORMAT", "SHORTLIST_HEADER", "OnnxError", "Shortlist",
           "load_config", "sinusoid"]  # fmt: skip

FORMAT = "lightcompress-onnx"


class OnnxError(ValueError):
    """An input the runtime cannot use (one line for the user)."""


def _session(path: str, threads: int):
    import onnxruntime as ort

    so = ort.SessionOptions()
    so.intra_op_num_threads = threads
    so.inter_op_num_threads = 1
    so.execution_mode = ort.ExecutionMode.ORT_SEQUENTIAL
    so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
    so.log_severity_level = 3
    from onnxruntime.capi import onnxruntime_pybind11_state as errors

    # onnxruntime's own exception types (they derive from Exception only)
    names = ("Fail", "InvalidArgument", "NoSuchFile", "InvalidProtobuf", "InvalidGraph",
             "RuntimeException", "NotImplemented")  # fmt: skip
    ort_errors = tuple(getattr(errors, n) for n in names if hasattr(errors, n))
    try:
        return ort.InferenceSession(path, so, providers=["CPUExecutionProvider"])
    except (*ort_errors, OSError, RuntimeError) as exc:
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
    """The export's ``config.json`` (checked)."""
    path = os.path.join(model_dir, "config.json")
    if not os.path.isdir(model_dir):
        raise OnnxError(f"model directory not found: {model_dir}")
    try:
        with open(path, encoding="utf-8") as f:
            config = json.load(f)
    except FileNotFoundError:
        raise OnnxError(f"{model_dir} is not an ONNX export (no config.json)") from None
    except (OSError, ValueError) as exc:
        raise OnnxError(f"cannot read {path}: {exc}") from None
    if not isinstance(config, dict) or config.get("format") != FORMAT:
        raise OnnxError(f"{path} is not a lightcompress ONNX export")
    needed = ["encoder.onnx", "decoder.onnx", "dict.src.txt", "dict.tgt.txt"]
    if config.get("shortlist_rows"):
        needed.append(config["shortlist_rows"])
    for name in needed:
        if not os.path.isfile(os.path.join(model_dir, name)):
            raise OnnxError(f"{model_dir} lacks {name} (an incomplete export)")
    _verify_manifest(model_dir)
    return config


MANIFEST = "MANIFEST.sha256"


def _verify_manifest(model_dir: str) -> None:
    """Refuse an export whose files differ from what the exporter wrote (MANIFEST.sha256; an
    export written before the manifest existed is read as it is)."""
    import hashlib

    path = os.path.join(model_dir, MANIFEST)
    if not os.path.exists(path):
        return
    with open(path, encoding="utf-8") as f:
        entries = [line.rstrip("\n").split("  ", 1) for line in f if line.strip()]
    for entry in entries:
        if len(entry) != 2:
            raise OnnxError(f"{path} is damaged (not sha256sum lines)")
        expected, name = entry
        file = os.path.join(model_dir, name)
        if not os.path.isfile(file):
            raise OnnxError(f"{model_dir} lacks {name} (an incomplete export)")
        digest = hashlib.sha256()
        with open(file, "rb") as f:
            for block in iter(lambda: f.read(1 << 20), b""):
                digest.update(block)
        if digest.hexdigest() != expected:
            raise OnnxError(
                f"{name} in {model_dir} was changed after the export was written (its sha256 "
                f"differs from {MANIFEST}): export the model again instead of editing it"
            )


SHORTLIST_HEADER = "#lightcompress-shortlist 1"
PACKED_FORMAT = "lightcompress-shortlist-packed 1"


class Shortlist:
    """A vocabulary shortlist of a model's dictionaries: per source id, its target ids; the ids
    always included. A batch's candidates: its source tokens' lists, the ids always included,
    every id up to the largest of ``specials`` (their ids stay the same), sorted.

    Read from a ``lightcompress-shortlist`` text file (a header, then lines
    ``source<TAB>targets``; no source: the tokens always included), or from the packed form an
    ONNX export ships (``.npz``, :meth:`save_packed`: ids instead of tokens, each list sorted and
    stored as differences, compressed; about a sixth of the text's size)."""

    def __init__(self, path: str, src_symbols, tgt_symbols, specials: Sequence[int] = ()):
        n_src, n_tgt = len(src_symbols), len(tgt_symbols)
        if path.endswith(".npz"):
            counts, targets, listed = _read_packed(path, n_src, n_tgt)
        else:
            counts, targets, listed = _read_text(path, src_symbols, tgt_symbols)
        self.offsets = np.concatenate([[0], np.cumsum(counts)]).astype(np.int64)
        self.targets = targets.astype(np.int64, copy=False)
        self.listed = np.asarray(listed, dtype=np.int64)  # (the file's tokens always included)
        always = set(range(max(specials, default=-1) + 1)) | set(self.listed.tolist())
        self.always = np.array(sorted(always), dtype=np.int64)
        self._always_mask = np.zeros(n_tgt, dtype=bool)
        self._always_mask[self.always] = True
        self.sizes = (n_src, n_tgt)

    def candidates(self, src_tokens: np.ndarray) -> np.ndarray:
        """The sorted target ids ``[V']`` (int64) the output layer scores for a batch."""
        mask = self._always_mask.copy()  # (a mask over the vocabulary: no sort per batch)
        off, targets = self.offsets, self.targets
        for i in set(np.asarray(src_tokens).ravel().tolist()):
            if 0 <= i < len(off) - 1:
                mask[targets[off[i] : off[i + 1]]] = True
        return np.flatnonzero(mask).astype(np.int64, copy=False)

    def save_packed(self, path: str) -> None:
        """Write the packed form (a numpy ``.npz`` archive, no pickled objects): ``format``,
        ``sizes`` (source and target vocabulary sizes), ``counts`` (list length per source id),
        ``deltas`` (each list sorted, its first id and then the differences), ``always``."""
        off = self.offsets
        counts = np.diff(off)
        rows = np.repeat(np.arange(len(counts)), counts)
        order = np.lexsort((self.targets, rows))  # (sorted within each list)
        ids = self.targets[order]
        deltas = ids.copy()
        inner = np.ones(len(ids), dtype=bool)
        inner[off[:-1][counts > 0]] = False  # (a list's first id stays as it is)
        deltas[1:][inner[1:]] = np.diff(ids)[inner[1:]]
        dtype = np.uint16 if self.sizes[1] <= 1 << 16 else np.int32
        with open(path, "wb") as f:
            np.savez_compressed(
                f, format=np.array(PACKED_FORMAT), sizes=np.array(self.sizes, dtype=np.int64),
                counts=counts.astype(np.int32), deltas=deltas.astype(dtype),
                always=self.listed.astype(np.int32),
            )  # fmt: skip


def _read_text(path: str, src_symbols, tgt_symbols):
    src_index = {s: i for i, s in enumerate(src_symbols)}
    src_index[""] = -1  # (the line of the tokens always included)
    tgt_index = {s: i for i, s in enumerate(tgt_symbols)}
    try:
        with open(path, encoding="utf-8") as f:
            lines = f.read().split("\n")
    except (OSError, UnicodeDecodeError) as exc:
        raise OnnxError(f"cannot read the shortlist {path}: {exc}") from None
    if not lines[0].startswith(SHORTLIST_HEADER):
        raise OnnxError(f"{path} is not a lightcompress shortlist (no {SHORTLIST_HEADER!r})")
    rows: list = [()] * len(src_symbols)
    listed: set[int] = set()
    for n, line in enumerate(lines[1:], 2):
        src, tab, targets = line.partition("\t")
        bad = [t for t in targets.split() if t not in tgt_index]
        bad += [src] * (src not in src_index)
        if line and (not tab or bad):
            what = f"{bad[0]!r} is not in the model's dictionaries" if tab else "no tab"
            raise OnnxError(f"{path} line {n}: {what} (build it from the model's data)")
        ids = [tgt_index[t] for t in targets.split()]
        if src:
            rows[src_index[src]] = ids
        elif tab:
            listed.update(ids)
    counts = np.array([len(r) for r in rows], dtype=np.int64)
    targets = np.array([t for r in rows for t in r], dtype=np.int64)
    return counts, targets, sorted(listed)


def _read_packed(path: str, n_src: int, n_tgt: int):
    import zipfile

    def bad(why: str) -> OnnxError:
        return OnnxError(f"{path} is not a usable packed shortlist: {why}")

    names = ("format", "sizes", "counts", "deltas", "always")
    try:
        z = np.load(path, allow_pickle=False)
    except (OSError, ValueError, EOFError, zipfile.BadZipFile) as exc:
        raise bad(str(exc) or type(exc).__name__) from None
    if not hasattr(z, "files"):  # (one .npy array, not an archive)
        raise bad("not an .npz archive")
    with z:
        missing = [k for k in names if k not in z.files]
        if missing:
            raise bad(f"no {missing[0]!r} array")
        try:
            arrays = {k: z[k] for k in names}
        except (OSError, ValueError, EOFError, zipfile.BadZipFile) as exc:
            raise bad(str(exc) or type(exc).__name__) from None
    if str(arrays["format"]) != PACKED_FORMAT:
        raise bad(f"format {str(arrays['format'])[:40]!r}, not {PACKED_FORMAT!r}")
    if arrays["sizes"].tolist() != [n_src, n_tgt]:
        raise bad(f"built for vocabularies of {arrays['sizes'].tolist()} types, the model has "
                  f"{[n_src, n_tgt]}")  # fmt: skip
    counts = arrays["counts"].astype(np.int64)
    deltas = arrays["deltas"].astype(np.int64)
    if counts.shape != (n_src,) or (counts < 0).any() or counts.sum() != deltas.size:
        raise bad("its list lengths do not match its ids")
    off = np.concatenate([[0], np.cumsum(counts)])
    starts = off[:-1][counts > 0]
    ids = np.cumsum(deltas)  # (restarted at each list's first id)
    before = np.zeros(len(starts), dtype=np.int64)
    before[starts > 0] = ids[starts[starts > 0] - 1]
    ids -= np.repeat(before, counts[counts > 0])
    always = arrays["always"].astype(np.int64)
    for what, a in (("ids", ids), ("always", always)):
        if a.size and (a.min() < 0 or a.max() >= n_tgt):
            raise bad(f"{what} outside the target vocabulary")
    return counts, ids, always


def _read_symbols(path: str) -> list[str]:
    with open(path, encoding="utf-8") as f:
        return [line.rstrip("\n") for line in f]
