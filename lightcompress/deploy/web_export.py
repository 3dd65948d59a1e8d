"""``lightcompress-export-web``: an ONNX export as a static web page that translates offline.

``lightcompress-export-web model-onnx -o model-web`` turns an export of
``lightcompress-export-onnx`` (best made with ``--int8 all`` and a ``--spm`` model; a
``--shortlist`` makes the page faster) into a folder that any static server serves
(``python -m http.server -d model-web``), with no network and no build step for its user:

- ``index.html`` and ``lightcompress.mjs`` (the repository's ``web/``): one ES module with
  fairseq's beam search (:mod:`lightcompress_runtime.search`'s, line for line, float32 arithmetic
  included) over the same decoder step as :mod:`lightcompress_runtime.onnx_step`, the
  sentencepiece glue and the page's Worker;
- the model: ``config.json``, ``encoder.onnx``, ``decoder.onnx`` (``rows.onnx``), ``weights.bin``,
  ``dict.src.txt`` / ``dict.tgt.txt``, ``spm.model`` and the shortlist as ``shortlist.bin`` (the
  runtime's packed lists in a form the page reads: :func:`pack_shortlist`);
- ``engine/``: ONNX Runtime Web's WebAssembly build (``ort.wasm.min.mjs``, single-threaded SIMD;
  threads where the page is cross-origin isolated) and ``sentencepiece.mjs`` (the sentencepiece C++
  library in WebAssembly, from ``@sctg/sentencepiece-js``, its built-in example models left out),
  their versions and licences in ``engine/NOTICE.md``;
- ``web.json`` (what the page reads first: the files, their sha256, which the page checks, the
  sizes) and ``SHA256SUMS`` (every file, ``sha256sum -c``).

The engine files come from npm, pinned by ``web/package-lock.json`` (:data:`ENGINE_PINS`); the
export copies them from an installed ``node_modules`` (``--node-modules``; default: the one
beside the page's sources, made by ``npm ci --omit=dev`` there, else ``./web/node_modules``: the
checkout's, made by ``make web``, for a lightcompress installed from the checkout it is run in). Python never runs Node: without
those files the command stops with one line that names the ``npm ci`` to run.

Refused with one line: an export of Moses + subword-nmt BPE (no exact JavaScript Moses tokenizer
here: export the model with its sentencepiece model instead), a damaged or edited export (the
runtime's manifest check), an output folder that is not new or empty.
"""

from __future__ import annotations

import argparse
import gzip
import json
import os
import re
import shutil
import struct
import sys
from collections.abc import Sequence

from lightcompress import cli
from lightcompress.errors import LightcompressError

__all__ = [
    "ENGINE_PINS",
    "WebExportError",
    "cli_main",
    "export_web",
    "main",
    "pack_shortlist",
    "page_sources",
]

PROG = "lightcompress-export-web"
FORMAT = "lightcompress-web"  # (web.json's; lightcompress.mjs reads this format and version)
VERSION = 1

#: the npm packages the page runs on, as web/package-lock.json pins them (a test checks)
ENGINE_PINS = {"onnxruntime-web": "1.30.0", "@sctg/sentencepiece-js": "1.3.3"}
#: the page's own files (web/)
PAGE_FILES = ("index.html", "lightcompress.mjs")
#: ONNX Runtime Web's files: the WebAssembly build without WebGPU / WebGL (one SIMD binary that
#: runs single-threaded, or with threads in a cross-origin isolated page)
ORT_FILES = ("ort.wasm.min.mjs", "ort-wasm-simd-threaded.mjs", "ort-wasm-simd-threaded.wasm")
SHORTLIST_MAGIC = b"LCSL0001"


class WebExportError(LightcompressError, ValueError):
    """An export or an install the web export cannot use (one line for the user)."""


# --------------------------------------------------------------------------------------------
# where the page's files are
# --------------------------------------------------------------------------------------------


def page_sources() -> str:
    """The folder of the page's sources (``index.html``, ``lightcompress.mjs``,
    ``package-lock.json``): the checkout's ``web/``, or the installed copy
    (``lightcompress/webpage``, setup.py's package data)."""
    here = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    for folder in (os.path.join(os.path.dirname(here), "web"), os.path.join(here, "webpage")):
        if all(os.path.isfile(os.path.join(folder, f)) for f in PAGE_FILES):
            return folder
    raise WebExportError(
        f"the page's files ({', '.join(PAGE_FILES)}) are not installed with "
        "lightcompress: reinstall it from its repository"
    )


