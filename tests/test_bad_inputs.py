"""The bad-input sweep (issue 25): cases that once gave silently wrong output, one test each.

A command that reads text reads it as fairseq does: one item per ``\\n`` (a trailing ``\\r``
removed), so that output line i is always the translation of input line i; U+2028, U+0085,
form feed or a lone CR inside a line stay in that line. New commands add their cases here.
"""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

__all__: list[str] = []

REPO_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

# (input text, the lines fairseq sees)
LINE_CASES = [
    ("a b\u2028c\nd\n", ["a b\u2028c", "d"]),  # line separator
    ("a\u0085b\nc\n", ["a\u0085b", "c"]),  # next line (NEL)
    ("a\x0cb\nc\n", ["a\x0cb", "c"]),  # form feed
    ("a\rb\nc\n", ["a\rb", "c"]),  # lone CR
    ("a\r\nb\r\n", ["a", "b"]),  # CRLF: the \r removed
    ("a\n\nb\n", ["a", "", "b"]),  # an empty line keeps its place
    ("a\nb", ["a", "b"]),  # no final newline
    ("", []),
    ("\n", [""]),
]


@pytest.mark.parametrize("text, lines", LINE_CASES)
def test_both_readers_split_at_newline_only(text, lines):
    from lightcompress.deploy.onnx_runtime import split_lines as torch_free
    from lightcompress.io import split_lines

    assert split_lines(text) == lines
    assert torch_free(text) == lines  # the copy that ships in every ONNX export


def _translate_cli(*args, stdin: bytes):
    return subprocess.run(
        [sys.executable, "-c", "from lightcompress.deploy.translate import cli_main; cli_main()",
         *args],
        input=stdin, capture_output=True, timeout=300, check=False,
        env=dict(os.environ, PYTHONPATH=REPO_ROOT, PYTHONWARNINGS="ignore", OMP_NUM_THREADS="1"),
    )  # fmt: skip


def test_translate_gives_one_output_line_per_input_line(tiny_data, tiny_transformer):
    from lightcompress.deploy import Translator

    ckpt = os.path.join(tiny_transformer, "checkpoint_best.pt")
    with open(os.path.join(os.path.dirname(tiny_data), "raw", "test.de"), encoding="utf-8") as f:
        src = [line.strip() for line in f][:4]
    # separators inside lines: fairseq keeps them in the line (its tokenizer splits at them)
    text = f"{src[0]}\u2028{src[1]}\n{src[1]}\x0c{src[2]}\n{src[2]}\r{src[3]}\n\n{src[3]}\u0085\r\n"
    proc = _translate_cli("--path", ckpt, "--data", tiny_data, "--beam", "2",
                          stdin=text.encode("utf-8"))  # fmt: skip
    assert proc.returncode == 0, proc.stderr.decode()
    out = proc.stdout.decode("utf-8").split("\n")
    assert out[-1] == "" and len(out) - 1 == 5, out
    same = Translator(ckpt, tiny_data, beam=2).translate(
        [f"{src[0]} {src[1]}", f"{src[1]} {src[2]}", f"{src[2]} {src[3]}", "", src[3]]
    )
    assert out[:-1] == same


def test_translate_refuses_non_utf8_input_with_one_line(tiny_data, tiny_transformer):
    ckpt = os.path.join(tiny_transformer, "checkpoint_best.pt")
    proc = _translate_cli("--path", ckpt, "--data", tiny_data, stdin=b"abc \xff\n")
    assert proc.returncode == 2
    err = proc.stderr.decode().strip().splitlines()
    assert err == [err[-1]] and "not UTF-8" in err[-1]
    assert proc.stdout == b""
