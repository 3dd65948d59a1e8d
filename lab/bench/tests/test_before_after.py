"""lab/bench/before_after.py: the before/after check's decisions (same lines, int8 agreement,
exit status) and its one-line errors. The real run (two versions of the code exporting every
family) takes minutes; its results are in the lab notes."""

from __future__ import annotations

import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))

import before_after


def _fake(monkeypatch, tmp_path, after_float32):
    src = "s1 s2\ns3\ns4 s5\ns6\n"
    monkeypatch.setattr(before_after, "unpack", lambda rev, dest: str(tmp_path / "before"))
    monkeypatch.setattr(
        before_after,
        "toy_checkpoints",
        lambda out, fams, updates: ("bin", {f: f"{f}.pt" for f in fams}, src),
    )

    def side(code_root, name, out, data, ckpt, fam, text):
        f32 = ["t1 t2", "t3", "t4 t5", "t6"] if name == "before" else after_float32
        return {"float32": f32, "int8": ["t1 t2", "t3", "t4", "t6"], "torch": list(f32)}

    monkeypatch.setattr(before_after, "side", side)


def test_the_same_lines_pass_and_int8_agreement_is_reported(monkeypatch, tmp_path, capsys):
    _fake(monkeypatch, tmp_path, ["t1 t2", "t3", "t4 t5", "t6"])
    assert (
        before_after.main(
            ["--before", "HEAD", "--out", str(tmp_path), "--families", "transformer,lightformer"]
        )
        == 0
    )
    out = capsys.readouterr().out
    assert "| transformer | 4 (4) | yes | yes | yes | 75% / 75% | yes |" in out
    assert "| lightformer |" in out


def test_a_changed_float32_line_fails(monkeypatch, tmp_path, capsys):
    _fake(monkeypatch, tmp_path, ["t1 t2", "t3", "t4 t4", "t6"])
    assert (
        before_after.main(["--before", "HEAD", "--out", str(tmp_path), "--families", "transformer"])
        == 1
    )
    assert "| transformer | 4 (4) | NO | NO | yes | 75% / 75% | yes |" in capsys.readouterr().out


def test_bad_input_is_one_line(tmp_path, capsys):
    assert before_after.main(["--before", "no-such-revision", "--out", str(tmp_path)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("before_after.py: error: git archive no-such")
