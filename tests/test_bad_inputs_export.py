"""The bad-input sweep of issue 40, export and translators: one parametrized test per item.

Every case runs the commands as a user (or an attacker) would: ``lightcompress-shortlist``,
``lightcompress-translate``, an ONNX export's ``translate.py``, ``lightcompress-export-onnx`` /
``-export-ct2 --shortlist`` (``lab/bench/compare_exports.py``'s case is in ``lab/bench/tests``). A
refused case is one line on
stderr, exit status 2, nothing written; an accepted one gives the right result.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys

import pytest

__all__: list[str] = []

from harness import REPO_ROOT, SOURCES


@pytest.fixture(scope="module")
def setup(tiny_data, tiny_transformer, tmp_path_factory):
    """The tiny trained Transformer, a shortlist that lists nothing (``--k 0 --frequent 0``),
    a real one (``--k 3 --frequent 2``), its ONNX export with the short one, and some test
    sentences."""
    from lightcompress.deploy import onnx_export, shortlist_build

    root = tmp_path_factory.mktemp("bad_export")
    ckpt = os.path.join(tiny_transformer, "checkpoint_best.pt")
    empty, real = root / "empty-sl.txt", root / "sl.txt"
    for path, k, frequent in ((empty, 0, 0), (real, 3, 2)):
        argv = ["--data", tiny_data, "--k", str(k), "--frequent", str(frequent), "-o", str(path)]
        assert shortlist_build.main(argv) == 0
    onnx = root / "onnx"
    argv = ["--path", ckpt, "--data", tiny_data, "--shortlist", str(empty), "-o", str(onnx)]
    assert onnx_export.main(argv) == 0
    with open(os.path.join(os.path.dirname(tiny_data), "raw", "test.de"), encoding="utf-8") as f:
        lines = [line for line in f][:8]
    src = root / "test.de"
    src.write_text("".join(lines), encoding="utf-8")
    return {
        "root": root,
        "ckpt": ckpt,
        "data": tiny_data,
        "empty": str(empty),
        "real": str(real),
        "onnx": str(onnx),
        "src": str(src),
    }


def _one_line(capsys, status: int, *words: str) -> str:
    """The refusal: status 2, one line on stderr holding ``words``, nothing on stdout."""
    captured = capsys.readouterr()
    err = captured.err.strip().splitlines()
    assert status == 2 and len(err) == 1 and "Traceback" not in captured.err, captured.err
    assert all(w in err[0] for w in words), err
    assert captured.out == ""
    return err[0]


def _onnx(argv) -> int:
    """translate.py of an export without a tokenizer: subword tokens in (--tokenized)."""
    from lightcompress_runtime import translator

    return translator.main([str(a) for a in argv] + ["--tokenized"])


def _torch(argv) -> int:
    from lightcompress.deploy import torch_translator as translate

    return translate.main([str(a) for a in argv])


def _copy(setup, tmp_path, name="copy") -> str:
    out = tmp_path / name
    shutil.copytree(setup["onnx"], out)
    return str(out)


def _edit_config(folder: str, change) -> None:
    """Change ``config.json`` and write the manifest again (as someone who edits an export on
    purpose would: the manifest alone then cannot tell)."""
    from lightcompress.deploy.onnx_tools import write_manifest

    path = os.path.join(folder, "config.json")
    with open(path, encoding="utf-8") as f:
        config = json.load(f)
    change(config)
    with open(path, "w", encoding="utf-8") as f:
        json.dump(config, f)
    write_manifest(folder)


# ------------------------------------------------------------------ 4: a short shortlist


@pytest.mark.parametrize("beam", [2, 5])
def test_4_a_shortlist_with_fewer_candidates_than_the_beam_needs(setup, tmp_path, beam, capsys):
    """A list with nothing in it (the builder's ``--k 0 --frequent 0``) crashed both translators
    at beam 5 and made them disagree at beam 2 (``<s>`` against ``<unk>``): both top the
    candidates up to 2 x beam tokens besides the special ones (the lowest ids: a fairseq
    dictionary's most frequent), and translate alike."""
    from lightcompress_runtime import Shortlist
    from lightcompress_runtime.files import read_symbols

    outs = {}
    for name, run, argv in (
        ("onnx", _onnx, [setup["onnx"], "--shortlist"]),
        (
            "torch",
            _torch,
            ["--path", setup["ckpt"], "--data", setup["data"], "--shortlist", setup["empty"]],
        ),
    ):
        out = tmp_path / f"{name}.txt"
        status = run([*argv, "--beam", beam, "-i", setup["src"], "-o", out])
        assert status == 0, capsys.readouterr().err
        outs[name] = out.read_text(encoding="utf-8").split("\n")
    assert outs["onnx"] == outs["torch"]
    assert len(outs["onnx"]) == 9 and outs["onnx"][-1] == ""
    words = " ".join(outs["onnx"]).split()
    # (no BOS, PAD or EOS: real tokens; <unk> is a candidate the model may choose, as fairseq
    # prints it, where the list lacks the right word)
    assert words and not {"<s>", "<pad>", "</s>"} & set(words), outs
    symbols = read_symbols(os.path.join(setup["onnx"], "dict.tgt.txt"))
    sl = Shortlist(setup["empty"], symbols, symbols, specials=(0, 1, 2, 3))
    assert sl.candidates([[5, 6]]).tolist() == [0, 1, 2, 3]  # (the file lists nothing)
    assert sl.candidates([[5, 6]], 2 * beam).tolist() == list(range(4 + 2 * beam))


# ------------------------------------------------------------------ 5: no manifest


@pytest.mark.parametrize("fault", ["manifest deleted", "weights left out of the manifest"])
def test_5_an_export_whose_files_cannot_be_checked_is_refused(setup, tmp_path, fault, capsys):
    """Half of ``weights.bin`` scaled by -1.7 and the manifest deleted (or its line for
    ``weights.bin`` removed): translate.py translated garbage with exit 0."""
    import numpy as np

    folder = _copy(setup, tmp_path)
    weights = os.path.join(folder, "weights.bin")
    data = np.fromfile(weights, dtype=np.float32)
    data[: len(data) // 2] *= -1.7
    data.tofile(weights)
    manifest = os.path.join(folder, "MANIFEST.sha256")
    if fault == "manifest deleted":
        os.remove(manifest)
        words = ("has no MANIFEST.sha256", "export the model again")
    else:
        with open(manifest, encoding="utf-8") as f:
            kept = [line for line in f if not line.rstrip().endswith("  weights.bin")]
        with open(manifest, "w", encoding="utf-8") as f:
            f.writelines(kept)
        words = ("does not list weights.bin", "export the model again")
    out = tmp_path / "out.txt"
    _one_line(capsys, _onnx([folder, "-i", setup["src"], "-o", out]), *words)
    assert not out.exists()


# ------------------------------------------------------------------ 6: paths in config.json


def _outside(tmp_path, setup):
    """A file outside the export (the shortlist of the export, copied out)."""
    target = tmp_path / "elsewhere" / "shortlist.npz"
    target.parent.mkdir()
    shutil.copyfile(os.path.join(setup["onnx"], "shortlist.npz"), target)
    return target


PATH_CASES = {
    "spm up and out": ("spm", lambda tmp, folder, outside: "../elsewhere/shortlist.npz"),
    "absolute spm": ("spm", lambda tmp, folder, outside: str(outside)),
    "rows as /etc/passwd": ("shortlist_rows", lambda tmp, folder, outside: "/etc/passwd"),
    "absolute shortlist": ("shortlist", lambda tmp, folder, outside: str(outside)),
    "shortlist linked out": ("shortlist", "link"),
}


@pytest.mark.parametrize("case", list(PATH_CASES))
def test_6_every_file_config_json_names_lies_inside_the_export(setup, tmp_path, case, capsys):
    """``config.json`` named ``../../spm/spm.model``, an absolute shortlist, ``/etc/passwd`` as
    the rows graph: translate.py read them. Refused even with a manifest written for them."""
    folder = _copy(setup, tmp_path)
    outside = _outside(tmp_path, setup)
    key, name = PATH_CASES[case]
    if name == "link":
        os.remove(os.path.join(folder, "shortlist.npz"))
        os.symlink(outside, os.path.join(folder, "shortlist.npz"))
        _edit_config(folder, lambda c: None)  # (a manifest that holds the linked file's sha256)
        words = ("is a link to a file outside",)
    else:
        value = name(tmp_path, folder, outside)
        _edit_config(folder, lambda c: c.update({key: value}))
        words = (repr(value), "only files inside its own folder")
    out = tmp_path / "out.txt"
    status = _onnx([folder, "--shortlist", "-i", setup["src"], "-o", out])
    _one_line(capsys, status, *words)
    assert not out.exists()


# ------------------------------------------------------------------ 7: a truncated shortlist


def _cut(path: str, how: str, tmp_path) -> str:
    with open(path, encoding="utf-8") as f:
        text = f.read()
    if how == "cut inside the last line":  # ("house red" -> "house")
        text = text[: text.rstrip("\n").rfind(" ")] + "\n"
    elif how == "last line missing":
        text = text[: text.rstrip("\n").rfind("\n") + 1]
    else:  # the first format: no line count, no checksum
        body = text.partition("\n")[2]
        text = "#lightcompress-shortlist 1 source=de target=en\n" + body
    out = tmp_path / "cut.txt"
    out.write_text(text, encoding="utf-8")
    return str(out)


CUTS = {
    "cut inside the last line": "truncated",
    "last line missing": "truncated",
    "first format": "older format",
}
READERS = ["lightcompress-translate", "lightcompress-export-ct2", "lightcompress-export-onnx"]


@pytest.mark.parametrize("reader", READERS)
@pytest.mark.parametrize("cut", list(CUTS))
def test_7_a_truncated_shortlist_is_refused_by_every_reader(setup, tmp_path, reader, cut, capsys):
    """The text format had no count or end marker: a truncated file changed translations
    ("house" instead of "house red") and was shipped by the exporters."""
    from lightcompress.deploy import ct2, onnx_export

    sl = _cut(setup["real"], cut, tmp_path)
    out = tmp_path / "out"
    common = ["--path", setup["ckpt"], "--data", setup["data"], "--shortlist", sl]
    if reader == "lightcompress-translate":
        status = _torch([*common, "-i", setup["src"], "-o", out])
    elif reader == "lightcompress-export-ct2":
        status = ct2.main([*common, "-o", str(out)])
    else:
        status = onnx_export.main([*common, "-o", str(out)])
    _one_line(capsys, status, "cut.txt", CUTS[cut], "rebuild it with lightcompress-shortlist")
    assert not out.exists() and sorted(os.listdir(tmp_path)) == ["cut.txt"]


def test_7_the_builders_file_is_read_whole(setup):
    from lightcompress_runtime import Shortlist
    from lightcompress_runtime.files import read_symbols

    symbols = read_symbols(os.path.join(setup["onnx"], "dict.tgt.txt"))
    with open(setup["real"], encoding="utf-8") as f:
        header, *lines = f.read().split("\n")
    assert header.startswith("#lightcompress-shortlist 2 lines=") and lines[-1] == ""
    sl = Shortlist(setup["real"], symbols, symbols, specials=(0, 1, 2, 3))
    assert (
        int(header.split()[2].split("=")[1])
        == len(lines) - 1
        == 1 + (sl.offsets[1:] > sl.offsets[:-1]).sum()
    )


# ------------------------------------------------------------------ 8: NaN and infinity


@pytest.mark.parametrize("translator", ["translate.py", "lightcompress-translate"])
@pytest.mark.parametrize(
    "option", ["--lenpen=nan", "--lenpen=inf", "--max-len-a=nan", "--max-len-a=inf"]
)
def test_8_nan_and_infinity_in_translation_options(setup, tmp_path, translator, option, capsys):
    """``--lenpen nan`` translated otherwise with exit 0; ``--max-len-a nan`` / ``inf`` ended in
    ValueError / OverflowError tracebacks."""
    out = tmp_path / "out.txt"
    if translator == "translate.py":
        status = _onnx([setup["onnx"], option, "-i", setup["src"], "-o", out])
    else:
        status = _torch(
            [
                "--path",
                setup["ckpt"],
                "--data",
                setup["data"],
                option,
                "-i",
                setup["src"],
                "-o",
                out,
            ]
        )
    name = option.split("=")[0][2:].replace("-", "_")
    _one_line(capsys, status, f"{name} must be a finite number")
    assert not out.exists()


@pytest.mark.parametrize("translator", ["translate.py", "lightcompress-translate"])
def test_8_lengths_past_any_model_are_the_models_longest(setup, tmp_path, translator, capsys):
    """``--max-len-a 1e308`` (finite: accepted) overflowed to an OverflowError traceback; it is
    the longest output the model allows, as ``--max-len-b`` past its positions is."""
    outs = []
    for lengths in (
        ["--max-len-a", "1e308"],
        ["--max-len-b", str(10**400)],
        ["--max-len-b", "5000"],
    ):
        out = tmp_path / "out.txt"
        if translator == "translate.py":
            status = _onnx([setup["onnx"], *lengths, "-i", setup["src"], "-o", out])
        else:
            status = _torch(
                [
                    "--path",
                    setup["ckpt"],
                    "--data",
                    setup["data"],
                    *lengths,
                    "-i",
                    setup["src"],
                    "-o",
                    out,
                ]
            )
        assert status == 0, capsys.readouterr().err
        outs.append(out.read_text(encoding="utf-8"))
    assert outs[0] == outs[1] == outs[2] and len(outs[0].split("\n")) == 9


# ------------------------------------------------------------------ 9: tracebacks


def _closed_stdin(argv) -> subprocess.CompletedProcess:
    """``argv`` run with its standard input closed (``<&-``)."""
    return subprocess.run(
        ["bash", "-c", 'exec "$@" <&-', "bash", sys.executable, *map(str, argv)],
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
        env=dict(os.environ, PYTHONPATH=SOURCES, PYTHONWARNINGS="ignore", OMP_NUM_THREADS="1"),
    )


def _other_graphs(setup, folder: str, tmp_path, same_shapes: bool) -> None:
    """Another model's graphs in place of the export's (one layer of width 16, or
    ``same_shapes``: the export's two layers of width 32 with another vocabulary), the manifest
    written again for them."""
    import torch

    from lightcompress.deploy.onnx_export import export_onnx
    from lightcompress.deploy.onnx_tools import write_manifest
    from lightcompress.measure.specs import build_random_model

    torch.manual_seed(0)
    layers, width = (2, 32) if same_shapes else (1, 16)
    flags = [
        "--encoder-layers",
        layers,
        "--decoder-layers",
        layers,
        "--encoder-embed-dim",
        width,
        "--decoder-embed-dim",
        width,
        "--encoder-ffn-embed-dim",
        2 * width,
        "--decoder-ffn-embed-dim",
        2 * width,
        "--encoder-attention-heads",
        "2",
        "--decoder-attention-heads",
        "2",
    ]
    flags = [str(f) for f in flags]
    model, task, _ = build_random_model("transformer", 40, flags, True, return_task=True)
    other = tmp_path / "other"
    export_onnx(model.eval(), task, str(other), check=False)
    for name in ("encoder.onnx", "decoder.onnx", "weights.bin"):
        shutil.copyfile(other / name, os.path.join(folder, name))
    write_manifest(folder)


TRACEBACK_CASES = [
    "stdin closed: translate.py",
    "stdin closed: lightcompress-translate",
    "config.json without layers",
    "config.json without eos",
    "another model's graphs",
    "another model's graphs, same shapes",
]


@pytest.mark.parametrize("case", TRACEBACK_CASES)
def test_9_what_ended_in_a_traceback_is_one_line(setup, tmp_path, case, capsys):
    if case.startswith("stdin closed"):
        if case.endswith("translate.py"):
            argv = [os.path.join(setup["onnx"], "translate.py"), setup["onnx"], "--tokenized"]
        else:
            argv = [
                "-c",
                "from lightcompress.deploy.torch_translator import cli_main; cli_main()",
                "--path",
                setup["ckpt"],
                "--data",
                setup["data"],
            ]
        proc = _closed_stdin(argv)
        err = proc.stderr.strip().splitlines()
        assert proc.returncode == 2 and len(err) == 1 and proc.stdout == "", proc.stderr
        assert "standard input is closed: give the text with -i FILE" in err[0]
        return
    folder = _copy(setup, tmp_path)
    if case.startswith("another model's graphs"):
        same = case.endswith("same shapes")
        _other_graphs(setup, folder, tmp_path, same)
        with open(os.path.join(setup["onnx"], "config.json"), encoding="utf-8") as f:
            vocab = json.load(f)["vocab_size"]
        why = f"scores 40 tokens, config.json has {vocab}" if same else "1 layers, config.json 2"
        words = ("do not fit its config.json", why)
    else:
        key = case.split()[-1]
        _edit_config(folder, lambda c: c.pop(key))
        words = (f"lacks {key!r}", "export the model again")
    out = tmp_path / "out.txt"
    _one_line(capsys, _onnx([folder, "-i", setup["src"], "-o", out]), *words)
    assert not out.exists()


# ------------------------------------------------------------------ 11: smaller


def test_11_int8_that_would_quantize_nothing_is_refused(setup, tmp_path, capsys):
    """``--int8 large`` of a model without a map of 2^17 weights wrote a larger float32 export
    and said "moved ... by 0.0 %"."""
    from lightcompress.deploy import onnx_export

    out = tmp_path / "int8"
    status = onnx_export.main(
        ["--path", setup["ckpt"], "--data", setup["data"], "--int8", "large", "-o", str(out)]
    )
    _one_line(capsys, status, "--int8 large", "quantize nothing", "without --int8")
    assert os.listdir(tmp_path) == []


def test_11_measure_speed_notes_int8_with_nothing_to_quantize_and_keeps_the_others(setup, tmp_path):
    """measure_speed's ``--int8-large`` of a small model: a note, no row; its float32 and
    ``--compare-int8`` (every map) exports are still timed."""
    out = tmp_path / "speed.json"
    proc = subprocess.run(
        [
            os.path.join(REPO_ROOT, "scripts", "measure_speed.sh"),
            "--data",
            setup["data"],
            "--path",
            f"tiny={setup['ckpt']}",
            "--onnx",
            "--int8-large",
            "--compare-int8",
            "--runs",
            "1",
            "--warmup",
            "0",
            "--num-sentences",
            "2",
            "--src-len",
            "4",
            "--quiet",
            "--json",
            str(out),
        ],
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
        env=dict(os.environ, PYTHON=sys.executable, PYTHONWARNINGS="ignore"),
    )
    assert proc.returncode == 0, proc.stderr
    rows = {(r["engine"], r["precision"]) for r in json.loads(out.read_text())["models"]}
    assert {("onnxruntime", "float32"), ("onnxruntime", "int8")} <= rows, rows
    assert ("onnxruntime", "int8-large") not in rows
    assert "tiny: no ONNX export (--int8 large: no map" in proc.stdout, proc.stdout
