"""Bad training data for ``--task translation_seqkd``: each is refused before training with one
line naming the file or directory (``fairseq-train: error: ...``, exit status 2, no checkpoint),
instead of a traceback or a warning.

Cases: a missing distilled directory, a missing split (a directory without the train split, a
split name the data directory does not have, a side missing), a distilled copy with another
sentence count than the ground truth, source and target of different lengths, dictionaries
swapped, a binarization with another dictionary under the right dictionary files (token ids
outside the dictionary), and a truncated ``.bin``. None of it needs a teacher: the "distilled"
copies are made from the tiny corpus itself.
"""

import os
import shutil

import harness
import pytest

N_TRAIN = 1000  # harness.make_parallel_corpus default


def _write_split(prefix, items, vocab_size):
    from fairseq.data import indexed_dataset

    builder = indexed_dataset.make_builder(prefix + ".bin", impl="mmap", vocab_size=vocab_size)
    for item in items:
        builder.add_item(item)
    builder.finalize(prefix + ".idx")


def _items(prefix):
    from fairseq.data import data_utils

    ds = data_utils.load_indexed_dataset(prefix, None, None)
    return [ds[i] for i in range(len(ds))]


@pytest.fixture(scope="module")
def kd_dirs(tiny_data, tmp_path_factory):
    """Good and bad distilled copies of the tiny corpus (joined dictionary), and a corpus with
    separate dictionaries with a copy binarized with the two dictionaries swapped."""
    root = tmp_path_factory.mktemp("kd_bad")
    dirs = {}

    def copy(name, splits=("train",)):
        path = root / name
        path.mkdir()
        for lang in ("de", "en"):
            shutil.copy(os.path.join(tiny_data, f"dict.{lang}.txt"), path)
            for split in splits:
                for ext in ("bin", "idx"):
                    shutil.copy(os.path.join(tiny_data, f"{split}.de-en.{lang}.{ext}"), path)
        dirs[name] = str(path)
        return path

    copy("good")
    copy("no_train", splits=("valid",))
    short = copy("short", splits=())
    with open(os.path.join(tiny_data, "dict.de.txt")) as f:
        vocab = 4 + sum(1 for _ in f)
    for lang in ("de", "en"):
        items = _items(os.path.join(tiny_data, f"train.de-en.{lang}"))
        _write_split(str(short / f"train.de-en.{lang}"), items[:900], vocab)
    uneven = copy("uneven")
    _write_split(
        str(uneven / "train.de-en.en"), _items(str(uneven / "train.de-en.en"))[:999], vocab
    )
    no_tgt = copy("no_target")
    for ext in ("bin", "idx"):
        os.remove(no_tgt / f"train.de-en.en.{ext}")
    # binarized with a larger dictionary, but holding the task's dictionary files
    foreign = copy("foreign")
    _write_split(
        str(foreign / "train.de-en.en"),
        [t + 100 for t in _items(str(foreign / "train.de-en.en"))],
        vocab + 100,
    )
    truncated = copy("truncated")
    with open(truncated / "train.de-en.de.bin", "r+b") as f:
        f.truncate(os.path.getsize(truncated / "train.de-en.de.bin") // 2)

    # separate dictionaries; a copy binarized with --srcdict dict.en.txt --tgtdict dict.de.txt
    raw = os.path.join(os.path.dirname(tiny_data), "raw")
    sep = harness.preprocess(raw, str(root / "sep"), joined=False)
    harness.run_cli(
        "fairseq-preprocess",
        [
            "--source-lang",
            "de",
            "--target-lang",
            "en",
            "--trainpref",
            os.path.join(raw, "train"),
            "--destdir",
            root / "swapped",
            "--workers",
            "1",
            "--srcdict",
            os.path.join(sep, "dict.en.txt"),
            "--tgtdict",
            os.path.join(sep, "dict.de.txt"),
        ],
    )
    dirs["sep"], dirs["swapped"] = sep, str(root / "swapped")
    return dirs


def _task(data, distilled, mode="both", **kw):
    import lightcompress.plugin  # noqa: F401
    from lightcompress.tasks.translation_seqkd import TranslationSeqKDConfig, TranslationSeqKDTask

    cfg = TranslationSeqKDConfig(
        data=data,
        source_lang="de",
        target_lang="en",
        train_subset="train",
        dataset_impl=None,
        required_seq_len_multiple=1,
        kd_data_mode=mode,
        kd_distilled_data=distilled,
        **kw,
    )
    return TranslationSeqKDTask.setup_task(cfg)


def _expected(kd_dirs, tiny_data):
    """{case: (data, --kd-distilled-data, pattern of the message)}."""
    d = kd_dirs
    no_train, short, uneven, swapped = d["no_train"], d["short"], d["uneven"], d["swapped"]
    return {
        "missing directory": (
            tiny_data,
            d["good"] + "/nowhere",
            rf"--kd-distilled-data {d['good']}/nowhere: no such directory$",
        ),
        "no train split": (
            tiny_data,
            no_train,
            (
                rf"no train split in {no_train}: {no_train}/train\.de-en\.de\.\{{bin,idx\}} "
                r"not found \(splits there: valid\)"
            ),
        ),
        "unknown split name": (
            tiny_data,
            "train_kd",
            (
                r"train_kd \(a split of .*\): no train_kd split in .*train_kd\.de-en\.de\."
                r"\{bin,idx\} not found \(splits there: test, train, valid\)"
            ),
        ),
        "target side missing": (
            tiny_data,
            d["no_target"],
            rf"{d['no_target']}/train\.de-en\.en\.\{{bin,idx\}} not found",
        ),
        "sentence count": (
            tiny_data,
            short,
            (
                rf"{short}/train\.de-en\.de\.idx holds 900 sentences, the ground truth "
                rf"{tiny_data}/train\.de-en\.de\.idx {N_TRAIN}"
            ),
        ),
        "uneven sides": (
            tiny_data,
            uneven,
            rf"{uneven}/train\.de-en\.de has {N_TRAIN} sentences but {uneven}/train\.de-en\.en has 999",
        ),
        "swapped dictionaries": (
            d["sep"],
            swapped,
            (
                rf"dictionary {swapped}/dict\.de\.txt differs from the task's \(it is the task's "
                r"dictionary of the other language: source and target swapped\)"
            ),
        ),
        "another dictionary": (
            tiny_data,
            d["foreign"],
            (
                rf"{d['foreign']}/train\.de-en\.en\.bin holds token id 1\d\d, but the task's "
                r"dictionary has only \d+ types"
            ),
        ),
        "truncated": (
            tiny_data,
            d["truncated"],
            rf"{d['truncated']}/train\.de-en\.de\.bin is shorter than",
        ),
    }


CASES = [
    "missing directory",
    "no train split",
    "unknown split name",
    "target side missing",
    "sentence count",
    "uneven sides",
    "swapped dictionaries",
    "another dictionary",
    "truncated",
]


@pytest.mark.parametrize("case", CASES)
def test_bad_distilled_data_is_refused_when_the_task_is_set_up(kd_dirs, tiny_data, case):
    from lightcompress.errors import ConfigError
    from lightcompress.tasks.translation_seqkd import KDDataError

    data, distilled, pattern = _expected(kd_dirs, tiny_data)[case]
    with pytest.raises(KDDataError, match=pattern) as error:
        _task(data, distilled)
    assert isinstance(error.value, ConfigError)
    assert "\n" not in str(error.value)  # one line
    # "distilled" mode checks the same things (the sentence count against the ground truth too)
    with pytest.raises(KDDataError, match=pattern):
        _task(data, distilled, mode="distilled")


def test_good_data_passes_and_a_checkpoint_load_checks_nothing(kd_dirs, tiny_data):
    task = _task(tiny_data, kd_dirs["good"] + ":" + "train")  # a directory and a split name
    task.load_dataset("train")
    assert len(task.dataset("train")) == 3 * N_TRAIN
    # a trained model's task is set up from its checkpoint: the KD data may be gone by then
    import lightcompress.plugin  # noqa: F401
    from lightcompress.tasks.translation_seqkd import TranslationSeqKDConfig, TranslationSeqKDTask

    cfg = TranslationSeqKDConfig(
        data=tiny_data,
        source_lang="de",
        target_lang="en",
        dataset_impl=None,
        kd_distilled_data=kd_dirs["good"] + "/gone",
    )
    assert TranslationSeqKDTask.setup_task(cfg, from_checkpoint=True) is not None


def test_load_dataset_checks_too(kd_dirs, tiny_data):
    """Data that went bad after set-up (or a task set up from a checkpoint and then asked for
    the train split) is refused by load_dataset with the same message."""
    from lightcompress.tasks.translation_seqkd import KDDataError

    task = _task(tiny_data, kd_dirs["good"], mode="gt")
    task.cfg.kd_data_mode = "both"
    task.cfg.kd_distilled_data = kd_dirs["short"]
    task._kd_checked = set()
    with pytest.raises(KDDataError, match="holds 900 sentences"):
        task.load_dataset("train")
    # a data directory without a train split can be set up (e.g. by a command that only
    # evaluates), but training on it is refused naming it
    no_train = kd_dirs["no_train"]
    task = _task(no_train, kd_dirs["good"])
    with pytest.raises(KDDataError, match=rf"^ground truth {no_train}: no train split in "):
        task.load_dataset("train")
    task.load_dataset("valid")  # what it has is usable


@pytest.mark.parametrize(
    "case", ["missing directory", "unknown split name", "sentence count", "swapped dictionaries"]
)
def test_fairseq_train_prints_one_line_and_writes_nothing(kd_dirs, tiny_data, tmp_path, case):
    data, distilled, pattern = _expected(kd_dirs, tiny_data)[case]
    save = tmp_path / "save"
    proc = harness.train(
        data,
        str(save),
        harness.tiny_arch_args("transformer", layers=(1, 1), dim=16, ffn=16),
        extra=["--task", "translation_seqkd", "--kd-distilled-data", distilled],
        max_update=2,
        check=False,
    )
    assert proc.returncode == 2, proc.stdout[-3000:] + proc.stderr[-3000:]
    lines = [ln for ln in proc.stderr.splitlines() if ln.strip()]
    errors = [ln for ln in lines if "error" in ln.lower()]
    assert len(errors) == 1 and errors[0] == lines[-1], proc.stderr[-3000:]
    assert errors[0].startswith("fairseq-train: error: --kd-distilled-data ")
    import re

    assert re.search(pattern, errors[0]), errors[0]
    assert "Traceback" not in proc.stderr + proc.stdout
    # refused before the model was built: no checkpoint, nothing in the save directory
    assert not save.exists() or list(save.iterdir()) == []
    assert "num. model params" not in proc.stdout
