"""lab/bench/deploy_report.py: the deployment benchmark's table, the engine's and compression's
shares and the goal, from two measure_speed --json runs (synthetic figures)."""

import importlib.util
import json
import os

import pytest
from harness import REPO_ROOT

spec = importlib.util.spec_from_file_location(
    "deploy_report", os.path.join(REPO_ROOT, "lab", "bench", "deploy_report.py")
)
report = importlib.util.module_from_spec(spec)
spec.loader.exec_module(report)


def _row(label, engine, precision, tps, bleu=None, shortlist=None, text=False):
    r = {
        "label": label,
        "engine": engine,
        "precision": precision,
        "tokens_per_s": tps,
        "params": 7 if label == "teacher" else 2,
        "size_bytes": 2**20,
        "bleu": bleu,
    }
    if shortlist:
        r["shortlist"] = shortlist
    if text:
        r["text"] = True
    return r


def _runs(lf_onnx_b1=2400.0, lf_onnx_bleu=20.6):
    """(batch 1, batch 32): teacher on fairseq, ONNX Runtime and CTranslate2 int8 (ids and text),
    the LightFormer on fairseq and ONNX Runtime (plain, shortlist, text)."""

    def models(b, bleu):
        k = 1 if b == 1 else 2
        return [
            _row("teacher", "fairseq", "float32", 100 * k, bleu and 19.8),
            _row("teacher", "onnxruntime", "float32", 400 * k, bleu and 19.8),
            _row("teacher", "onnxruntime", "float32", 500 * k, bleu and 19.7, shortlist="sl"),
            _row("teacher", "ctranslate2", "int8", 1000 * k, bleu and 19.8),
            _row("teacher", "ctranslate2", "int8", 900 * k, bleu and 19.8, text=True),
            _row("lf", "fairseq", "float32", 200 * k, bleu and 20.8),
            _row("lf", "onnxruntime", "float32", lf_onnx_b1 * k, bleu and lf_onnx_bleu),
            _row("lf", "onnxruntime", "float32", 2600 * k, bleu and 20.1, shortlist="sl"),
            _row("lf", "onnxruntime", "float32", 1500 * k, bleu and 20.6, text=True),
        ]

    env = {"date": "2026-11-25T23:00:00+00:00", "cpu": "AMD EPYC"}
    proto = {"num_sentences": 150, "mean_src_len": 15.0, "beam": 5, "threads": 1, "runs": 3}
    b1 = {"protocol": {**proto, "batch_size": 1}, "environment": env, "models": models(1, True)}
    b32 = {"protocol": {**proto, "batch_size": 32}, "environment": env, "models": models(32, False)}
    return b1, b32


def test_rows_shares_and_goal():
    b1, b32 = _runs()
    rows = {(r["label"], r["name"]): r for r in report.rows(b1, b32)}
    lf = rows["lf", "onnxruntime"]
    assert (lf["b1"], lf["b32"], lf["bleu"]) == (2400.0, 4800.0, 20.6)
    assert lf["vs_ct2_b1"] == pytest.approx(2.4) and lf["vs_ct2_b32"] == pytest.approx(2.4)
    # a text row is compared with CTranslate2 from text
    assert rows["lf", "onnxruntime+text"]["vs_ct2_b1"] == pytest.approx(1500 / 900)
    engine, compression = report.shares(report.rows(b1, b32))
    assert "teacher on onnxruntime float32 against fairseq float32: 4.00x at batch 1" in engine[0]
    assert any(
        "lf against teacher, both onnxruntime float32: 6.00x at batch 1, 6.00x" in c
        for c in compression
    )
    assert any("both onnxruntime+shortlist float32: 5.20x" in c for c in compression)
    goals = {(g["row"]["name"]): g for g in report.goal(report.rows(b1, b32))}
    assert goals["onnxruntime"]["met"]  # 2.4x CT2, 6x its teacher, BLEU 0.2 below fairseq
    short = goals["onnxruntime+shortlist"]["short"]
    assert short == ["BLEU 0.70 below fairseq float32"]
    assert "1.67x CTranslate2 int8 at batch 1" in goals["onnxruntime+text"]["short"][0]
    text = report.render(b1, b32)
    assert "| lf | onnxruntime | float32 |" in text and "**met**" in text
    assert "not met: BLEU 0.70 below fairseq float32" in text


