"""lab/bench/ct2_beam_agreement.py: how often CTranslate2's beam search picks another translation
than fairseq's, on the deployment tests' toy teacher."""

import importlib.util
import json
import os

import pytest
from harness import REPO_ROOT, make_parallel_corpus
from test_deploy import TINY, _binarize, _sentencepiece, make_checkpoint

spec = importlib.util.spec_from_file_location(
    "ct2_beam_agreement", os.path.join(REPO_ROOT, "lab", "bench", "ct2_beam_agreement.py")
)
agreement = importlib.util.module_from_spec(spec)
spec.loader.exec_module(agreement)


@pytest.fixture(scope="module")
def toy(tmp_path_factory):
    """The deployment tests' toy teacher (tests/test_deploy.py's ``toy``): a 2-2 Transformer
    trained for 30 updates on the sentencepiece-encoded toy corpus."""
    root = tmp_path_factory.mktemp("agreement")
    raw = make_parallel_corpus(str(root / "raw"), n_train=400, n_valid=10, n_test=30)
    _, pieces = _sentencepiece(raw, root)
    data = _binarize(pieces, str(root / "bin"))
    teacher = make_checkpoint(data, str(root / "teacher.pt"), "transformer", TINY, updates=30)
    return {"data": data, "teacher": teacher}


def test_ct2_beam_agreement_script_accounts_for_every_sentence(toy, tmp_path, capsys):
    out = tmp_path / "agree.json"
    assert (
        agreement.main(
            [
                "--path",
                toy["teacher"],
                "--data",
                toy["data"],
                "--num-sentences",
                "12",
                "--json",
                str(out),
            ]
        )
        == 0
    )
    r = json.loads(out.read_text())
    assert r["identical"] + r["ct2_lower"] + r["ct2_higher"] == r["sentences"] == 12
    assert r["identical"] >= 6 and r["largest_gap_lower"] >= 0
    assert "identical" in capsys.readouterr().out
    assert agreement.main(["--path", toy["teacher"], "--data", toy["data"], "--beam", "0"]) == 2
