"""Raw text in, text out, for both tokenizers fairseq users have (issue 39, item 4).

A Moses + subword-nmt BPE data-bin made as fairseq's IWSLT'14 recipe makes one (the
``sacremoses`` and ``subword-nmt`` commands: Moses tokenization, lowercasing, ``learn-bpe`` /
``apply-bpe`` with ``@@`` marks, separate dictionaries) from a small generated German-English
corpus with capitals, punctuation and quotes; a tiny Transformer with a tied decoder output trained
on it in this process. Its ONNX export carries the codes and translates raw text to detokenized
text without torch, as ``lightcompress-translate --bpe-codes`` does; an export without a
tokenizer refuses raw text with one line. (The sentencepiece export: test_deploy.py's
``test_onnx_export_command_and_its_torch_free_translate_py_give_the_fast_paths_text``.)
"""

import json
import os
import random
import re
import subprocess
import sys

import harness
import pytest
from harness import SOURCES
from test_deploy import _no_torch_env, make_checkpoint

BIN = os.path.dirname(sys.executable)
WORDS = {  # German -> English, one word each (the toy's "translation")
    "Haus": "house",
    "Katze": "cat",
    "Hund": "dog",
    "Baum": "tree",
    "Garten": "garden",
    "Straße": "street",
    "groß": "big",
    "klein": "small",
    "schön": "beautiful",
    "rot": "red",
    "Wasser": "water",
    "Fenster": "window",
    "Lehrerin": "teacher",
    "Schule": "school",
    "Nachbar": "neighbour",
    "Zeitung": "newspaper",
    "Brücke": "bridge",
    "Stadt": "city",
}
IWSLT = [
    "--encoder-layers",
    "2",
    "--decoder-layers",
    "2",
    "--encoder-embed-dim",
    "32",
    "--decoder-embed-dim",
    "32",
    "--encoder-ffn-embed-dim",
    "64",
    "--decoder-ffn-embed-dim",
    "64",
    "--encoder-attention-heads",
    "2",
    "--decoder-attention-heads",
    "2",
    "--share-decoder-input-output-embed",
    "--dropout",
    "0",
]


def _sentence(rng: random.Random) -> tuple[str, str]:
    """A raw pair: capitalized, with punctuation, sometimes quotes or an ampersand."""
    keys = rng.sample(sorted(WORDS), rng.randint(2, 6))
    de, en = keys[:], [WORDS[k] for k in keys]
    if rng.random() < 0.3:
        i = rng.randrange(len(de))
        de[i], en[i] = f'"{de[i]}"', f'"{en[i]}"'
    if rng.random() < 0.2:
        de.insert(1, "&")
        en.insert(1, "&")
    if rng.random() < 0.3:
        de[0] += ","
        en[0] += ","
    end = rng.choice([".", "?", "!"])
    en[0] = en[0][0].upper() + en[0][1:] if en[0][0] != '"' else en[0]
    return " ".join(de) + end, " ".join(en) + end


def _run(*cmd, stdin=None):
    proc = subprocess.run(
        cmd, input=stdin, capture_output=True, text=True, timeout=300, check=False
    )
    assert proc.returncode == 0, (cmd, proc.stderr)
    return proc.stdout