def test_a_row_that_falls_short_is_named_with_its_shortfall():
    b1, b32 = _runs(lf_onnx_b1=1500.0, lf_onnx_bleu=20.8)
    goals = {g["row"]["name"]: g for g in report.goal(report.rows(b1, b32))}
    assert goals["onnxruntime"]["short"] == [
        "1.50x CTranslate2 int8 at batch 1",
        "1.50x CTranslate2 int8 at batch 32",
    ]


def test_like_for_like_columns_and_goal_against_ct2_with_the_same_shortlist():
    """With CTranslate2 int8 rows of the shortlist (its vocabulary map), each row is compared
    with CTranslate2 int8 of the same shortlist and input too: two more columns and the goal
    again; without them the report is as before."""
    b1, b32 = _runs()
    plain = report.render(b1, b32)
    assert "same shortlist" not in plain
    for doc, k in ((b1, 1), (b32, 2)):
        doc["models"].append(
            _row(
                "teacher", "ctranslate2", "int8", 1250 * k, 19.7 if k == 1 else None, shortlist="sl"
            )
        )
    rows = {(r["label"], r["name"]): r for r in report.rows(b1, b32)}
    sl = rows["lf", "onnxruntime+shortlist"]
    assert sl["vs_ct2_b1"] == pytest.approx(2.6) and sl["vs_ct2_same_b1"] == pytest.approx(2.08)
    assert rows["lf", "onnxruntime"]["vs_ct2_same_b1"] == pytest.approx(2.4)  # (no shortlist)
    assert rows["lf", "onnxruntime+text"]["vs_ct2_same_b1"] == pytest.approx(1500 / 900)
    goals = {g["row"]["name"]: g for g in report.goal(report.rows(b1, b32))}
    assert goals["onnxruntime"]["met_same"]
    assert goals["onnxruntime+shortlist"]["short_same"] == ["BLEU 0.70 below fairseq float32"]
    for doc in (b1, b32):  # a faster CTranslate2 with its map: the like-for-like goal fails
        doc["models"][-1]["tokens_per_s"] *= 1.5
    goals = {g["row"]["name"]: g for g in report.goal(report.rows(b1, b32))}
    assert goals["onnxruntime+shortlist"]["short_same"][:2] == [
        "1.39x CTranslate2 int8 with the same shortlist at batch 1",
        "1.39x CTranslate2 int8 with the same shortlist at batch 32",
    ]
    assert goals["onnxruntime+shortlist"]["short"] == ["BLEU 0.70 below fairseq float32"]
    text = report.render(b1, b32)
    assert "vs CT2 int8, same shortlist, b1 | b32 |" in text
    assert "| lf | onnxruntime+shortlist | float32 |" in text and " 1.39x | 1.39x |" in text
    assert "The same goal against CTranslate2 int8 with the same shortlist" in text


def test_bad_input_is_one_line(tmp_path, capsys):
    b1, b32 = _runs()
    paths = {}
    for name, doc in (("b1", b1), ("b32", b32)):
        paths[name] = tmp_path / f"{name}.json"
        paths[name].write_text(json.dumps(doc))
    assert report.main([str(paths["b1"]), str(paths["b32"]), "--out", str(tmp_path / "r.md")]) == 0
    assert (tmp_path / "r.md").read_text() == capsys.readouterr().out
    no_ct2 = {**b32, "models": [m for m in b32["models"] if m["engine"] != "ctranslate2"]}
    (tmp_path / "b1_again.json").write_text(json.dumps({**b1, "models": no_ct2["models"]}))
    (tmp_path / "bad.json").write_text("{")
    cases = [
        ([str(paths["b32"]), str(paths["b1"])], "the first run is not at batch 1"),
        ([str(paths["b1"]), str(tmp_path / "bad.json")], "not JSON"),
        ([str(paths["b1"]), str(tmp_path / "missing.json")], "cannot read"),
        ([str(paths["b1"]), str(tmp_path / "b1_again.json")], "not at batch 32"),
    ]
    for args, message in cases:
        assert report.main(args) == 2
        err = capsys.readouterr().err
        assert err.count("\n") == 1 and message in err, err
    two = {**b32, "models": b32["models"][:4]}
    with pytest.raises(report.ReportError, match="different models"):
        report.rows(b1, two)
    without = [m for m in b1["models"] if m["engine"] != "ctranslate2"]
    with pytest.raises(report.ReportError, match="no CTranslate2 int8 row of teacher"):
        report.rows(
            {**b1, "models": without},
            {**b32, "models": [m for m in b32["models"] if m["engine"] != "ctranslate2"]},
        )
