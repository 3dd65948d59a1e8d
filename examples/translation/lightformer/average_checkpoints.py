"""Average the ``model`` weights of the last N fairseq checkpoints of a save directory.

Kept because fairseq's own averager is a script of its repository (scripts/), not part of the
installed fairseq package. This is the part of it the recipes use, with the same flags. The
other entries (cfg, extra state) come from the newest checkpoint. Floating-point tensors are
averaged in float32 and cast back; other tensors are taken from the newest checkpoint. The
output is written to a temporary file and renamed (lightcompress/io.py's ``atomic_write``).

    python average_checkpoints.py --inputs SAVE_DIR --num-epoch-checkpoints 10 --output avg.pt
    python average_checkpoints.py --inputs a.pt b.pt --output avg.pt

``--allow-fewer`` (the recipes' SMALL=1 runs, see examples/common/README.md): when a save
directory holds fewer than N checkpoints, average those there are, and with none take its
``checkpoint_last.pt``.

Bad arguments, missing or damaged inputs and an output that cannot be written end with one line
on stderr and exit status 2; the arguments, the inputs' presence and the output's directory are
checked before any checkpoint is read.
"""

import argparse
import importlib.util
import os
import re
import sys


class AverageError(Exception):
    """A user error: one line on stderr, exit status 2."""


def _plugin_file(name):
    """lightcompress/NAME.py loaded by path: importing the package would import fairseq and
    every model, which averaging does not need (both files import the standard library only,
    compat.py torch too)."""
    spec = importlib.util.find_spec("lightcompress")
    if spec is None or not spec.submodule_search_locations:
        raise AverageError(
            "lightcompress is not installed (make install; see README, 'Installing')"
        )
    path = os.path.join(next(iter(spec.submodule_search_locations)), f"{name}.py")
    file_spec = importlib.util.spec_from_file_location(f"_lightcompress_{name}", path)
    module = importlib.util.module_from_spec(file_spec)
    file_spec.loader.exec_module(module)
    return module


def allow_fairseq_checkpoints():
    """Allow-list fairseq's checkpoint types for torch's weights_only loader with the plugin's
    own list (lightcompress/compat.py)."""
    _plugin_file("compat").allow_fairseq_checkpoints()


def plugin_io():
    """The plugin's atomic-write helpers (lightcompress/io.py, standard library only)."""
    return _plugin_file("io")


def last_checkpoints(save_dir, n, update_based, allow_fewer=False):
    """Paths of the newest ``n`` epoch (``checkpointE.pt``) or update (``checkpoint_E_U.pt``)
    checkpoints in ``save_dir``, newest first. With ``allow_fewer``, those there are, or
    ``[checkpoint_last.pt]`` when there is none."""
    pattern = re.compile(r"checkpoint_\d+_(\d+)\.pt" if update_based else r"checkpoint(\d+)\.pt")
    try:
        names = os.listdir(save_dir)
    except OSError as exc:
        raise AverageError(f"cannot list {save_dir}: {exc.strerror}") from None
    found = sorted(
        ((int(m.group(1)), name) for name in names if (m := pattern.fullmatch(name))), reverse=True
    )
    kind = "update" if update_based else "epoch"
    if len(found) < n:
        if allow_fewer and found:
            n = len(found)
        elif allow_fewer and os.path.isfile(os.path.join(save_dir, "checkpoint_last.pt")):
            return [os.path.join(save_dir, "checkpoint_last.pt")]
        else:
            last = " (nor a checkpoint_last.pt)" if allow_fewer else ""
            raise AverageError(f"{save_dir}: found {len(found)} {kind} checkpoints, need {n}{last}")
    return [os.path.join(save_dir, name) for _, name in found[:n]]


def _load(path):
    with open(path, "rb") as f:
        head = f.read(4)
    if not head.startswith((b"PK\x03\x04", b"\x80")):  # torch's zip format, legacy pickle
        raise AverageError(f"{path} is not a checkpoint (no zip or pickle header: a text file?)")
    import torch  # (here: a bad argument is refused without importing torch)

    try:
        state = torch.load(path, map_location="cpu")
    except Exception as exc:  # noqa: BLE001  (truncated zip, text, foreign pickle)
        text = " ".join(str(exc).split()).split(". ")[0][:200]
        raise AverageError(
            f"cannot read {path} as a fairseq checkpoint ({type(exc).__name__}: {text}); "
            "is the file complete?"
        ) from None
    if not isinstance(state, dict) or not isinstance(state.get("model"), dict):
        raise AverageError(f"{path} is not a fairseq checkpoint (no 'model' entry)")
    return state


