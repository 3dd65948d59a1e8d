"""lightcompress.deploy.databin: an export's translations of a data-bin split (the int8 step of
compress and the KD data's ONNX engine both read splits through it)."""

import itertools
import os
import shutil

import pytest


@pytest.fixture(scope="module")
def teacher_export(tiny_data, tiny_transformer, tmp_path_factory):
    """The tiny Transformer's float32 export, made with the tiny corpus's dictionaries."""
    from lightcompress.deploy.onnx_export import _main as export_main

    out = str(tmp_path_factory.mktemp("databin") / "teacher-onnx")
    ckpt = os.path.join(tiny_transformer, "checkpoint_best.pt")
    assert (
        export_main(["--path", ckpt, "--data", tiny_data, "-s", "de", "-t", "en", "-o", out]) == 0
    )
    return out


def test_every_sentence_once_in_batches_of_similar_length(teacher_export, tiny_data):
    from lightcompress.deploy.databin import DataBinTranslation

    split = DataBinTranslation(
        teacher_export, tiny_data, "valid", "de", "en", beam_size=2, max_len_b=8, threads=1
    )
    eos = split.tgt_dict.eos()
    batches = list(split.batches(7))
    ids = [i for batch in batches for i, _, _ in batch]
    assert sorted(ids) == list(range(len(split))) and len(split) > 7
    assert all(1 <= len(batch) <= 7 for batch in batches)
    # longest first: each batch's sources are no shorter than the next batch's
    lengths = [[len(split.sentences[i]) for i, _, _ in batch] for batch in batches]
    assert all(min(a) >= max(b) for a, b in itertools.pairwise(lengths))
    for batch in batches:
        for _, score, tokens in batch:
            assert tokens[-1] == eos and len(tokens) <= 9 and score < 0
    # the reference side is the data's target split, sentence for sentence
    assert len(split.targets()) == len(split)


def test_translate_split_gives_rows_in_id_order(teacher_export, tiny_data):
    from lightcompress.compress.int8 import translate_split
    from lightcompress.deploy.databin import DataBinTranslation

    rows = translate_split(
        teacher_export, tiny_data, "de", "en", "valid", beam=2, max_len_b=8, batch_size=5
    )
    split = DataBinTranslation(
        teacher_export, tiny_data, "valid", "de", "en", beam_size=2, max_len_b=8
    )
    best = {i: (score, tokens) for batch in split.batches(64) for i, score, tokens in batch}
    assert [r[0] for r in rows] == list(range(len(split)))
    import torch

    for i, ref, score, hyp in rows:
        assert score == pytest.approx(best[i][0], abs=1e-4)  # padding: float32 rounding only
        assert hyp == split.tgt_dict.string(
            torch.tensor(best[i][1]), extra_symbols_to_ignore={split.tgt_dict.eos()}
        )
        assert ref == split.tgt_dict.string(split.targets()[i], escape_unk=True)


def test_what_it_refuses_is_one_line(teacher_export, tiny_data, tmp_path):
    from lightcompress.deploy.databin import DataBinError, DataBinTranslation

    def refused(data, subset="valid", export=teacher_export):
        with pytest.raises(DataBinError) as info:
            DataBinTranslation(export, data, subset, "de", "en")
        assert "\n" not in str(info.value)
        return str(info.value)

    assert refused(tiny_data, "nosuch") == (
        f"{tiny_data} has no nosuch split for de-en (nosuch.de-en.de)"
    )
    missing = tmp_path / "missing"
    shutil.copytree(tiny_data, missing)
    os.remove(missing / "dict.en.txt")
    assert refused(str(missing)) == f"{missing}/dict.en.txt not found"
    # a data-bin whose dictionaries are not the export's
    other = tmp_path / "other"
    shutil.copytree(tiny_data, other)
    with open(other / "dict.en.txt", "a") as f:
        f.write("neuesWort 1\n")
    assert (
        refused(str(other)) == f"{teacher_export} was not exported with the dictionaries of {other}"
    )
    # a directory that is no export
    assert refused(tiny_data, export=str(tmp_path)) == (
        f"{tmp_path} is not an ONNX export (no config.json)"
    )
