"""Bad input to the result-writing scripts: one clear line on stderr, a non-zero exit status, and
nothing written, before any expensive work.

- ``scripts/measure_speed.sh`` (``lightcompress.measure.speed``): an unwritable ``--json``
  (checked before any model is loaded), a plugin checkpoint of an architecture fairseq does not
  know, a text file, a truncated checkpoint, ``--threads 0`` and other out-of-range values;
- ``examples/translation/lightformer/average_checkpoints.py``: bad arguments, missing or damaged
  inputs, an output directory that does not exist (checked before any input is read);
- ``scripts/plot_curves.py``, ``scripts/plot_frontier.py``: an ``--out`` that cannot be written
  as an image (checked before anything is read or drawn);
- ``scripts/recipe_result.py``: a results.txt without sacreBLEU, a missing output directory.

"Nothing written" is checked by listing the temporary directory before and after each call.
"""

import os
import shutil
import subprocess
import sys

import pytest
import torch
from harness import REPO_ROOT, tiny_arch_args, train

SCRIPTS = os.path.join(REPO_ROOT, "scripts")
AVERAGE = os.path.join(
    REPO_ROOT, "examples", "translation", "lightformer", "average_checkpoints.py"
)


def listing(top):
    return sorted(os.path.join(d, f) for d, dirs, files in os.walk(top) for f in files + dirs)


def one_error_line(stderr, prog):
    lines = [ln for ln in stderr.splitlines() if ln.strip()]
    assert len(lines) == 1, stderr
    assert lines[0].startswith(f"{prog}: error: "), stderr
    assert "Traceback" not in stderr
    return lines[0]


