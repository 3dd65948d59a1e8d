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

__all__ = ["FILE_KEYS", "FORMAT", "MANIFEST", "PACKED_FORMAT", "SHORTLIST_HEADER", "OnnxError",
           "Shortlist", "check_graphs", "config_path", "load_config", "ort_errors", "shortlist_text",
           "sinusoid"]  # fmt: skip

FORMAT = "lightcompress-onnx"


class OnnxError(ValueError):
    """An input the runtime cannot use (one line for the user)."""


def ort_errors() -> tuple:
    """onnxruntime's own exception types (they derive from Exception only)."""
    from onnxruntime.capi import onnxruntime_pybind11_state as errors

    names = ("Fail", "InvalidArgument", "NoSuchFile", "InvalidProtobuf", "InvalidGraph",
             "RuntimeException", "NotImplemented", "EPFail")  # fmt: skip
    return tuple(getattr(errors, n) for n in names if hasattr(errors, n))


def _session(path: str, threads: int):
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
    try:
        with open(path, encoding="utf-8") as f:
            config = json.load(f)
    except FileNotFoundError:
        raise OnnxError(f"{model_dir} is not an ONNX export (no config.json)") from None
    except (OSError, ValueError) as exc:
        raise OnnxError(f"cannot read {path}: {exc}") from None
    if not isinstance(config, dict) or config.get("format") != FORMAT:
        raise OnnxError(f"{path} is not a lightcompress ONNX export")
    _check_keys(path, config)
    needed = ["config.json", "encoder.onnx", "decoder.onnx", "dict.src.txt", "dict.tgt.txt"]
    needed += [config[k] for k in FILE_KEYS if config.get(k) is not None]
    bpe = config.get("bpe")
    if bpe is not None:  # Moses + subword-nmt: the codes and the text code that reads them
        if not isinstance(bpe, dict) or not isinstance(bpe.get("codes"), str):
            raise OnnxError(
                f"{path} has 'bpe' = {bpe!r}, not the BPE settings: export the model again"
            )
        needed += [bpe["codes"], "onnx_text.py"]
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
_INT_KEYS = ("pad", "eos", "unk", "src_pad", "src_eos", "src_unk", "vocab_size",
             "src_vocab_size", "max_decoder_positions", "position_offset")  # fmt: skip


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
    if not specs or not all(isinstance(x, dict) and _ints(x.get("heads"), x.get("head_dim"))
                            for x in specs):  # fmt: skip
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
        raise OnnxError(f"{what} {name!r}: an export reads only files inside its own folder "
                        "(a copied or edited export): export the model again")  # fmt: skip
    path = os.path.join(model_dir, name)
    root = os.path.realpath(model_dir)
    if os.path.commonpath([root, os.path.realpath(path)]) != root:
        raise OnnxError(f"{path} is a link to a file outside {model_dir}: an export reads only "
                        "files inside its own folder (copy the file in, or export again)")  # fmt: skip
    return path


def config_path(model_dir: str, config: dict, key: str) -> str | None:
    """The path of the file ``config[key]`` names (None: no such file), inside ``model_dir``."""
    name = config.get(key)
    return None if not name else _inside(model_dir, name, f"config.json's {key!r} is")


def _verify_manifest(model_dir: str, needed: Sequence[str] = ()) -> None:
    """Refuse an export without ``MANIFEST.sha256``, one whose manifest leaves out a file of
    ``needed``, or whose files differ from what the exporter wrote."""
    import hashlib

    path = os.path.join(model_dir, MANIFEST)
    again = "export the model again with lightcompress-export-onnx (it writes one)"
    if not os.path.isfile(path):
        raise OnnxError(f"{model_dir} has no {MANIFEST}, so its files cannot be checked (a "
                        f"copied or edited export is refused): {again}")  # fmt: skip
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
        digest = hashlib.sha256()
        with open(file, "rb") as f:
            for block in iter(lambda: f.read(1 << 20), b""):
                digest.update(block)
        if digest.hexdigest() != expected:
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
        raise OnnxError(f"the graphs in {model_dir} do not fit its config.json ({why}): another "
                        "model's files? export the model again")  # fmt: skip


SHORTLIST_HEADER = "#lightcompress-shortlist 2"
_OLD_SHORTLIST_HEADER = "#lightcompress-shortlist 1"  # (no line count or checksum)


def shortlist_text(lines: Sequence[str], info: str = "") -> str:
    """The text shortlist file of ``lines`` (``<TAB>`` + the tokens always included, then
    ``source<TAB>targets``): the header line (``SHORTLIST_HEADER``, the number of lines after it
    and their sha256, then ``info``), the lines, each ending with ``\\n``. A reader refuses a
    file whose lines are not all there (:class:`Shortlist`)."""
    import hashlib

    body = "".join(line + "\n" for line in lines)
    digest = hashlib.sha256(body.encode("utf-8")).hexdigest()
    header = f"{SHORTLIST_HEADER} lines={len(lines)} sha256={digest}"
    return header + (f" {info}" if info else "") + "\n" + body


