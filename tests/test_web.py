"""The page (issue 57): ``lightcompress-export-web`` writes a static folder whose ES module,
``web/lightcompress.mjs``, translates as the Python runtime does.

- under Node with onnxruntime-node (native ONNX Runtime, as the Python runtime's), the
  module's beam search gives :mod:`lightcompress_runtime.search`'s n-best lists, token for token
  and score for score, on 160 test sentences of the tiny fixtures' models (a sentencepiece toy
  model in float32 and in int8 with a shortlist, and ``tiny_transformer`` without a tokenizer),
  over beam sizes, length penalties, min / max lengths, the unknown penalty and batch sizes;
  its text loop (tokenization, batches, detokenization, blank and unknown input) gives
  :class:`~lightcompress_runtime.OnnxTranslator`'s lines;
- under Node with the export's own engine (ONNX Runtime Web's WebAssembly build), the same
  translations but for float rounding (near-ties may differ: the share is asserted);
- in headless Chromium (Debian's ``chromium``, driven by playwright-core), the page served by a
  static server translates typed German sentences as the Python runtime does, offline, and
  stays responsive while it translates many lines.

Node, ``web/node_modules`` (``npm ci`` in web/) and Chromium are installed by ``.ci/run``; on a
developer's machine without them these tests skip with the command to run, in CI (``CI`` set)
they fail instead.
"""

from __future__ import annotations

import functools
import http.server
import json
import os
import shutil
import subprocess
import sys
import threading

import numpy as np
import pytest
from harness import REPO_ROOT, make_parallel_corpus

__all__: list[str] = []

WEB = os.path.join(REPO_ROOT, "web")
NODE_MODULES = os.path.join(WEB, "node_modules")
CHROMIUM = os.environ.get("LIGHTCOMPRESS_CHROMIUM", "/usr/bin/chromium")
TEACHER = os.path.join(REPO_ROOT, "examples", "translation", "results", "teacher")


def _need(what: str, ok: bool, fix: str) -> None:
    """Skip without ``what`` on a developer's machine (with the command that installs it);
    fail in CI, which installs it (.ci/run): a missing tool is never a pass there."""
    if ok:
        return
    message = f"{what} is not installed: {fix}"
    if os.environ.get("CI"):
        pytest.fail(message + " (.ci/run installs it)")
    pytest.skip(message)


def _need_node() -> None:
    _need("node", shutil.which("node") is not None, "install Node.js 20 (apt-get install nodejs)")
    _need(
        "web/node_modules",
        os.path.isdir(os.path.join(NODE_MODULES, "onnxruntime-node")),
        "run `make web` (npm ci in web/)",
    )