def _npm_hint(folder: str) -> str:
    return (
        f"run `npm ci --omit=dev` in {folder} (npm installs the pinned "
        f"{', '.join(f'{k}@{v}' for k, v in ENGINE_PINS.items())}), or give "
        "--node-modules DIR of an npm install of those versions"
    )


def _engine_package(node_modules: str, name: str, hint: str) -> str:
    """The installed package ``name`` (its folder), checked against :data:`ENGINE_PINS`."""
    folder = os.path.join(node_modules, *name.split("/"))
    try:
        with open(os.path.join(folder, "package.json"), encoding="utf-8") as f:
            version = json.load(f).get("version")
    except (OSError, ValueError):
        raise WebExportError(
            f"the page's engine {name} is not installed in {node_modules}: {hint}"
        ) from None
    if version != ENGINE_PINS[name]:
        raise WebExportError(
            f"{node_modules} has {name} {version}, the page is tested with "
            f"{ENGINE_PINS[name]}: {hint}"
        )
    return folder


# the transformation of @sctg/sentencepiece-js's dist/index.js into engine/sentencepiece.mjs:
# its two Node imports (read only by its load-from-a-path methods, which the page does not
# call) become plain values, so that a browser imports it as it is; its three built-in
# example models (about 3 MB of base64) become empty strings
_SPM_IMPORTS = {
    "import * as fs from 'fs';": "const fs = {}; // (lightcompress: Node's fs, not used in a page)",
    "import { Buffer as Buffer$1 } from 'buffer';":
        "const Buffer$1 = globalThis.Buffer; // (lightcompress: Node's Buffer where there is one)",
}  # fmt: skip
_SPM_MODELS = re.compile(r'^const (llama_3_1_tokeniser_b64|smart_b64|clean_30k_b64) = ".*";$')


def _sentencepiece_module(source: str) -> str:
    """engine/sentencepiece.mjs from the package's ``dist/index.js`` (see above)."""
    with open(source, encoding="utf-8") as f:
        lines = f.read().split("\n")
    done, models = set(), 0
    for i, line in enumerate(lines):
        if line in _SPM_IMPORTS:
            lines[i] = _SPM_IMPORTS[line]
            done.add(line)
        elif _SPM_MODELS.match(line):
            lines[i] = _SPM_MODELS.sub(r'const \1 = "";', line)
            models += 1
    if len(done) != len(_SPM_IMPORTS) or models != 3 or "SentencePieceProcessor" not in lines[-2]:
        raise WebExportError(
            f"{source} is not the file of @sctg/sentencepiece-js "
            f"{ENGINE_PINS['@sctg/sentencepiece-js']} that the page is tested "
            "with: reinstall it with npm ci"
        )
    head = (
        f"// @sctg/sentencepiece-js {ENGINE_PINS['@sctg/sentencepiece-js']} dist/index.js "
        "(Apache-2.0, see NOTICE.md), as lightcompress-export-web ships it: its Node "
        "imports replaced, its built-in example models left out."
    )
    return head + "\n" + "\n".join(lines)


_MIT = """Permission is hereby granted, free of charge, to any person obtaining a copy of this software
and associated documentation files (the "Software"), to deal in the Software without restriction,
including without limitation the rights to use, copy, modify, merge, publish, distribute,
sublicense, and/or sell copies of the Software, and to permit persons to whom the Software is
furnished to do so, subject to the following conditions:

The above copyright notice and this permission notice shall be included in all copies or
substantial portions of the Software.

THE SOFTWARE IS PROVIDED "AS IS", WITHOUT WARRANTY OF ANY KIND, EXPRESS OR IMPLIED, INCLUDING BUT
NOT LIMITED TO THE WARRANTIES OF MERCHANTABILITY, FITNESS FOR A PARTICULAR PURPOSE AND
NONINFRINGEMENT. IN NO EVENT SHALL THE AUTHORS OR COPYRIGHT HOLDERS BE LIABLE FOR ANY CLAIM,
DAMAGES OR OTHER LIABILITY, WHETHER IN AN ACTION OF CONTRACT, TORT OR OTHERWISE, ARISING FROM, OUT
OF OR IN CONNECTION WITH THE SOFTWARE OR THE USE OR OTHER DEALINGS IN THE SOFTWARE.
"""