PACKED_FORMAT = "lightcompress-shortlist-packed 1"


class Shortlist:
    """A vocabulary shortlist of a model's dictionaries: per source id, its target ids; the ids
    always included. A batch's candidates: its source tokens' lists, the ids always included,
    every id up to the largest of ``specials`` (their ids stay the same), sorted.

    Read from a ``lightcompress-shortlist`` text file (a header, then lines
    ``source<TAB>targets``; no source: the tokens always included), or from the packed form an
    ONNX export ships (``.npz``, :meth:`save_packed`: ids instead of tokens, each list sorted and
    stored as differences, compressed; about a sixth of the text's size)."""

    def __init__(self, path: str, src_symbols, tgt_symbols, specials: Sequence[int] = (),
                 old_text: bool = False):  # fmt: skip
        n_src, n_tgt = len(src_symbols), len(tgt_symbols)
        if path.endswith(".npz"):
            counts, targets, listed = _read_packed(path, n_src, n_tgt)
        else:  # (old_text: a text file without a line count, in an export its manifest checks)
            counts, targets, listed = _read_text(path, src_symbols, tgt_symbols, old_text)
        self.offsets = np.concatenate([[0], np.cumsum(counts)]).astype(np.int64)
        self.targets = targets.astype(np.int64, copy=False)
        self.listed = np.asarray(listed, dtype=np.int64)  # (the file's tokens always included)
        always = set(range(max(specials, default=-1) + 1)) | set(self.listed.tolist())
        self.always = np.array(sorted(always), dtype=np.int64)
        self._always_mask = np.zeros(n_tgt, dtype=bool)
        self._always_mask[self.always] = True
        self.sizes = (n_src, n_tgt)
        self._fixed = max(specials, default=-1) + 1  # (the ids kept as they are)

    def candidates(self, src_tokens: np.ndarray, minimum: int = 0) -> np.ndarray:
        """The sorted target ids ``[V']`` (int64) the output layer scores for a batch: with
        ``minimum`` (the translators give twice the beam), at least that many besides the
        special ids, the lowest ids not yet among them added (a fairseq dictionary's most
        frequent tokens), so that a short list still leaves the beam search real tokens."""
        mask = self._always_mask.copy()  # (a mask over the vocabulary: no sort per batch)
        off, targets = self.offsets, self.targets
        for i in set(np.asarray(src_tokens).ravel().tolist()):
            if 0 <= i < len(off) - 1:
                mask[targets[off[i] : off[i + 1]]] = True
        missing = minimum - int(np.count_nonzero(mask[self._fixed :]))
        if missing > 0:
            mask[np.flatnonzero(~mask[self._fixed :])[:missing] + self._fixed] = True
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


def _check_complete(path: str, text: str, old_text: bool) -> None:
    """Refuse a text shortlist whose lines are not the ones its header counts and hashes."""
    import hashlib

    header, _, body = text.partition("\n")
    again = "rebuild it with lightcompress-shortlist"
    if header.startswith(_OLD_SHORTLIST_HEADER) and not old_text:
        raise OnnxError(f"{path} is a shortlist of an older format, without a line count and "
                        f"checksum (a truncated copy cannot be told from a whole one): {again}")  # fmt: skip
    if not header.startswith(SHORTLIST_HEADER):
        if header.startswith(_OLD_SHORTLIST_HEADER):
            return
        raise OnnxError(f"{path} is not a lightcompress shortlist (no {SHORTLIST_HEADER!r})")
    fields = dict(f.split("=", 1) for f in header.split() if "=" in f)
    count = body.count("\n")
    if fields.get("lines") != str(count) or (body and not body.endswith("\n")):
        raise OnnxError(f"{path} is truncated: {count} complete lines where its header counts "
                        f"{fields.get('lines', 'none')}: {again}")  # fmt: skip
    if hashlib.sha256(body.encode("utf-8")).hexdigest() != fields.get("sha256"):
        raise OnnxError(f"{path} was changed after it was written (its lines' sha256 differs "
                        f"from its header's): {again}")  # fmt: skip


def _read_text(path: str, src_symbols, tgt_symbols, old_text: bool = False):
    src_index = {s: i for i, s in enumerate(src_symbols)}
    src_index[""] = -1  # (the line of the tokens always included)
    tgt_index = {s: i for i, s in enumerate(tgt_symbols)}
    try:
        with open(path, encoding="utf-8", newline="") as f:
            text = f.read()
    except (OSError, UnicodeDecodeError) as exc:
        raise OnnxError(f"cannot read the shortlist {path}: {exc}") from None
    _check_complete(path, text, old_text)
    lines = text.split("\n")
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