@pytest.fixture(scope="module")
def plugin_checkpoints(tiny_data, tmp_path_factory):
    """A tiny LightFormer checkpoint (2 updates) and damaged variants of it."""
    import lightcompress.plugin  # noqa: F401  (allow-lists fairseq checkpoint types)

    root = tmp_path_factory.mktemp("bad-checkpoints")
    save = root / "lf"
    flags = tiny_arch_args("lightformer_iwslt_de_en")
    flags += ["--lc-rank", "8", "--lc-embed-rank", "8", "--lc-encoder-groups", "1"]
    train(tiny_data, str(save), flags, max_epoch=None, max_update=2)
    good = save / "checkpoint_last.pt"
    out = {"good": str(good)}
    for name, arch in (("unknown_plugin", "lightformer_no_such_preset"), ("foreign", "myplugin_x")):
        state = torch.load(good)
        state["cfg"]["model"].arch = arch
        state["cfg"]["model"]._name = arch
        torch.save(state, root / f"{name}.pt")
        out[name] = str(root / f"{name}.pt")
    (root / "text.pt").write_text("this is not a checkpoint\n")
    data = good.read_bytes()
    (root / "truncated.pt").write_bytes(data[: len(data) // 2])
    out["text"], out["truncated"] = str(root / "text.pt"), str(root / "truncated.pt")
    return out


# --------------------------------------------------------------------------------------------
# measure_speed
# --------------------------------------------------------------------------------------------


def speed_main(argv, capsys):
    from lightcompress.measure import speed

    rc = speed.main(argv)
    return rc, capsys.readouterr()


@pytest.mark.parametrize(
    "which, message",
    [
        ("unknown_plugin", "architecture 'lightformer_no_such_preset' is not one of this"),
        ("foreign", "architecture 'myplugin_x' is not registered"),
        ("text", "is not a checkpoint (no zip or pickle header"),
        ("truncated", "is the file complete?"),
    ],
)
def test_measure_speed_bad_checkpoints(
    which, message, plugin_checkpoints, tiny_data, tmp_path, capsys
):
    out = tmp_path / "speed.json"
    before = listing(tmp_path)
    rc, cap = speed_main(
        [
            "--data",
            tiny_data,
            "--path",
            plugin_checkpoints[which],
            "--runs",
            "1",
            "--num-sentences",
            "1",
            "--quiet",
            "--json",
            str(out),
        ],
        capsys,
    )
    assert rc == 2
    line = one_error_line(cap.err, "measure_speed")
    assert message in line and plugin_checkpoints[which] in line
    if which == "foreign":
        assert "--user-dir" in line
    assert cap.out == "" and listing(tmp_path) == before


def test_measure_speed_names_the_user_dir_when_the_plugin_is_not_loaded(monkeypatch):
    from fairseq.models import MODEL_REGISTRY

    from lightcompress import checkpoint

    monkeypatch.delitem(MODEL_REGISTRY, "lightformer")
    msg = checkpoint._unknown_arch_message("x.pt", "lightformer_iwslt_de_en")
    assert "pass --user-dir lightcompress" in msg


@pytest.mark.parametrize(
    "extra, message",
    [
        (["--threads", "0"], "--threads must be >= 1, got 0"),
        (["--runs", "0"], "--runs must be >= 1"),
        (["--bleu-threads", "0"], "--bleu-threads must be >= 1"),
        (["--min-len", "0"], "--min-len must be >= 1"),
        (["--json", "@MISSING@/x.json"], "does not exist"),
        (["--json", "@DIR@"], "is a directory"),
        (["--path", "@NOPE@.pt"], "checkpoint not found"),
    ],
)
def test_measure_speed_bad_values_stop_before_any_model_is_loaded(
    extra, message, tiny_data, tmp_path, capsys, monkeypatch
):
    from lightcompress.measure import speed

    def no_loading(*a, **k):
        raise AssertionError("a model was loaded before the arguments were checked")

    monkeypatch.setattr(speed, "load_candidates", no_loading)
    extra = [
        a.replace("@MISSING@", str(tmp_path / "missing"))
        .replace("@DIR@", str(tmp_path))
        .replace("@NOPE@", str(tmp_path / "nope"))
        for a in extra
    ]
    before = listing(tmp_path)
    rc, cap = speed_main(["--arch", "transformer", "--data", tiny_data, *extra], capsys)
    assert rc == 2
    assert message in one_error_line(cap.err, "measure_speed")
    assert listing(tmp_path) == before


def test_measure_speed_script_json_in_a_missing_directory_is_one_line(
    plugin_checkpoints, tiny_data, tmp_path
):
    """Through the shell wrapper (fairseq imported for real): nothing but the error on stderr,
    and it comes before anything is measured (no --bleu translation of hours first)."""
    before = listing(tmp_path)
    proc = subprocess.run(
        [
            "bash",
            os.path.join(SCRIPTS, "measure_speed.sh"),
            "--data",
            tiny_data,
            "--path",
            plugin_checkpoints["good"],
            "--bleu",
            "--json",
            str(tmp_path / "missing" / "x.json"),
        ],
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert proc.returncode == 2, proc.stderr
    line = one_error_line(proc.stderr, "measure_speed")
    assert f"directory {tmp_path / 'missing'} does not exist" in line
    assert proc.stdout == "" and listing(tmp_path) == before


# --------------------------------------------------------------------------------------------
# average_checkpoints.py
# --------------------------------------------------------------------------------------------


def average(*args):
    return subprocess.run(
        [sys.executable, AVERAGE, *map(str, args)],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


@pytest.fixture
def save_dir(plugin_checkpoints, tmp_path):
    d = tmp_path / "save"
    d.mkdir()
    for epoch in (1, 2):
        shutil.copy(plugin_checkpoints["good"], d / f"checkpoint{epoch}.pt")
    return d


@pytest.mark.parametrize(
    "args, message",
    [
        (["--inputs", "SAVE", "--num-epoch-checkpoints", "0"], "must be >= 1, got 0"),
        (["--inputs", "SAVE", "--num-epoch-checkpoints", "x"], "invalid int value"),
        (["--inputs", "SAVE", "--num-epoch-checkpoints", "5"], "found 2 epoch checkpoints, need 5"),
        (["--inputs", "SAVE"], "is a directory: give --num-epoch-checkpoints"),
        (["--inputs", "SAVE/none.pt"], "no such checkpoint"),
        (["--inputs", "TEXT"], "is not a checkpoint"),
        (["--inputs", "TRUNCATED"], "is the file complete?"),
        (["--inputs", "SAVE/checkpoint1.pt", "--allow-fewer"], "--allow-fewer goes with"),
        (
            ["--inputs", "SAVE", "--num-epoch-checkpoints", "2", "--output", "OUT/missing/avg.pt"],
            "does not exist",
        ),
        (["--inputs", "SAVE", "--num-epoch-checkpoints", "2", "--output", "OUT"], "is a directory"),
        (["--output", "OUT/x.pt"], "the following arguments are required: --inputs"),
    ],
)
def test_average_checkpoints_bad_input(args, message, save_dir, plugin_checkpoints, tmp_path):
    subst = {
        "SAVE": str(save_dir),
        "TEXT": plugin_checkpoints["text"],
        "OUT": str(tmp_path),
        "TRUNCATED": plugin_checkpoints["truncated"],
    }
    argv = []
    for a in args:
        for key, value in subst.items():
            a = a.replace(key, value)
        argv.append(a)
    if "--output" not in argv:
        argv += ["--output", str(tmp_path / "avg.pt")]
    before = listing(tmp_path)
    proc = average(*argv)
    assert proc.returncode == 2
    assert message in one_error_line(proc.stderr, "average_checkpoints")
    assert listing(tmp_path) == before


def test_average_checkpoints_checks_the_output_before_reading_any_input(
    save_dir, tmp_path, monkeypatch, capsys
):
    sys.path.insert(0, os.path.dirname(AVERAGE))
    try:
        import average_checkpoints as avg
    finally:
        sys.path.remove(os.path.dirname(AVERAGE))

    def no_reading(path):
        raise AssertionError(f"{path} was read before the output was checked")

    monkeypatch.setattr(avg, "_load", no_reading)
    rc = avg.main(
        [
            "--inputs",
            str(save_dir),
            "--num-epoch-checkpoints",
            "2",
            "--output",
            str(tmp_path / "missing" / "avg.pt"),
        ]
    )
    assert rc == 2 and "does not exist" in capsys.readouterr().err


def test_average_checkpoints_allow_fewer_averages_what_there_is(save_dir, tmp_path):
    out = tmp_path / "avg.pt"
    proc = average(
        "--inputs", save_dir, "--num-epoch-checkpoints", "10", "--output", out, "--allow-fewer"
    )
    assert proc.returncode == 0, proc.stderr
    assert "averaged 2 checkpoints" in proc.stderr and out.exists()
    # none of the asked kind: checkpoint_last.pt
    shutil.copy(save_dir / "checkpoint1.pt", save_dir / "checkpoint_last.pt")
    proc = average(
        "--inputs", save_dir, "--num-update-checkpoints", "5", "--output", out, "--allow-fewer"
    )
    assert proc.returncode == 0 and "checkpoint_last.pt" in proc.stderr


def test_average_checkpoints_says_why_it_exists():
    with open(AVERAGE, encoding="utf-8") as f:
        text = f.read()
    assert "not part of the\ninstalled fairseq package" in text


# --------------------------------------------------------------------------------------------
# plot scripts and recipe_result.py
# --------------------------------------------------------------------------------------------


@pytest.mark.parametrize("script", ["plot_curves.py", "plot_frontier.py"])
@pytest.mark.parametrize(
    "out, message",
    [
        ("missing/x.png", "does not exist"),
        (".", "is a directory"),
        ("x", "no extension"),
        ("x.xyz", "'.xyz' is not an image format"),
    ],
)
def test_plot_out_is_checked_before_anything_is_read(script, out, message, tmp_path):
    before = listing(tmp_path)
    proc = subprocess.run(
        [
            sys.executable,
            os.path.join(SCRIPTS, script),
            str(tmp_path / "not-read.txt"),
            "--out",
            str(tmp_path / out),
        ],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert proc.returncode == 2
    assert message in one_error_line(proc.stderr, script[:-3])
    assert listing(tmp_path) == before


def test_recipe_result_bad_input(tmp_path):
    script = os.path.join(SCRIPTS, "recipe_result.py")
    results = tmp_path / "results.txt"
    results.write_text("checkpoint: x.pt\ntokenized BLEU (fairseq-generate): BLEU4 = 30.00\n")
    cases = [
        (["--results", str(results), "--out", str(tmp_path / "r.json")], "has no sacreBLEU line"),
        (
            ["--results", str(tmp_path / "none.txt"), "--out", str(tmp_path / "r.json")],
            "cannot read",
        ),
        (
            ["--results", str(results), "--out", str(tmp_path / "missing" / "r.json")],
            "does not exist",
        ),
    ]
    for argv, message in cases:
        before = listing(tmp_path)
        proc = subprocess.run(
            [sys.executable, script, "--label", "m", *argv],
            capture_output=True,
            text=True,
            check=False,
        )
        assert proc.returncode == 2
        assert message in one_error_line(proc.stderr, "recipe_result")
        assert listing(tmp_path) == before