def _prepare(root) -> dict:
    """The IWSLT'14 recipe's steps with the pip tools: raw -> tokenized + lowercased -> BPE."""
    rng = random.Random(3)
    raw, tok, bpe = root / "raw", root / "tok", root / "bpe"
    for d in (raw, tok, bpe):
        d.mkdir()
    sizes = {"train": 500, "valid": 12, "test": 16}
    for split, n in sizes.items():
        pairs = [_sentence(rng) for _ in range(n)]
        for i, lang in enumerate(("de", "en")):
            (raw / f"{split}.{lang}").write_text("".join(p[i] + "\n" for p in pairs))
    for split in sizes:
        for lang in ("de", "en"):
            text = (raw / f"{split}.{lang}").read_text()
            tokenized = _run(
                f"{BIN}/sacremoses", "-q", "-l", lang, "-j", "1", "tokenize", stdin=text
            )
            (tok / f"{split}.{lang}").write_text(tokenized.lower())  # (lowercase.perl)
    (tok / "train.de-en").write_text(
        (tok / "train.de").read_text() + (tok / "train.en").read_text()
    )
    codes = root / "code"
    _run(
        f"{BIN}/subword-nmt",
        "learn-bpe",
        "-s",
        "40",
        "--input",
        str(tok / "train.de-en"),
        "--output",
        str(codes),
    )
    for split in sizes:
        for lang in ("de", "en"):
            _run(
                f"{BIN}/subword-nmt",
                "apply-bpe",
                "-c",
                str(codes),
                "--input",
                str(tok / f"{split}.{lang}"),
                "--output",
                str(bpe / f"{split}.{lang}"),
            )
    from fairseq import options
    from fairseq_cli import preprocess

    args = options.get_preprocessing_parser().parse_args(
        [
            "--source-lang",
            "de",
            "--target-lang",
            "en",
            "--workers",
            "1",
            "--trainpref",
            f"{bpe}/train",
            "--validpref",
            f"{bpe}/valid",
            "--testpref",
            f"{bpe}/test",
            "--destdir",
            str(root / "bin"),
        ]
    )
    preprocess.main(args)
    return {"raw": raw, "bpe": bpe, "codes": str(codes), "data": str(root / "bin")}


@pytest.fixture(scope="module")
def iwslt(tmp_path_factory, bpe_toy):
    """The BPE toy data-bin (separate dictionaries; conftest's ``bpe_toy``, made by ``_prepare``)
    and a tiny Transformer trained on it with a tied decoder output
    (``transformer_iwslt_de_en``'s sharing)."""
    root = tmp_path_factory.mktemp("iwslt_text")
    out = dict(bpe_toy)
    out["teacher"] = make_checkpoint(
        out["data"], str(root / "teacher.pt"), "transformer", IWSLT, updates=250
    )
    out["root"] = root
    return out


def _export(*args):
    return harness.run(
        [
            sys.executable,
            "-c",
            "from lightcompress.deploy.onnx_export import cli_main; cli_main()",
            *args,
        ],
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
        env=dict(os.environ, PYTHONPATH=SOURCES, PYTHONWARNINGS="ignore"),
    )


def _runtime(export, *args, stdin="", env=None, cwd=None):
    return subprocess.run(
        [sys.executable, os.path.join(export, "translate.py"), export, "--beam", "5", *args],
        input=stdin,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
        env=env,
        cwd=cwd,
    )


def test_moses_bpe_encodes_raw_text_as_the_recipes_tools_did(iwslt):
    from lightcompress_runtime.tokenizers import MosesBPE

    text = MosesBPE(iwslt["codes"], "de", "en", lowercase=True)
    raw = (iwslt["raw"] / "test.de").read_text().splitlines()
    prepared = (iwslt["bpe"] / "test.de").read_text().splitlines()
    assert [text.encode(line) for line in raw] == [line.split() for line in prepared]
    assert any("@@" in line for line in prepared) and any("&quot;" in line for line in prepared)
    # back: the @@ marks removed and the Moses detokenizer (the sacremoses command's)
    tokens = (iwslt["bpe"] / "test.en").read_text().splitlines()
    joined = "".join(line.replace("@@ ", "") + "\n" for line in tokens)
    detok = _run(f"{BIN}/sacremoses", "-q", "-l", "en", "-j", "1", "detokenize", stdin=joined)
    assert [text.decode(t.split()) for t in tokens] == detok.splitlines()
    expected = [line.lower() for line in (iwslt["raw"] / "test.en").read_text().splitlines()]
    assert detok.splitlines() == expected  # (the round trip gives the lowercased raw text)