def _write_engine(node_modules: str, engine: str, sentencepiece: bool, hint: str) -> None:
    """engine/: ONNX Runtime Web's WebAssembly build, sentencepiece.mjs, NOTICE.md."""
    os.makedirs(engine)
    ort = _engine_package(node_modules, "onnxruntime-web", hint)
    for name in ORT_FILES:
        path = os.path.join(ort, "dist", name)
        if not os.path.isfile(path):
            raise WebExportError(f"{path} is missing (a damaged install): {hint}")
        shutil.copyfile(path, os.path.join(engine, name))
    notice = [
        "# The engine of this page\n",
        "Copied by lightcompress-export-web from npm packages pinned by lightcompress's web/"
        + "package-lock.json.\n",
        f"## onnxruntime-web {ENGINE_PINS['onnxruntime-web']} ({', '.join(ORT_FILES)})\n",
        "ONNX Runtime, https://github.com/microsoft/onnxruntime. MIT License.\n",
        "Copyright (c) Microsoft Corporation\n\n" + _MIT,
    ]
    if sentencepiece:
        spm = _engine_package(node_modules, "@sctg/sentencepiece-js", hint)
        text = _sentencepiece_module(os.path.join(spm, "dist", "index.js"))
        with open(os.path.join(engine, "sentencepiece.mjs"), "w", encoding="utf-8") as f:
            f.write(text)
        with open(os.path.join(spm, "LICENSE"), encoding="utf-8") as f:
            licence = f.read()
        notice += [
            f"## @sctg/sentencepiece-js {ENGINE_PINS['@sctg/sentencepiece-js']} (sentencepiece.mjs)\n",
            (
                "Google's sentencepiece (https://github.com/google/sentencepiece) compiled to "
                "WebAssembly, https://github.com/sctg-development/sentencepiece-js; shipped here "
                "with its Node imports replaced and its built-in example models left out. "
                "Apache License 2.0:\n"
            ),
            licence,
        ]
    with open(os.path.join(engine, "NOTICE.md"), "w", encoding="utf-8") as f:
        f.write("\n".join(notice))


def _default_node_modules(page: str) -> str:
    """The engine's npm packages: beside the page's sources, else the checkout's (from its
    root)."""
    node_modules = os.path.join(page, "node_modules")
    checkout = os.path.join("web", "node_modules")
    if not os.path.isdir(node_modules) and os.path.isdir(checkout):
        return checkout
    return node_modules


def restore_engine(page_dir: str, node_modules: str | None = None) -> list[str]:
    """Write ``page_dir/engine/`` again (a page committed without its engine, e.g. the shipped
    default student's: the engine is 15 MB of npm files, pinned by ``web/package-lock.json``)
    and check it is what the page's ``web.json`` lists. Returns the engine's files."""
    try:
        with open(os.path.join(page_dir, "web.json"), encoding="utf-8") as f:
            listed = json.load(f)["engine"]["files"]
        with open(os.path.join(page_dir, "config.json"), encoding="utf-8") as f:
            spm = bool(json.load(f).get("spm"))
    except (OSError, ValueError, KeyError, TypeError) as exc:
        raise WebExportError(
            f"{page_dir} is not a page of lightcompress-export-web: {exc}"
        ) from None
    page = page_sources()
    hint = _npm_hint(page)
    if node_modules is None:
        node_modules = _default_node_modules(page)
    engine = os.path.join(page_dir, "engine")
    if os.path.isdir(engine):
        shutil.rmtree(engine)
    _write_engine(node_modules, engine, spm, hint)
    files = sorted(f"engine/{n}" for n in os.listdir(engine))
    if files != sorted(listed):
        raise WebExportError(
            f"{page_dir}: the engine written ({files}) is not the one its web.json lists"
        )
    return files


# --------------------------------------------------------------------------------------------
# the model's files
# --------------------------------------------------------------------------------------------


