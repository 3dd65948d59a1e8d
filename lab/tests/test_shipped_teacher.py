"""The shipped results teacher (examples/translation/results/teacher/, ship_teacher.py): its
files match SHA256SUMS, the checkpoint loads with fairseq as an ordinary Transformer, and it
translates the test split's first sentences as its model card (head.json) says."""

import hashlib
import json
import os

import pytest
from harness import REPO_ROOT

TEACHER = os.path.join(REPO_ROOT, "examples", "translation", "results", "teacher")


def _sums():
    with open(os.path.join(TEACHER, "SHA256SUMS"), encoding="utf-8") as f:
        return dict(reversed(line.split("  ", 1)) for line in f.read().splitlines())


def test_shipped_files_match_their_sums():
    sums = {name.strip(): digest for name, digest in _sums().items()}
    assert {
        "checkpoint.pt",
        "spm.model",
        "dict.de.txt",
        "dict.en.txt",
        "MODEL_CARD.md",
        "SOURCES.tsv",
        "scores.json",
        "head.json",
    } <= set(sums)
    for name, digest in sums.items():
        with open(os.path.join(TEACHER, name), "rb") as f:
            assert hashlib.sha256(f.read()).hexdigest() == digest, name


def test_model_card_figures_come_from_scores():
    with open(os.path.join(TEACHER, "scores.json"), encoding="utf-8") as f:
        scores = json.load(f)
    with open(os.path.join(TEACHER, "MODEL_CARD.md"), encoding="utf-8") as f:
        card = f.read()
    assert scores["stopped"].startswith("early stop")
    assert f"BLEU **{scores['bleu']:.2f}**" in card and scores["bleu_signature"] in card
    assert f"chrF **{scores['chrf']:.2f}**" in card
    # the kept checkpoint is the lowest validation loss of the curve, before the stop
    losses = {int(u): v for u, v in scores["valid_curve"]}
    assert min(losses.values()) == scores["best_valid_loss"] == losses[scores["best_update"]]
    assert scores["best_update"] < scores["updates"]


@pytest.fixture(scope="module")
def hub():
    from fairseq.models.transformer import TransformerModel

    import lightcompress.plugin  # noqa: F401  (fairseq's checkpoint types allow-listed)

    model = TransformerModel.from_pretrained(
        TEACHER,
        "checkpoint.pt",
        TEACHER,
        bpe="sentencepiece",
        sentencepiece_model=os.path.join(TEACHER, "spm.model"),
        source_lang="de",
        target_lang="en",
    )
    return model.eval()


def test_shipped_teacher_translates_as_its_card_says(hub):
    with open(os.path.join(TEACHER, "head.json"), encoding="utf-8") as f:
        head = json.load(f)
    with open(os.path.join(TEACHER, "scores.json"), encoding="utf-8") as f:
        params = json.load(f)["params"]
    assert sum(p.numel() for p in hub.models[0].parameters()) == params
    got = hub.translate([p["de"] for p in head["pairs"]], beam=head["beam"], lenpen=head["lenpen"])
    assert got == [p["en"] for p in head["pairs"]]
