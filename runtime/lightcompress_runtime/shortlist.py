"""A vocabulary shortlist as the runtime reads it: per source id, its target ids; the ids always
included (:class:`Shortlist`). Read from a ``lightcompress-shortlist`` text file or from the
packed form an ONNX export ships (``shortlist.npz``). numpy only.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from .files import OnnxError

__all__ = ["PACKED_FORMAT", "SHORTLIST_HEADER", "Shortlist", "shortlist_text"]

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

    def __init__(
        self,
        path: str,
        src_symbols,
        tgt_symbols,
        specials: Sequence[int] = (),
        old_text: bool = False,
    ):
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
                f,
                format=np.array(PACKED_FORMAT),
                sizes=np.array(self.sizes, dtype=np.int64),
                counts=counts.astype(np.int32),
                deltas=deltas.astype(dtype),
                always=self.listed.astype(np.int32),
            )


def _check_complete(path: str, text: str, old_text: bool) -> None:
    """Refuse a text shortlist whose lines are not the ones its header counts and hashes."""
    import hashlib

    header, _, body = text.partition("\n")
    again = "rebuild it with lightcompress-shortlist"
    if header.startswith(_OLD_SHORTLIST_HEADER) and not old_text:
        raise OnnxError(
            f"{path} is a shortlist of an older format, without a line count and "
            f"checksum (a truncated copy cannot be told from a whole one): {again}"
        )
    if not header.startswith(SHORTLIST_HEADER):
        if header.startswith(_OLD_SHORTLIST_HEADER):
            return
        raise OnnxError(f"{path} is not a lightcompress shortlist (no {SHORTLIST_HEADER!r})")
    fields = dict(f.split("=", 1) for f in header.split() if "=" in f)
    count = body.count("\n")
    if fields.get("lines") != str(count) or (body and not body.endswith("\n")):
        raise OnnxError(
            f"{path} is truncated: {count} complete lines where its header counts "
            f"{fields.get('lines', 'none')}: {again}"
        )
    if hashlib.sha256(body.encode("utf-8")).hexdigest() != fields.get("sha256"):
        raise OnnxError(
            f"{path} was changed after it was written (its lines' sha256 differs "
            f"from its header's): {again}"
        )


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
        raise bad(
            f"built for vocabularies of {arrays['sizes'].tolist()} types, the model has "
            f"{[n_src, n_tgt]}"
        )
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