def pack_shortlist(shortlist, path: str) -> None:
    """Write ``shortlist`` (a :class:`lightcompress_runtime.Shortlist`) as the page reads it
    (``lightcompress.mjs``'s ``Shortlist``): ``LCSL0001``; uint32 source and target vocabulary
    sizes, number of ids always included, number of listed ids, id width (0: uint16, 1:
    uint32); uint32 list length per source id; uint32 ids always included; each list sorted and
    stored as differences; little-endian, gzip-compressed."""
    import numpy as np

    n_src, n_tgt = shortlist.sizes
    off = shortlist.offsets
    counts = np.diff(off).astype("<u4")
    lists = [np.sort(shortlist.targets[off[i] : off[i + 1]]) for i in range(n_src)]
    deltas = [np.diff(a, prepend=0) for a in lists]  # (a list's first id as it is)
    ids = np.concatenate(deltas) if deltas else np.zeros(0, dtype=np.int64)
    wide = n_tgt > 1 << 16
    listed = np.asarray(shortlist.listed, dtype="<u4")
    header = SHORTLIST_MAGIC + struct.pack("<5I", n_src, n_tgt, len(listed), len(ids), int(wide))
    body = (
        header
        + counts.tobytes()
        + listed.tobytes()
        + ids.astype("<u4" if wide else "<u2").tobytes()
    )
    with open(path, "wb") as f:
        f.write(gzip.compress(body, compresslevel=9, mtime=0))


def export_web(
    onnx_dir: str,
    out_dir: str,
    node_modules: str | None = None,
    threads: int = 1,
    source_lang: str | None = None,
    shortlist: bool = True,
) -> dict:
    """Write the page of the ONNX export ``onnx_dir`` into the new (or empty) folder
    ``out_dir`` (see the module notes); ``node_modules``: where the engine's npm packages are
    installed (default: beside the page's sources); ``threads``: ONNX Runtime Web's threads
    where the page is cross-origin isolated (one elsewhere); ``source_lang``: the language the
    page names; ``shortlist``: ship the export's shortlist (the page then scores only its
    candidates; False: every token). Returns what ``web.json`` holds.
    Raises :class:`WebExportError` (nothing written)."""
    from lightcompress.io import atomic_directory
    from lightcompress_runtime import OnnxError, Shortlist, load_config
    from lightcompress_runtime.files import config_path, file_sha256, read_symbols

    try:
        config = load_config(onnx_dir)  # (the manifest: every file as the exporter wrote it)
    except OnnxError as exc:
        raise WebExportError(str(exc)) from None
    if config.get("bpe"):
        raise WebExportError(
            f"{onnx_dir} tokenizes with Moses + subword-nmt BPE, which the page "
            "cannot do exactly: export the model with a sentencepiece model "
            "(lightcompress-export-onnx --spm)"
        )
    if threads < 1:
        raise WebExportError(f"--threads must be >= 1, got {threads}")
    if os.path.exists(out_dir) and (not os.path.isdir(out_dir) or os.listdir(out_dir)):
        raise WebExportError(f"{out_dir} exists: give a new or empty directory")
    parent = os.path.dirname(os.path.abspath(out_dir))
    if not os.path.isdir(parent):
        raise WebExportError(f"cannot create {out_dir}: {parent} is not a directory")
    page = page_sources()
    hint = _npm_hint(page)
    if node_modules is None:
        node_modules = _default_node_modules(page)
    for name in ENGINE_PINS:  # (before anything is written)
        if name != "@sctg/sentencepiece-js" or config.get("spm"):
            _engine_package(node_modules, name, hint)
    model_files = ["config.json", "encoder.onnx", "decoder.onnx", "dict.src.txt", "dict.tgt.txt"]
    model_files += [config[k] for k in ("shortlist_rows", "spm") if config.get(k)]
    if os.path.isfile(os.path.join(onnx_dir, "weights.bin")):
        model_files.append("weights.bin")
    with atomic_directory(out_dir) as tmp:
        for name in model_files:
            shutil.copyfile(os.path.join(onnx_dir, name), os.path.join(tmp, name))
        packed_name = None
        if config.get("shortlist") and shortlist:
            dicts = [read_symbols(os.path.join(onnx_dir, f"dict.{s}.txt")) for s in ("src", "tgt")]
            specials = (config["pad"], config["eos"], config["unk"])
            try:
                packed = Shortlist(
                    config_path(onnx_dir, config, "shortlist"),
                    *dicts,
                    specials=specials,
                    old_text=True,
                )
            except OnnxError as exc:
                raise WebExportError(str(exc)) from None
            packed_name = "shortlist.bin"
            pack_shortlist(packed, os.path.join(tmp, packed_name))
            model_files.append(packed_name)
        for name in PAGE_FILES:
            shutil.copyfile(os.path.join(page, name), os.path.join(tmp, name))
        _write_engine(node_modules, os.path.join(tmp, "engine"), bool(config.get("spm")), hint)
        engine_files = sorted(f"engine/{n}" for n in os.listdir(os.path.join(tmp, "engine")))
        size = lambda names: sum(os.path.getsize(os.path.join(tmp, n)) for n in names)
        web = {
            "format": FORMAT,
            "version": VERSION,
            "architecture": config.get("architecture"),
            "int8": config.get("int8"),
            "source_lang": source_lang,
            "tokenizer": "sentencepiece" if config.get("spm") else None,
            "shortlist": packed_name,
            "threads": threads,
            "files": model_files,
            "sha256": {n: file_sha256(os.path.join(tmp, n)) for n in model_files},
            "engine": {**ENGINE_PINS, "files": engine_files},
            "sizes": {
                "model": size(model_files),
                "engine": size(engine_files),
                "page": size(PAGE_FILES),
            },
        }
        with open(os.path.join(tmp, "web.json"), "w", encoding="utf-8") as f:
            json.dump(web, f, indent=1)
        names = sorted(["web.json", *PAGE_FILES, *model_files, *engine_files])
        with open(os.path.join(tmp, "SHA256SUMS"), "w", encoding="utf-8") as f:
            f.writelines(f"{file_sha256(os.path.join(tmp, n))}  {n}\n" for n in names)
    return web


