"""Average the ``model`` weights of the last N fairseq checkpoints of a save directory.

pip-installed fairseq does not ship ``scripts/average_checkpoints.py``; this is the part of it the
recipes use, with the same flags. The other entries (cfg, extra state) come from the newest
checkpoint. Floating-point tensors are averaged in float32 and cast back; other tensors are taken
from the newest checkpoint. The output is written to a temporary file and renamed
(lightcompress/io.py's ``atomic_write``).

    python average_checkpoints.py --inputs SAVE_DIR --num-epoch-checkpoints 10 --output avg.pt
    python average_checkpoints.py --inputs a.pt b.pt --output avg.pt
"""

import argparse
import importlib.util
import os
import re
import sys

import torch


def allow_fairseq_checkpoints():
    """Allow-list fairseq's checkpoint types for torch's weights_only loader with the plugin's
    own list (lightcompress/compat.py), loaded by path: importing the package would import
    fairseq and every model, which averaging does not need."""
    spec = importlib.util.find_spec("lightcompress")
    if spec is None or not spec.submodule_search_locations:
        raise SystemExit("lightcompress is not installed (see README, 'Installing')")
    path = os.path.join(next(iter(spec.submodule_search_locations)), "compat.py")
    compat_spec = importlib.util.spec_from_file_location("_lightcompress_compat", path)
    compat = importlib.util.module_from_spec(compat_spec)
    compat_spec.loader.exec_module(compat)
    compat.allow_fairseq_checkpoints()


def plugin_io():
    """The plugin's atomic-write helpers (lightcompress/io.py, standard library only), loaded by
    path for the same reason as above."""
    spec = importlib.util.find_spec("lightcompress")
    if spec is None or not spec.submodule_search_locations:
        raise SystemExit("lightcompress is not installed (see README, 'Installing')")
    path = os.path.join(next(iter(spec.submodule_search_locations)), "io.py")
    io_spec = importlib.util.spec_from_file_location("_lightcompress_io", path)
    module = importlib.util.module_from_spec(io_spec)
    io_spec.loader.exec_module(module)
    return module


def last_checkpoints(save_dir, n, update_based):
    """Paths of the newest ``n`` epoch (``checkpointE.pt``) or update (``checkpoint_E_U.pt``)
    checkpoints in ``save_dir``, newest first."""
    pattern = re.compile(r"checkpoint_\d+_(\d+)\.pt" if update_based else r"checkpoint(\d+)\.pt")
    found = sorted(
        (
            (int(m.group(1)), name)
            for name in os.listdir(save_dir)
            if (m := pattern.fullmatch(name))
        ),
        reverse=True,
    )
    if len(found) < n:
        raise SystemExit(f"{save_dir}: found {len(found)} checkpoints, need {n}")
    return [os.path.join(save_dir, name) for _, name in found[:n]]


def average(paths):
    """The newest checkpoint (``paths[0]``) with its ``model`` entry replaced by the average."""
    sums, newest, keys = {}, None, None
    for path in paths:
        state = torch.load(path, map_location="cpu")
        model = state["model"]
        if keys is None:
            newest, keys = state, list(model)
        elif list(model) != keys:
            raise SystemExit(f"{path}: parameter names differ from {paths[0]}")
        for k, v in model.items():
            if v.is_floating_point():
                sums[k] = sums[k] + v.float() if k in sums else v.float().clone()
    newest["model"] = {
        k: (sums[k] / len(paths)).to(v.dtype) if k in sums else v
        for k, v in newest["model"].items()
    }
    return newest


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
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
    args = parser.parse_args(argv)
    paths = args.inputs
    n = args.num_epoch_checkpoints or args.num_update_checkpoints
    if n:
        if len(paths) != 1 or not os.path.isdir(paths[0]):
            parser.error("--num-*-checkpoints takes one save directory as --inputs")
        paths = last_checkpoints(paths[0], n, args.num_update_checkpoints is not None)
    allow_fairseq_checkpoints()
    print("averaging:", *paths, file=sys.stderr)
    state = average(paths)
    with plugin_io().atomic_write(args.output, "wb") as f:
        torch.save(state, f)
    print(f"wrote {args.output}", file=sys.stderr)


if __name__ == "__main__":
    main()