def test_bpe_export_takes_raw_text_and_returns_detokenized_text_without_torch(iwslt, tmp_path):
    out = str(tmp_path / "onnx")
    proc = _export(
        "--path",
        iwslt["teacher"],
        "--data",
        iwslt["data"],
        "--bpe-codes",
        iwslt["codes"],
        "-o",
        out,
    )
    assert proc.returncode == 0, proc.stderr
    assert "raw text in: Moses (de), lowercased, BPE" in proc.stderr
    assert {"bpe.codes", "runtime", "translate.py"} <= set(os.listdir(out))
    assert "tokenizers.py" in os.listdir(os.path.join(out, "runtime"))
    with open(os.path.join(out, "config.json")) as f:
        config = json.load(f)
    assert config["spm"] is None and config["bpe"] == {
        "codes": "bpe.codes",
        "separator": "@@",
        "tokenizer": "moses",
        "source_lang": "de",
        "target_lang": "en",
        "lowercase": True,
        "aggressive_dash_splits": False,
        "escape": True,
    }
    with open(os.path.join(out, "MANIFEST.sha256")) as f:
        assert "bpe.codes" in {line.split()[1] for line in f}
    with open(iwslt["codes"], "rb") as a, open(os.path.join(out, "bpe.codes"), "rb") as b:
        assert a.read() == b.read()

    raw = (iwslt["raw"] / "test.de").read_text().splitlines()
    raw[3] = ""
    env = _no_torch_env(tmp_path)
    text = _runtime(out, stdin="\n".join(raw) + "\n", env=env, cwd=str(tmp_path))
    assert text.returncode == 0, text.stderr
    got = text.stdout.split("\n")[:-1]
    assert len(got) == len(raw) and got[3] == "" and all(got[i] for i in range(len(raw)) if i != 3)
    # the same translations as subword tokens (--tokenized, the recipe's BPE lines in), then
    # the recipe's post-processing: @@ removed, the sacremoses detokenizer
    bpe = (iwslt["bpe"] / "test.de").read_text().splitlines()
    bpe[3] = ""
    toks = _runtime(out, "--tokenized", stdin="\n".join(bpe) + "\n", env=env, cwd=str(tmp_path))
    assert toks.returncode == 0, toks.stderr
    tokens = toks.stdout.split("\n")[:-1]
    assert any("@@" in t for t in tokens), tokens  # (the model writes subword units)
    joined = "".join(t.replace("@@ ", "") + "\n" for t in tokens)
    detok = _run(f"{BIN}/sacremoses", "-q", "-l", "en", "-j", "1", "detokenize", stdin=joined)
    assert got == detok.splitlines()
    assert not any("@@" in t or "&quot;" in t or "&amp;" in t for t in got)
    # the model learned the toy: most output words are the reference's (lowercased)
    ref = [line.lower() for line in (iwslt["raw"] / "test.en").read_text().splitlines()]
    words = [(set(re.findall(r"\w+", g)), set(re.findall(r"\w+", r))) for g, r in zip(got, ref)]
    hits = sum(len(g & r) for g, r in words) / sum(
        len(r) for i, (_, r) in enumerate(words) if i != 3
    )
    print("reference words translated:", hits)
    assert hits >= 0.6, (got, ref)

    # lightcompress-translate --bpe-codes (PyTorch) gives the same text
    proc = harness.run(
        [
            sys.executable,
            "-c",
            "from lightcompress.deploy.torch_translator import cli_main; cli_main()",
            "--path",
            iwslt["teacher"],
            "--data",
            iwslt["data"],
            "--bpe-codes",
            iwslt["codes"],
        ],
        input="\n".join(raw) + "\n",
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
        env=dict(os.environ, PYTHONPATH=SOURCES, PYTHONWARNINGS="ignore"),
    )
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.split("\n")[:-1] == got
    # and the Python APIs
    from lightcompress.deploy import Translator
    from lightcompress_runtime import OnnxTranslator

    assert OnnxTranslator(out, beam=5).translate(raw) == got
    api = Translator(iwslt["teacher"], iwslt["data"], bpe_codes=iwslt["codes"], beam=5)
    assert api.translate(raw) == got