# --------------------------------------------------------------------------------------------
# command
# --------------------------------------------------------------------------------------------


def _arg_parser() -> argparse.ArgumentParser:
    p = cli.OneLineParser(
        prog=PROG,
        description="Write a static web page that translates offline with an ONNX export of "
        "lightcompress-export-onnx (best made with --int8 all, --spm and --shortlist): the "
        "page, its ES module, the model and ONNX Runtime Web; serve the folder with any static "
        "server, e.g. python -m http.server -d OUT.",
    )
    p.add_argument("onnx_export", help="an export of lightcompress-export-onnx (its folder)")
    p.add_argument("-o", "--output", required=True, help="output folder (new or empty)")
    p.add_argument(
        "--node-modules",
        metavar="DIR",
        help="node_modules of an npm install of the pinned onnxruntime-web and "
        "@sctg/sentencepiece-js (default: npm ci's beside the page's sources, else "
        "./web/node_modules: make web's in the checkout)",
    )
    p.add_argument(
        "--threads",
        type=int,
        default=1,
        help="ONNX Runtime Web's threads where the page is served cross-origin "
        "isolated (default 1; other pages always run one)",
    )
    p.add_argument(
        "--no-shortlist",
        action="store_true",
        help="leave the export's shortlist out: the page scores every token (by default it "
        "scores only the shortlist's candidates when the export has one)",
    )
    p.add_argument(
        "--source-lang",
        metavar="LANG",
        help="the source language the page names (e.g. de; default: none)",
    )
    return p


def main(argv: Sequence[str] | None = None) -> int:
    """``lightcompress-export-web``: the exit status (errors as one line, status 2)."""
    return cli.run(_main, argv, PROG)


def _main(argv: Sequence[str] | None) -> int:
    args = _arg_parser().parse_args(argv)
    try:
        web = export_web(
            args.onnx_export,
            args.output,
            args.node_modules,
            args.threads,
            args.source_lang,
            shortlist=not args.no_shortlist,
        )
    except OSError as exc:  # a full disk, a read-only file system (nothing is left)
        raise WebExportError(f"cannot write {args.output}: {exc.strerror or exc}") from None
    sizes = web["sizes"]
    print(
        f"{PROG}: model files {sizes['model'] / 1e6:.2f} MB ({len(web['files'])} files), "
        f"engine {sizes['engine'] / 1e6:.2f} MB, page {sizes['page'] / 1e3:.0f} kB",
        file=sys.stderr,
    )
    if web["tokenizer"] is None:
        print(
            f"{PROG}: no tokenizer in the export: the page takes space-separated subword "
            "tokens (export with --spm for text)",
            file=sys.stderr,
        )
    print(
        f"{PROG}: wrote {args.output}; open it with: python -m http.server -d {args.output} "
        "8000, then http://localhost:8000/",
        file=sys.stderr,
    )
    return 0


cli_main = cli.entry_point(main, quiet=True)


if __name__ == "__main__":
    cli_main()
