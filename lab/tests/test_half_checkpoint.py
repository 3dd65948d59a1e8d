"""lab/results/half_checkpoint.py: checkpoints packed for a GPU lease's trip
back (float16, no optimizer state, equal tensors stored once) and unpacked into ordinary
fairseq checkpoints whose weights are the packed ones rounded to float16."""

from __future__ import annotations

import importlib.util
import os
import tarfile
from pathlib import Path

import torch

import lightcompress.plugin  # noqa: F401  (allow-lists fairseq's checkpoint types)
from lightcompress.checkpoint import load_checkpoint

__all__: list[str] = []

ROOT = Path(__file__).resolve().parents[2]
_spec = importlib.util.spec_from_file_location(
    "half_checkpoint", ROOT / "lab" / "results" / "half_checkpoint.py"
)
hc = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(hc)


def _gpu_like(src: str, dst: Path) -> None:
    """The checkpoint as fairseq writes it on a GPU: every weight its own copy (tied ones too)."""
    state = torch.load(src, map_location="cpu")
    state["model"] = {k: v.clone() if torch.is_tensor(v) else v for k, v in state["model"].items()}
    dst.parent.mkdir(parents=True, exist_ok=True)
    torch.save(state, dst)


def test_pack_and_unpack_give_the_rounded_model_and_store_tied_tables_once(
    tiny_transformer, tiny_data, tmp_path, capsys
):
    best = os.path.join(tiny_transformer, "checkpoint_best.pt")
    runs, out, back = tmp_path / "runs", tmp_path / "out", tmp_path / "back"
    _gpu_like(best, runs / "teacher" / "checkpoint_best.pt")
    original = torch.load(best, map_location="cpu")
    assert original["last_optimizer_state"] is not None
    assert hc.main(["pack", str(runs), str(out), "teacher"]) == 0
    packed = torch.load(out / "teacher.pt", map_location="cpu")
    assert packed["last_optimizer_state"] is None and packed["cfg"] == original["cfg"]
    weights = packed["model"]
    assert {v.dtype for v in weights.values() if torch.is_tensor(v) and v.is_floating_point()} == {
        torch.float16
    }
    # the tied table (encoder, decoder input and output) is stored once again
    tied = [k for k in weights if k.endswith(("embed_tokens.weight", "output_projection.weight"))]
    assert len(tied) >= 2
    assert len({weights[k].untyped_storage().data_ptr() for k in tied}) == 1
    with tarfile.open(out / "logs.tgz", "w:gz") as tar:  # the logs travel beside them
        log = tmp_path / "train.log"
        log.write_text("valid | loss 5.0\n")
        tar.add(log, arcname="teacher/train.log")
    assert hc.main(["unpack", str(out), str(back)]) == 0
    assert (back / "teacher" / "train.log").read_text() == "valid | loss 5.0\n"
    printed = capsys.readouterr().out
    assert "teacher: " in printed and "updates, best validation loss" in printed
    unpacked = torch.load(back / "teacher" / "checkpoint_best.pt", map_location="cpu")
    assert hc.MARK not in unpacked
    for k, v in original["model"].items():
        if torch.is_tensor(v) and v.dtype == torch.float32:
            assert unpacked["model"][k].dtype == torch.float32
            assert torch.equal(unpacked["model"][k], v.half().float()), k
            assert torch.allclose(unpacked["model"][k], v, rtol=1e-3, atol=1e-4), k
    # fairseq loads it as any checkpoint, and it translates as the original within rounding
    model, _ = load_checkpoint(str(back / "teacher" / "checkpoint_best.pt"), tiny_data)[:2]
    ref, _ = load_checkpoint(best, tiny_data)[:2]
    model.eval(), ref.eval()
    src = torch.randint(4, 20, (2, 6))
    prev = torch.randint(4, 20, (2, 5))
    with torch.no_grad():
        a = model(src, torch.tensor([6, 6]), prev)[0]
        b = ref(src, torch.tensor([6, 6]), prev)[0]
    assert torch.allclose(a, b, atol=5e-2) and not torch.equal(a, b)


def test_bad_input_is_one_line_and_nothing_is_written(tiny_transformer, tmp_path, capsys):
    runs, out = tmp_path / "runs", tmp_path / "out"
    _gpu_like(
        os.path.join(tiny_transformer, "checkpoint_best.pt"), runs / "m" / "checkpoint_best.pt"
    )
    (runs / "text").mkdir()
    (runs / "text" / "checkpoint_best.pt").write_text("not a checkpoint\n")
    cases = [
        ["pack", str(runs), str(out), "missing"],  # no such run
        ["pack", str(runs), str(out), "text"],  # not a checkpoint
        ["pack", str(runs), str(out), "../m"],  # not a name
        ["unpack", str(tmp_path / "nowhere"), str(tmp_path / "back")],
        ["unpack", str(runs / "m"), str(tmp_path / "back")],  # holds no NAME.pt
    ]
    for argv in cases:
        capsys.readouterr()
        assert hc.main(argv) == 2, argv
        err = capsys.readouterr().err
        assert err.startswith("half_checkpoint.py: ") and err.count("\n") == 1, err
    assert not (tmp_path / "back").exists()
    assert not out.exists() or not any(p.suffix == ".pt" for p in out.iterdir())
    # a packed checkpoint is not packed again, and an unpacked-looking folder of ordinary
    # checkpoints is refused before anything is written
    assert hc.main(["pack", str(runs), str(out), "m"]) == 0
    (runs / "again").mkdir()
    os.replace(out / "m.pt", runs / "again" / "checkpoint_best.pt")
    capsys.readouterr()
    assert hc.main(["pack", str(runs), str(out), "again"]) == 2
    assert "packed already" in capsys.readouterr().err
    plain = tmp_path / "plain"
    plain.mkdir()
    _gpu_like(os.path.join(tiny_transformer, "checkpoint_best.pt"), plain / "x.pt")
    assert hc.main(["unpack", str(plain), str(tmp_path / "back")]) == 2
    assert "not a packed checkpoint" in capsys.readouterr().err
    assert not (tmp_path / "back").exists()