def _node(script: str, job: dict, timeout: int = 600) -> dict:
    """Run web/test/``script`` with ``job`` on stdin; its JSON answer."""
    proc = subprocess.run(
        ["node", os.path.join(WEB, "test", script)],
        input=json.dumps(job),
        capture_output=True,
        text=True,
        cwd=WEB,
        timeout=timeout,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    return json.loads(proc.stdout)


# --------------------------------------------------------------------------------------------
# fixtures: the tiny fixtures' models, exported for the page
# --------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def toy(tmp_path_factory):
    """The deploy tests' toy model (a sentencepiece word model of the toy corpus, a 2-2
    Transformer trained for 30 updates) with 120 test sentences, exported to ONNX in float32
    and in int8 with a shortlist, and both exports as pages."""
    from test_deploy import TINY, _binarize, _sentencepiece, make_checkpoint
    from test_shortlist import _small_shortlist

    from lightcompress.checkpoint import load_checkpoint
    from lightcompress.deploy.onnx_export import export_onnx
    from lightcompress.deploy.web_export import export_web

    _need_node()
    root = tmp_path_factory.mktemp("web")
    raw = make_parallel_corpus(str(root / "raw"), n_train=400, n_valid=10, n_test=120)
    spm, pieces = _sentencepiece(raw, root)
    data = _binarize(pieces, str(root / "bin"))
    ckpt = make_checkpoint(data, str(root / "teacher.pt"), "transformer", TINY, updates=30)
    model, task, _ = load_checkpoint(ckpt, data)
    shortlist = _small_shortlist(root / "sl.txt", task)
    out = {
        "raw": raw,
        "lines": _lines(os.path.join(raw, "test.de")),
        "ckpt": ckpt,
        "data": data,
        "spm": spm,
        "shortlist": shortlist,
    }
    export_onnx(model, task, str(root / "f32"), spm=spm)
    model, task, _ = load_checkpoint(ckpt, data)
    export_onnx(model, task, str(root / "int8"), int8="all", spm=spm, shortlist=shortlist)
    for name in ("f32", "int8"):
        export_web(str(root / name), str(root / f"{name}-web"), source_lang="de")
        out[name] = str(root / name)
        out[f"{name}-web"] = str(root / f"{name}-web")
    return out


@pytest.fixture(scope="module")
def tiny(tiny_data, tiny_transformer, tmp_path_factory):
    """``tiny_transformer`` (fairseq-train, 10 epochs) exported without a tokenizer: its page
    takes the data's tokens."""
    from lightcompress.checkpoint import load_checkpoint
    from lightcompress.deploy.onnx_export import export_onnx
    from lightcompress.deploy.web_export import export_web

    _need_node()
    root = tmp_path_factory.mktemp("web-tiny")
    model, task, _ = load_checkpoint(
        os.path.join(tiny_transformer, "checkpoint_best.pt"), tiny_data
    )
    export_onnx(model, task, str(root / "f32"))
    export_web(str(root / "f32"), str(root / "web"))
    lines = _lines(os.path.join(os.path.dirname(tiny_data), "raw", "test.de"))
    return {"f32": str(root / "f32"), "web": str(root / "web"), "lines": lines}


def _lines(path: str) -> list[str]:
    with open(path, encoding="utf-8") as f:
        return [line.rstrip("\n") for line in f]


# --------------------------------------------------------------------------------------------
# the search, token for token
# --------------------------------------------------------------------------------------------

SETTINGS = [  # (the JavaScript option names; fairseq's flags)
    {"beam": 5},
    {"beam": 1},
    {"beam": 4, "lenpen": 0.6, "minLen": 3, "maxLenB": 6, "unkPenalty": 0.5},
    {"beam": 3, "lenpen": 1.3, "maxLenA": 0.5, "maxLenB": 2},
]
_PY = {
    "beam": "beam_size",
    "lenpen": "len_penalty",
    "minLen": "min_len",
    "maxLenA": "max_len_a",
    "maxLenB": "max_len_b",
    "unkPenalty": "unk_penalty",
}


def _batches(translator, lines, batch_size):
    from lightcompress_runtime import left_pad_batches

    encoded = [translator.encode(line) for line in lines if line.strip()]
    return [src for _, src, _ in left_pad_batches(encoded, batch_size, translator.src_pad)]


def _same_nbest(onnx_dir, web_dir, lines, shortlist, batch_size=32, tokenized=False):
    """The module's n-best lists (engine: onnxruntime-node) are the Python runtime's for every
    setting of SETTINGS: the same hypotheses in the same order, the same float32 scores."""
    from lightcompress_runtime import OnnxGenerator, OnnxTranslator

    translator = OnnxTranslator(onnx_dir, tokenized=tokenized)
    batches = _batches(translator, lines, batch_size)
    jobs = [
        {"mode": "generate", "options": s, "batches": [{"src": b.tolist()} for b in batches]}
        for s in SETTINGS
    ]
    answer = _node(
        "translate-node.mjs",
        {"dir": web_dir, "engine": "node", "shortlist": shortlist, "jobs": jobs},
    )
    assert "error" not in answer, answer
    compared = 0
    for settings, result in zip(SETTINGS, answer["results"]):
        gen = OnnxGenerator(
            onnx_dir, shortlist=shortlist, **{_PY[k]: v for k, v in settings.items()}
        )
        for src, js in zip(batches, result["out"]):
            py = gen.generate(src, (src != translator.src_pad).sum(1))
            assert len(js) == len(py)
            for a, b in zip(py, js):
                assert [h["tokens"].tolist() for h in a] == [h["tokens"] for h in b], settings
                assert [np.float32(h["score"]) for h in a] == [np.float32(h["score"]) for h in b]
                compared += 1
    return compared


def test_the_modules_beam_search_gives_the_runtimes_nbest_lists_token_for_token(toy, tiny):
    """fairseq's search written once in JavaScript: on 160 test sentences (the toy model's 120,
    tiny_transformer's 40) over four settings and two batch sizes, every hypothesis of every
    n-best list and its score are the Python runtime's."""
    n = _same_nbest(toy["f32"], toy["f32-web"], toy["lines"], shortlist=False)
    n += _same_nbest(toy["f32"], toy["f32-web"], toy["lines"][:40], shortlist=False, batch_size=7)
    n += _same_nbest(tiny["f32"], tiny["web"], tiny["lines"], shortlist=False, tokenized=True)
    assert n == len(SETTINGS) * (120 + 40 + len(tiny["lines"])) and len(tiny["lines"]) == 40


def test_the_shortlist_searches_the_runtimes_candidates(toy):
    """An int8 export with a shortlist: with it (the candidates of shortlist.bin, the page's
    packing of the export's lists) and without it, the runtime's n-best lists."""
    _same_nbest(toy["int8"], toy["int8-web"], toy["lines"], shortlist=True)
    _same_nbest(toy["int8"], toy["int8-web"], toy["lines"][:30], shortlist=False)


def test_the_modules_text_loop_gives_the_runtimes_lines(toy, tiny):
    """Text in, text out (sentencepiece in WebAssembly, batches, fairseq's detokenization): the
    runtime's lines for the 120 test sentences and for odd input: blank lines, characters
    outside the vocabulary, CRLF, spaces; a line over the source positions refused with the
    runtime's message, or (translateEach) given a message of its own while the others are
    translated."""
    from lightcompress_runtime import OnnxError, OnnxTranslator

    odd = ["", "   ", "s1 s2 ünknöwn 😀 s3", "s4\r", "\ts5  s6 ", "zzz", "s7 " * 40]
    lines = toy["lines"] + odd
    for name, shortlist, beam in (("f32", False, 5), ("int8", True, 5), ("int8", True, 1)):
        py = OnnxTranslator(toy[name], beam=beam, shortlist=shortlist).translate(lines)
        job = {"mode": "translate", "lines": lines, "options": {"beam": beam}}
        answer = _node(
            "translate-node.mjs",
            {"dir": toy[f"{name}-web"], "engine": "node", "shortlist": shortlist, "jobs": [job]},
        )
        assert answer["results"][0]["out"] == py
    py = OnnxTranslator(tiny["f32"], tokenized=True).translate(tiny["lines"])
    job = {"mode": "translate", "lines": tiny["lines"]}
    answer = _node("translate-node.mjs", {"dir": tiny["web"], "engine": "node", "jobs": [job]})
    assert answer["results"][0]["out"] == py

    too_long = ["s1 s2", "s3 " * 1100]
    with pytest.raises(OnnxError) as info:
        OnnxTranslator(toy["f32"]).translate(too_long)
    for each in (False, True):
        job = {"mode": "translate", "lines": too_long, "each": each}
        answer = _node(
            "translate-node.mjs", {"dir": toy["f32-web"], "engine": "node", "jobs": [job]}
        )
        if each:
            out = answer["results"][0]["out"]
            assert out[0] == {"text": OnnxTranslator(toy["f32"]).translate(["s1 s2"])[0]}
            assert out[1] == {"error": str(info.value)}
        else:
            assert answer == {"error": str(info.value), "name": "WebError"}


def test_onnx_runtime_web_translates_as_the_runtime_but_for_float_rounding(toy):
    """The export's own engine/ (ONNX Runtime Web, WebAssembly, one thread) under Node: the
    runtime's translations of the 120 test sentences, all of them in float32; in int8 at
    least 95 % (its kernels sum in another order: a near-tie may go the other way)."""
    from lightcompress_runtime import OnnxTranslator

    for name, shortlist, least, beams in (("f32", False, 120, (5,)), ("int8", True, 114, (5, 1))):
        for beam in beams:
            py = OnnxTranslator(toy[name], beam=beam, shortlist=shortlist).translate(toy["lines"])
            job = {"mode": "translate", "lines": toy["lines"], "options": {"beam": beam}}
            answer = _node(
                "translate-node.mjs",
                {"dir": toy[f"{name}-web"], "engine": "web", "shortlist": shortlist, "jobs": [job]},
            )
            same = sum(a == b for a, b in zip(py, answer["results"][0]["out"]))
            assert same >= least, (name, beam, same)


# --------------------------------------------------------------------------------------------
# the export's files and refusals
# --------------------------------------------------------------------------------------------


def test_the_page_folder_holds_the_model_the_engine_and_their_checksums(toy):
    """What a static server needs and nothing else: the page, the model files the page's
    web.json lists with their sha256, the engine with its notice, SHA256SUMS of all of it."""
    import hashlib

    folder = toy["int8-web"]
    with open(os.path.join(folder, "web.json"), encoding="utf-8") as f:
        web = json.load(f)
    files = sorted(
        os.path.relpath(os.path.join(d, n), folder)
        for d, _, names in os.walk(folder)
        for n in names
    )
    assert web["files"] == [
        "config.json",
        "encoder.onnx",
        "decoder.onnx",
        "dict.src.txt",
        "dict.tgt.txt",
        "rows.onnx",
        "spm.model",
        "weights.bin",
        "shortlist.bin",
    ]
    engine = [
        "engine/NOTICE.md",
        "engine/ort-wasm-simd-threaded.mjs",
        "engine/ort-wasm-simd-threaded.wasm",
        "engine/ort.wasm.min.mjs",
        "engine/sentencepiece.mjs",
    ]
    assert files == sorted(
        ["SHA256SUMS", "web.json", "index.html", "lightcompress.mjs", *web["files"], *engine]
    )
    assert web["engine"]["files"] == engine and web["tokenizer"] == "sentencepiece"
    with open(os.path.join(folder, "SHA256SUMS"), encoding="utf-8") as f:
        sums = dict(reversed(line.rstrip("\n").split("  ")) for line in f)
    assert sorted(sums) == [f for f in files if f != "SHA256SUMS"]
    for name, digest in sums.items():
        with open(os.path.join(folder, name), "rb") as f:
            assert hashlib.sha256(f.read()).hexdigest() == digest
        if name in web["files"]:
            assert web["sha256"][name] == digest
    assert web["sizes"]["model"] == sum(
        os.path.getsize(os.path.join(folder, n)) for n in web["files"]
    )
    with open(os.path.join(folder, "engine", "sentencepiece.mjs"), encoding="utf-8") as f:
        spm = f.read()
    assert "from 'fs'" not in spm and "from 'buffer'" not in spm and len(spm) < 1_000_000


def test_a_page_committed_without_its_engine_gets_the_same_engine_back(toy, tmp_path):
    """make web-student: the shipped page is committed without engine/ (15 MB of npm files);
    restore_engine writes it again from the pinned packages, byte for byte the export's, and
    refuses a folder that is not a page with one line."""
    from lightcompress.deploy.web_export import WebExportError, restore_engine

    folder = tmp_path / "web"
    shutil.copytree(toy["int8-web"], folder)
    before = {n: (folder / "engine" / n).read_bytes() for n in os.listdir(folder / "engine")}
    shutil.rmtree(folder / "engine")
    files = restore_engine(str(folder))
    assert files == sorted(f"engine/{n}" for n in before)
    assert {n: (folder / "engine" / n).read_bytes() for n in before} == before
    with pytest.raises(WebExportError, match="is not a page of lightcompress-export-web"):
        restore_engine(str(tmp_path))


def test_the_shipped_default_students_page_is_what_its_card_and_sums_say():
    """Issue 57 item 4: the default student's page in the repository (without its engine,
    which make web-student restores): every committed file is the one SHA256SUMS lists, the
    model files are web.json's, and the card's scores are those of its scores.json."""
    import hashlib

    folder = os.path.join(REPO_ROOT, "examples", "translation", "results", "web-student")
    with open(os.path.join(folder, "SHA256SUMS"), encoding="utf-8") as f:
        sums = dict(reversed(line.rstrip("\n").split("  ")) for line in f)
    with open(os.path.join(folder, "web.json"), encoding="utf-8") as f:
        web = json.load(f)
    assert set(sums) == {
        "web.json",
        "index.html",
        "lightcompress.mjs",
        "MODEL_CARD.md",
        "scores.json",
        *web["files"],
        *web["engine"]["files"],
    }
    for name, digest in sums.items():
        path = os.path.join(folder, name)
        if name.startswith("engine/") and not os.path.exists(path):
            continue  # (not committed: make web-student)
        with open(path, "rb") as f:
            assert hashlib.sha256(f.read()).hexdigest() == digest, name
    assert web["sizes"]["model"] < 7e6  # (item 5: at most 7 MB of model files)
    with open(os.path.join(folder, "scores.json"), encoding="utf-8") as f:
        scores = json.load(f)
    with open(os.path.join(folder, "MODEL_CARD.md"), encoding="utf-8") as f:
        card = f.read()
    assert (
        f"BLEU **{scores['python_runtime']['bleu']:.2f}**" in card
        and "python -m http.server -d" in card
    )
    # the Python runtime pointed at the page says what it is (not "lacks shortlist.npz")
    from lightcompress_runtime import OnnxError, OnnxTranslator

    with pytest.raises(OnnxError, match=r"is a web page \(lightcompress-export-web: web.json\)"):
        OnnxTranslator(folder)


def test_a_changed_model_file_is_refused_by_the_page(toy, tmp_path):
    """A model file that is not the one the export wrote (a truncated download, an edit): the
    module refuses it with one line naming it."""
    _need_node()
    folder = tmp_path / "web"
    shutil.copytree(toy["f32-web"], folder)
    with open(folder / "decoder.onnx", "ab") as f:
        f.write(b"\0")
    answer = _node("translate-node.mjs", {"dir": str(folder), "engine": "web", "jobs": []})
    assert answer["name"] == "WebError" and "decoder.onnx differs" in answer["error"]


def test_the_pins_are_the_lock_files():
    """The engine the export copies is the one web/package-lock.json pins, exactly."""
    from lightcompress.deploy.web_export import ENGINE_PINS

    with open(os.path.join(WEB, "package-lock.json"), encoding="utf-8") as f:
        lock = json.load(f)
    with open(os.path.join(WEB, "package.json"), encoding="utf-8") as f:
        package = json.load(f)
    assert package["dependencies"] == ENGINE_PINS
    for name, version in ENGINE_PINS.items():
        assert lock["packages"][f"node_modules/{name}"]["version"] == version
    for name, version in {**package["dependencies"], **package["devDependencies"]}.items():
        assert lock["packages"][f"node_modules/{name}"]["version"] == version


def test_a_pip_install_carries_the_page_and_its_pins():
    """setup.py installs web/'s page files and npm pins as lightcompress/webpage (where
    lightcompress-export-web finds them outside a checkout) and the console script."""
    import ast

    from lightcompress.deploy.web_export import PAGE_FILES

    with open(os.path.join(REPO_ROOT, "setup.py"), encoding="utf-8") as f:
        tree = ast.parse(f.read())
    call = next(
        n
        for n in ast.walk(tree)
        if isinstance(n, ast.Call) and getattr(n.func, "id", None) == "setup"
    )
    kw = {k.arg: k.value for k in call.keywords}
    assert ast.literal_eval(kw["package_dir"]) == {"lightcompress.webpage": "web"}
    data = ast.literal_eval(kw["package_data"])["lightcompress.webpage"]
    assert {*PAGE_FILES, "package.json", "package-lock.json"} <= set(data)
    scripts = ast.literal_eval(kw["entry_points"])["console_scripts"]
    assert "lightcompress-export-web=lightcompress.deploy.web_export:cli_main" in scripts


def _export_web(args, capsys) -> tuple[int, list[str]]:
    """``lightcompress-export-web args`` in this process: its status and stderr lines."""
    from lightcompress.deploy.web_export import main

    try:
        status = main(args)
    except SystemExit as exc:  # (argparse)
        status = exc.code
    return status, capsys.readouterr().err.strip().splitlines()


def test_the_command_refuses_what_it_cannot_use_with_one_line(toy, tmp_path, capsys):
    """Moses + BPE (no exact tokenizer in the page), an edited export, an output that is not
    new, engine packages missing or of other versions: one line, status 2, nothing written."""
    from lightcompress.deploy.onnx_tools import write_manifest

    bpe = tmp_path / "bpe"
    shutil.copytree(toy["f32"], bpe)
    config = json.loads((bpe / "config.json").read_text())
    config["bpe"] = {
        "codes": "bpe.codes",
        "tokenizer": "moses",
        "source_lang": "de",
        "target_lang": "en",
        "lowercase": False,
        "aggressive_dash_splits": False,
    }
    (bpe / "config.json").write_text(json.dumps(config))
    (bpe / "bpe.codes").write_text("#version: 0.2\ns 1\n")
    write_manifest(str(bpe))
    edited = tmp_path / "edited"
    shutil.copytree(toy["f32"], edited)
    with open(edited / "weights.bin", "ab") as f:
        f.write(b"\0")
    old = tmp_path / "old-node-modules" / "onnxruntime-web"
    old.mkdir(parents=True)
    (old / "package.json").write_text('{"version": "1.17.0"}')
    nonempty = tmp_path / "nonempty"
    nonempty.mkdir()
    (nonempty / "x").write_text("x")
    out = str(tmp_path / "out")
    cases = [
        ([str(bpe), "-o", out], "Moses + subword-nmt BPE"),
        ([str(edited), "-o", out], "weights.bin"),
        ([str(tmp_path / "none"), "-o", out], "model directory not found"),
        ([toy["f32"], "-o", str(nonempty)], "exists: give a new or empty directory"),
        ([toy["f32"], "-o", out, "--node-modules", str(tmp_path)], "npm ci --omit=dev"),
        ([toy["f32"], "-o", out, "--node-modules", str(old.parent)], "1.17.0"),
        ([toy["f32"], "-o", out, "--threads", "0"], "--threads must be >= 1"),
        ([toy["f32"]], "required: -o/--output"),
    ]
    for args, expected in cases:
        status, err = _export_web(args, capsys)
        assert status == 2 and len(err) == 1, (args, err)
        assert err[0].startswith("lightcompress-export-web: error: ") and expected in err[0], err
        assert not os.path.exists(out)
    proc = subprocess.run(
        [sys.executable, "-m", "lightcompress.deploy.web_export", "--help"],
        capture_output=True,
        text=True,
        check=False,
    )
    assert (
        proc.returncode == 0 and "--node-modules" in proc.stdout and "--no-shortlist" in proc.stdout
    )
    status, err = _export_web([toy["int8"], "-o", out, "--no-shortlist"], capsys)
    with open(os.path.join(out, "web.json"), encoding="utf-8") as f:
        web = json.load(f)
    assert status == 0 and web["shortlist"] is None and "shortlist.bin" not in os.listdir(out)
    assert err[-1].startswith(f"lightcompress-export-web: wrote {out}; open it with: python -m")


SHIP = os.path.join(REPO_ROOT, "lab", "results", "ship_web_student.py")


def _ship(*args):
    env = dict(os.environ, PYTHONPATH=REPO_ROOT, PYTHONWARNINGS="ignore")
    return subprocess.run(
        [sys.executable, SHIP, *args], capture_output=True, text=True, env=env, check=False
    )


def test_one_command_ships_a_students_page_with_its_model_card(toy, tmp_path):
    """ship_web_student.py: a checkpoint in, its int8 page out with MODEL_CARD.md (the Python
    runtime's BLEU / chrF on the test split, every file's size, the commands) and SHA256SUMS
    of every file; bad arguments are one line."""
    import hashlib

    import sacrebleu

    from lightcompress_runtime import OnnxTranslator

    out = tmp_path / "web-student"
    src, ref = (os.path.join(toy["raw"], f"test.{lang}") for lang in ("de", "en"))
    proc = _ship(
        "--path",
        toy["ckpt"],
        "--data",
        toy["data"],
        "--spm",
        toy["spm"],
        "--shortlist",
        toy["shortlist"],
        "--src",
        src,
        "--ref",
        ref,
        "--out",
        str(out),
        "--command",
        "lightcompress-compress teacher.pt --data bin",
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    card = (out / "MODEL_CARD.md").read_text()
    scores = json.loads((out / "scores.json").read_text())["python_runtime"]
    # (the same BLEU as the toy's int8 export with the same shortlist, made by the test)
    hyps = OnnxTranslator(toy["int8"], beam=5, shortlist=True).translate(_lines(src))
    assert scores["bleu"] == round(sacrebleu.corpus_bleu(hyps, [_lines(ref)]).score, 2)
    assert f"- BLEU **{scores['bleu']}** (`nrefs:1|" in card and scores["sentences"] == 120
    web = json.loads((out / "web.json").read_text())
    for name in web["files"] + web["engine"]["files"]:
        assert f"| `{name}` | {os.path.getsize(out / name) / 1e6:.2f} MB |" in card
    assert "lightcompress-compress teacher.pt --data bin" in card and "--int8 all" in card
    lines = (out / "SHA256SUMS").read_text().splitlines()
    names = {line.split("  ", 1)[1] for line in lines}
    assert {"MODEL_CARD.md", "scores.json", "index.html", "engine/ort.wasm.min.mjs"} <= names
    for line in lines:
        digest, name = line.split("  ", 1)
        assert hashlib.sha256((out / name).read_bytes()).hexdigest() == digest
    for args, expected in [
        (["--src", src, "--ref", ref], "give --path, --data and --spm"),
        (["--onnx", toy["int8"], "--path", toy["ckpt"], "--src", src, "--ref", ref], "--onnx is"),
        (["--onnx", toy["int8"], "--src", src, "--ref", ref, "--out", str(out)], "--force"),
        (["--onnx", toy["int8"], "--src", src, "--ref", src + "x"], "not found"),
    ]:
        proc = _ship(*args)
        err = proc.stderr.strip().splitlines()
        assert proc.returncode == 2 and len(err) == 1 and expected in err[0], proc.stderr


# --------------------------------------------------------------------------------------------
# in a real browser
# --------------------------------------------------------------------------------------------


class _Quiet(http.server.SimpleHTTPRequestHandler):
    def log_message(self, *args):
        pass


@pytest.fixture(scope="module")
def served(tmp_path_factory):
    """The shipped teacher (German -> English) exported in int8 with its sentencepiece model,
    as a page served by Python's static server on 127.0.0.1."""
    from lightcompress.checkpoint import load_checkpoint
    from lightcompress.deploy.onnx_export import export_onnx
    from lightcompress.deploy.web_export import export_web

    _need_node()
    _need("chromium", os.path.isfile(CHROMIUM), "apt-get install chromium")
    _need(
        "playwright-core",
        os.path.isdir(os.path.join(NODE_MODULES, "playwright-core")),
        "run `make web` (npm ci in web/)",
    )
    root = tmp_path_factory.mktemp("web-teacher")
    model, task, _ = load_checkpoint(os.path.join(TEACHER, "checkpoint.pt"), TEACHER, "de", "en")
    export_onnx(model, task, str(root / "onnx"), int8="all", spm=os.path.join(TEACHER, "spm.model"))
    export_web(str(root / "onnx"), str(root / "web"), source_lang="de")
    handler = functools.partial(_Quiet, directory=str(root / "web"))
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield {
        "onnx": str(root / "onnx"),
        "url": f"http://127.0.0.1:{server.server_port}/",
        "root": root,
    }
    server.shutdown()
    server.server_close()


GERMAN = [
    "Die Datei konnte nicht gelesen werden.",
    "Passwort ändern",
    "Benutzer löschen\nNeuen Ordner anlegen",
    "Sind Sie sicher, dass Sie diesen Eintrag löschen möchten?",
    "Die Verbindung zum Server ist fehlgeschlagen.\n\nBitte versuchen Sie es später erneut.",
    "Einstellungen speichern",
]


def test_the_page_in_headless_chromium_translates_as_the_runtime(served):
    """German typed into the page in Chromium, offline (every request that leaves the static
    server fails): the English is the Python runtime's, line for line; an empty input and
    characters outside the vocabulary give a message or a translation."""
    from lightcompress_runtime import OnnxTranslator

    odd = ["", "😀 Ünïcødé ✓✓✓ \u200b"]
    answer = _node(
        "browser.mjs", {"url": served["url"], "chromium": CHROMIUM, "inputs": GERMAN + odd}
    )
    assert "error" not in answer, answer
    assert not [m for m in answer["console"] if m.startswith(("error", "pageerror"))]
    runtime = OnnxTranslator(served["onnx"], beam=5)
    for text, out in zip(GERMAN, answer["outputs"]):
        assert out["target"].split("\n") == runtime.translate(text.split("\n")), out
        assert out["messages"] == [] and out["status"].endswith("ms.")
    empty, unknown = answer["outputs"][len(GERMAN) :]
    assert empty["target"] == "" and "Type or paste text" in empty["status"]
    assert unknown["target"] == runtime.translate([odd[1]])[0]


def test_the_page_stays_responsive_and_answers_every_line(served):
    """Many lines at once and a line over the model's source positions: the page answers a
    script while its Worker translates (within a few seconds at most on a loaded machine),
    writes one output line per input line, and names the line it could not translate."""
    lines = [GERMAN[i % len(GERMAN)].split("\n")[0] for i in range(150)]
    lines[7] = "Datei " * 1200
    answer = _node(
        "browser.mjs", {"url": served["url"], "chromium": CHROMIUM, "probe": {"lines": lines}}
    )
    probe = answer["probe"]
    assert "error" not in answer, answer
    # (a page whose translation ran on its main thread would not answer until it was done)
    assert probe["lines"] == 150 and probe["answers"] >= 5 and probe["slowest"] < 3000, probe
    assert probe["status"].startswith("149 lines in"), probe
    assert len(probe["messages"]) == 1 and probe["messages"][0].startswith(
        "Line 8: input line 8 has "
    )
    assert "source positions: split it" in probe["messages"][0]


def test_the_page_opened_as_a_file_says_how_to_serve_it(served):
    """Browsers run no module worker from file://: the page says how to serve its folder
    instead of loading forever."""
    url = (served["root"] / "web" / "index.html").as_uri()
    answer = _node("browser.mjs", {"url": url, "chromium": CHROMIUM})
    assert answer["ready"]["error"].startswith("Browsers do not run this page from a file: ")
    assert "python -m http.server" in answer["ready"]["error"]