def test_an_export_without_a_tokenizer_refuses_raw_text_with_one_line(iwslt, tmp_path, capsys):
    from lightcompress.deploy.onnx_export import main as export_main
    from lightcompress_runtime import OnnxError, OnnxTranslator

    out = str(tmp_path / "onnx")
    assert export_main(["--path", iwslt["teacher"], "--data", iwslt["data"], "-o", out]) == 0
    err = capsys.readouterr().err
    assert "no tokenizer" in err and "--tokenized" in err
    assert "bpe.codes" not in os.listdir(out)
    raw = (iwslt["raw"] / "test.de").read_text()
    env = _no_torch_env(tmp_path)
    proc = _runtime(out, stdin=raw, env=env)
    lines = proc.stderr.strip().splitlines()
    assert proc.returncode == 2 and proc.stdout == "" and len(lines) == 1, proc.stderr
    assert "has no tokenizer" in lines[0] and "subword tokens" in lines[0]
    assert "--tokenized" in lines[0]
    with pytest.raises(OnnxError, match="has no tokenizer"):
        OnnxTranslator(out).translate(["Das Haus ist groß."])
    # its tokens: as the export with the codes translates them
    bpe = (iwslt["bpe"] / "test.de").read_text()
    proc = _runtime(out, "--tokenized", stdin=bpe, env=env)
    assert proc.returncode == 0 and len(proc.stdout.splitlines()) == len(bpe.splitlines())
    tokens = OnnxTranslator(out, beam=5, tokenized=True).translate(bpe.splitlines())
    assert proc.stdout.splitlines() == tokens

    # the options: one line each, nothing written
    notcodes = tmp_path / "notcodes"
    notcodes.write_text("a b c\n")
    base = ["--path", iwslt["teacher"], "--data", iwslt["data"], "-o", str(tmp_path / "x")]
    cases = [
        (base + ["--bpe-codes", str(notcodes)], "is not subword-nmt BPE codes"),
        (base + ["--bpe-codes", str(tmp_path / "none")], "BPE codes not found"),
        (base + ["--lowercase"], "--lowercase goes with --bpe-codes"),
        (base + ["--bpe-codes", iwslt["codes"], "--spm", iwslt["codes"]], "not both"),
    ]
    for args, message in cases:
        assert export_main(args) == 2, args
        lines = capsys.readouterr().err.strip().splitlines()
        assert len(lines) == 1 and message in lines[0], (args, lines)
    assert not (tmp_path / "x").exists()