def average(paths):
    """The newest checkpoint (``paths[0]``) with its ``model`` entry replaced by the average."""
    import torch

    sums, newest, keys = {}, None, None
    for path in paths:
        state = _load(path)
        if newest is None:
            newest, keys = state, list(state["model"])
        elif list(state["model"]) != keys:
            raise AverageError(f"{path}: parameter names differ from {paths[0]}")
        model = state["model"]
        for k, v in model.items():
            if not torch.is_tensor(v) or not v.is_floating_point():
                continue
            if k in sums and sums[k].shape != v.shape:
                raise AverageError(
                    f"{path}: {k} has shape {tuple(v.shape)}, {paths[0]} {tuple(sums[k].shape)}"
                )
            sums[k] = sums[k] + v.float() if k in sums else v.float().clone()
    newest["model"] = {
        k: (sums[k] / len(paths)).to(v.dtype) if k in sums else v
        for k, v in newest["model"].items()
    }
    return newest


class _Parser(argparse.ArgumentParser):
    def error(self, message):
        self.exit(2, f"{self.prog}: error: {message}\n")


def _parser():
    parser = _Parser(prog="average_checkpoints", description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--inputs",
        nargs="+",
        required=True,
        help="checkpoint files, or one save directory with a --num-* flag",
    )
    parser.add_argument("--output", required=True, help="averaged checkpoint to write")
    group = parser.add_mutually_exclusive_group()
    group.add_argument(
        "--num-epoch-checkpoints", type=int, help="average the last N checkpointE.pt"
    )
    group.add_argument(
        "--num-update-checkpoints", type=int, help="average the last N checkpoint_E_U.pt"
    )
    parser.add_argument(
        "--allow-fewer",
        action="store_true",
        help="with --num-*: average the checkpoints there are when fewer than N exist "
        "(checkpoint_last.pt when none does)",
    )
    return parser


def check_output(path):
    """Raise AverageError unless ``path`` can be written (before any checkpoint is read)."""
    message = plugin_io().output_error(path, "--output")
    if message:
        raise AverageError(message)


def input_paths(args):
    """The checkpoints to average, newest first (checked to exist, not read)."""
    n = args.num_epoch_checkpoints
    if n is None:
        n = args.num_update_checkpoints
    if n is not None:
        if n < 1:
            raise AverageError(f"--num-*-checkpoints must be >= 1, got {n}")
        if len(args.inputs) != 1 or not os.path.isdir(args.inputs[0]):
            what = " ".join(args.inputs)
            raise AverageError(
                f"--num-*-checkpoints takes one save directory as --inputs, not {what}"
            )
        return last_checkpoints(
            args.inputs[0], n, args.num_update_checkpoints is not None, args.allow_fewer
        )
    if args.allow_fewer:
        raise AverageError(
            "--allow-fewer goes with --num-epoch-checkpoints or --num-update-checkpoints"
        )
    for path in args.inputs:
        if os.path.isdir(path):
            raise AverageError(
                f"{path} is a directory: give --num-epoch-checkpoints N or --num-update-checkpoints N"
            )
        if not os.path.isfile(path):
            raise AverageError(f"no such checkpoint: {path}")
    return list(args.inputs)


def main(argv=None):
    args = _parser().parse_args(argv)
    try:
        check_output(args.output)
        paths = input_paths(args)
        allow_fairseq_checkpoints()
        state = average(paths)
        import torch

        try:
            with plugin_io().atomic_write(args.output, "wb") as f:
                torch.save(state, f)
        except OSError as exc:
            raise AverageError(f"cannot write {args.output}: {exc.strerror or exc}") from None
    except AverageError as exc:
        print(f"average_checkpoints: error: {exc}", file=sys.stderr)
        return 2
    print(
        f"averaged {len(paths)} checkpoints ({' '.join(paths)}): wrote {args.output}",
        file=sys.stderr,
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