def test_an_export_takes_the_data_bins_bpe_code_as_the_recipe_leaves_it(iwslt, tmp_path, capsys):
    import shutil

    from lightcompress.deploy.onnx_export import main as export_main
    from lightcompress_runtime import OnnxTranslator

    data = tmp_path / "bin"
    shutil.copytree(iwslt["data"], data)
    shutil.copyfile(iwslt["codes"], data / "bpe.code")  # (prepare-iwslt14.sh's copy)
    out = str(tmp_path / "onnx")
    assert (
        export_main(
            [
                "--path",
                iwslt["teacher"],
                "--data",
                str(data),
                "-o",
                out,
                "--no-lowercase",
                "--moses-aggressive-dash-splits",
            ]
        )
        == 0
    )
    assert f"BPE (the codes {data}/bpe.code)" in capsys.readouterr().err
    config = json.loads((tmp_path / "onnx" / "config.json").read_text())
    assert config["bpe"]["lowercase"] is False and config["bpe"]["aggressive_dash_splits"] is True
    pieces = OnnxTranslator(out).bpe.encode("Das Haus-Boot.")  # (-a; no lowercasing)
    assert " ".join(pieces).replace("@@ ", "") == "Das Haus @-@ Boot ."
    # a damaged export: the codes (in its manifest), its runtime's tokenizers: one line
    codes = os.path.join(out, "bpe.codes")
    os.rename(codes, codes + ".moved")
    for args in ((), ("--tokenized",)):
        proc = _runtime(out, *args, stdin="Das Haus.\n")
        assert proc.returncode == 2 and proc.stderr.count("\n") == 1, proc.stderr
        assert "lacks bpe.codes (an incomplete export)" in proc.stderr
    os.rename(codes + ".moved", codes)
    os.remove(os.path.join(out, "runtime", "tokenizers.py"))
    for args in ((), ("--tokenized",)):
        proc = _runtime(out, *args, stdin="Das Haus.\n")
        assert proc.returncode == 2 and proc.stderr.count("\n") == 1, proc.stderr
        assert "runtime/ beside it does not load" in proc.stderr
        assert "runtime.tokenizers" in proc.stderr and "export it again" in proc.stderr
    from lightcompress_runtime.tokenizers import MosesBPE, TextError

    with pytest.raises(TextError, match="not a file of the export"):
        MosesBPE.from_export(out, {"codes": "../code"})


def test_compress_exports_the_student_with_the_datas_bpe_codes(iwslt, tmp_path, capsys):
    from lightcompress.compress.cli import main

    save = tmp_path / "save"
    argv = [
        iwslt["teacher"],
        "--data",
        iwslt["data"],
        "--bpe-codes",
        iwslt["codes"],
        "-o",
        str(save),
        "--method",
        "dawid",
        "--dry-run",
    ]
    assert main(argv) == 0, capsys.readouterr().err
    export = [line for line in capsys.readouterr().out.splitlines() if "export-onnx" in line]
    assert len(export) == 1 and f"--bpe-codes {iwslt['codes']} --shortlist" in export[0], export
    assert not save.exists()


def test_lightcompress_translate_says_what_it_takes_without_a_tokenizer(iwslt, tmp_path, capsys):
    import shutil

    from lightcompress.deploy import Translator
    from lightcompress.deploy.torch_translator import main

    raw = (iwslt["raw"] / "test.de").read_text().splitlines()[:4]
    bpe = (iwslt["bpe"] / "test.de").read_text().splitlines()[:4]
    src, out = tmp_path / "in.txt", tmp_path / "out.txt"
    base = ["--path", iwslt["teacher"], "--data", iwslt["data"], "-i", str(src), "-o", str(out)]
    tokens = Translator(iwslt["teacher"], iwslt["data"]).translate(bpe)
    # no tokenizer: tokens in and out, with a one-line notice that says so
    src.write_text("\n".join(bpe) + "\n")
    assert main(base) == 0
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "no --spm or --bpe-codes" in err[0] and "--tokenized" in err[0]
    assert out.read_text().splitlines() == tokens
    # --tokenized: the same, and no notice
    assert main([*base, "--tokenized"]) == 0
    assert capsys.readouterr().err == "" and out.read_text().splitlines() == tokens
    assert main([*base, "--tokenized", "--bpe-codes", iwslt["codes"]]) == 2
    assert "without --spm / --bpe-codes" in capsys.readouterr().err
    # a data-bin with the recipe's bpe.code: raw text in and out, as with --bpe-codes
    data = tmp_path / "bin"
    shutil.copytree(iwslt["data"], data)
    shutil.copyfile(iwslt["codes"], data / "bpe.code")
    src.write_text("\n".join(raw) + "\n")
    assert main([*base[:2], "--data", str(data), *base[4:]]) == 0
    assert f"Moses + BPE with {data}/bpe.code" in capsys.readouterr().err
    want = Translator(iwslt["teacher"], iwslt["data"], bpe_codes=iwslt["codes"]).translate(raw)
    assert out.read_text().splitlines() == want and not any("@@" in t for t in want)
