"""Reading fairseq checkpoints: the one loader of the package.

Every command and model that reads a checkpoint goes through here: the converters (the teacher),
DA-WID (its teacher), word-level KD (its teacher), ``lightcompress-params --path``, the speed
script and the exporters. Every failure is a :class:`~lightcompress.errors.CheckpointError`
with one line naming the file and the cause (missing, not a file, not a checkpoint, damaged or
truncated, not fairseq's, an architecture that is not registered, weights that do not fit);
callers add what their user gave (``--dawid-teacher: ...``).

- :func:`read_checkpoint`: the state dict, as saved (``torch.load``; ``args`` stays the
  ``Namespace`` it was) or as fairseq's commands read it (``upgrade=True``:
  ``load_checkpoint_to_cpu``, overrides applied, old formats upgraded);
- :func:`model_config` / :func:`checkpoint_arch`: the model configuration it holds and its
  architecture; :func:`check_registered`: that fairseq knows that architecture;
- :func:`build_model`: the model built without data from its own configuration, weights
  loaded strictly;
- :func:`load_checkpoint`: a model as ``fairseq-generate`` loads it, with its task
  (dictionaries of ``--data``); :func:`load_for_task`: a model built by a given task (a
  teacher with the student's dictionaries).

``torch.load`` keeps ``weights_only=True``: each loader imports :mod:`lightcompress.plugin`,
which allow-lists the types fairseq checkpoints hold (:mod:`lightcompress.compat`) and
registers the plugin's architectures.
"""

from __future__ import annotations

import copy
import os

from lightcompress.errors import CheckpointError, ConfigError, one_line

__all__ = [
    "CheckpointError",
    "build_model",
    "check_finite",
    "check_registered",
    "checkpoint_arch",
    "classification_heads_in",
    "load_checkpoint",
    "load_for_task",
    "model_config",
    "plugin_model_of",
    "read_checkpoint",
    "register_plugin_model",
    "unregister_plugin_model",
    "verify_sums",
]

# The fairseq model names of the plugin's families, filled by the presets table as it registers
# their architectures (lightcompress.models.presets.add_presets): a checkpoint whose
# architecture is named like one of them and that fairseq does not know was made by another
# version of the plugin, or is loaded without it.
_PLUGIN_MODELS: set[str] = set()


def register_plugin_model(name: str) -> None:
    """Note ``name`` as the fairseq model of a family of the plugin (for error messages)."""
    _PLUGIN_MODELS.add(name)


def unregister_plugin_model(name: str) -> None:
    """Forget ``name`` (a family that was unregistered)."""
    _PLUGIN_MODELS.discard(name)


def plugin_model_of(arch: str) -> str | None:
    """The plugin's model whose architecture names ``arch`` has the form of (``<model>`` or
    ``<model>_...``, the longest such name), even when ``arch`` is not registered."""
    matches = [m for m in _PLUGIN_MODELS if arch == m or arch.startswith(m + "_")]
    return max(matches, key=len) if matches else None


SUMS = "SHA256SUMS"
_VERIFIED: set[tuple] = set()  # (path, size, mtime) of files this process found as listed


def verify_sums(path: str) -> None:
    """A file that sits beside a ``SHA256SUMS`` listing it (the shipped teacher's folder) must
    match its sum: a changed or damaged copy is a :class:`CheckpointError` before it is read
    (torch loads a checkpoint with a flipped or scaled weight without a word). Files that no
    ``SHA256SUMS`` lists are not checked."""
    from lightcompress_runtime.files import file_sha256

    folder, name = os.path.split(os.path.abspath(path))
    sums = os.path.join(folder, SUMS)
    if not os.path.isfile(sums):
        return
    want = None
    try:
        with open(sums, encoding="utf-8") as f:
            for line in f:
                parts = line.strip().split(None, 1)
                if len(parts) == 2 and parts[1].lstrip("*") == name:
                    want = parts[0].lower()
    except (OSError, UnicodeDecodeError):
        return
    if want is None:
        return
    stat = os.stat(path)
    key = (os.path.abspath(path), stat.st_size, stat.st_mtime_ns)
    if key in _VERIFIED:
        return
    if file_sha256(path) != want:
        raise CheckpointError(
            f"{path} does not match its sum in {sums} (a changed or damaged copy): fetch it "
            f"again (git checkout -- {path} in a clone), or, for a model of your own, keep it "
            f"in a folder of its own or update {SUMS}"
        )
    _VERIFIED.add(key)


def read_checkpoint(path: str, upgrade: bool = False, overrides: dict | None = None) -> dict:
    """The state dict of the fairseq checkpoint ``path``.

    ``upgrade``: read it as fairseq's commands do (``load_checkpoint_to_cpu``: ``overrides``
    applied to its configuration, old formats upgraded); otherwise exactly as saved.
    """
    import lightcompress.plugin  # noqa: F401  (the allow-list; the plugin's architectures)

    if not os.path.exists(path):
        raise CheckpointError(f"checkpoint not found: {path}")
    if not os.path.isfile(path):
        raise CheckpointError(f"checkpoint {path} is not a file")
    with open(path, "rb") as f:
        head = f.read(4)
    if not head.startswith((b"PK\x03\x04", b"\x80")):  # torch's zip format, legacy pickle
        raise CheckpointError(f"{path} is not a checkpoint (no zip or pickle header: a text file?)")
    verify_sums(path)
    try:
        if upgrade:
            from fairseq import checkpoint_utils

            state = checkpoint_utils.load_checkpoint_to_cpu(path, overrides)
        else:
            import torch

            # weights_only stays on: the plugin allow-lists the types fairseq checkpoints hold
            state = torch.load(path, map_location="cpu")
    except KeyError as exc:  # fairseq's upgrade of the state reads entries every checkpoint has
        raise CheckpointError(
            f"{path} is not a fairseq checkpoint (no {exc.args[0]!r} entry)"
        ) from None
    except Exception as exc:  # noqa: BLE001  (truncated zip, foreign pickle, old format)
        raise CheckpointError(
            f"cannot read {path} as a fairseq checkpoint ({type(exc).__name__}: "
            f"{one_line(exc, first_sentence=True)}); is the file complete?"
        ) from None
    if not isinstance(state, dict) or "model" not in state:
        raise CheckpointError(f"{path} is not a fairseq checkpoint (no 'model' entry)")
    return state


def model_config(state: dict):
    """The model configuration a checkpoint holds: ``cfg.model`` or the ``args`` Namespace."""
    cfg = state.get("cfg")
    if cfg is not None and cfg.get("model") is not None:
        return cfg["model"]
    if state.get("args") is not None:
        return state["args"]
    raise CheckpointError("the checkpoint holds no model configuration (no cfg.model, no args)")


def checkpoint_arch(state: dict) -> str | None:
    """The architecture a fairseq checkpoint was trained with (``args.arch`` or ``cfg.model``)."""
    args = state.get("args")
    if args is not None and getattr(args, "arch", None):
        return args.arch
    cfg = state.get("cfg")
    model_cfg = None
    if cfg is not None:
        try:
            model_cfg = cfg["model"]
        except (KeyError, TypeError):
            model_cfg = getattr(cfg, "model", None)
    for key in ("arch", "_name"):
        value = None
        if isinstance(model_cfg, dict):
            value = model_cfg.get(key)
        elif model_cfg is not None:
            try:
                value = getattr(model_cfg, key, None)
            except Exception:  # noqa: BLE001  (omegaconf raises on missing keys of struct configs)
                value = None
        if value:
            return str(value)
    return None


def _unknown_arch_message(path: str, arch: str) -> str:
    from fairseq.models import MODEL_REGISTRY

    family = plugin_model_of(arch)
    if family is not None:
        if family not in MODEL_REGISTRY:
            return (
                f"{path}: architecture {arch!r} is a lightcompress architecture and the plugin "
                "is not loaded: pass --user-dir lightcompress"
            )
        return (
            f"{path}: architecture {arch!r} is not one of this lightcompress's (a checkpoint of "
            "another version of the plugin? `python -m lightcompress --list-archs` lists them)"
        )
    return (
        f"{path}: architecture {arch!r} is not registered: a checkpoint of a fairseq plugin "
        "needs that plugin (pass --user-dir DIR)"
    )


def check_registered(path: str, state: dict) -> str:
    """The checkpoint's architecture, which fairseq must know (else one line saying why not)."""
    from fairseq.models import ARCH_MODEL_REGISTRY, MODEL_REGISTRY

    import lightcompress.plugin  # noqa: F401  (the allow-list; the plugin's architectures)

    arch = checkpoint_arch(state)
    if arch is None:
        raise CheckpointError(
            f"{path} is not a fairseq checkpoint (no 'args' or 'cfg' naming a model)"
        )
    if arch not in ARCH_MODEL_REGISTRY and arch not in MODEL_REGISTRY:
        raise CheckpointError(_unknown_arch_message(path, arch))
    return arch


def classification_heads_in(sd) -> dict:
    """``{name: (num_classes, inner_dim)}`` of the RoBERTa classification heads in a state dict."""
    heads = {}
    for key, value in sd.items():
        if key.startswith("classification_heads.") and key.endswith(".out_proj.weight"):
            name = key[len("classification_heads.") : -len(".out_proj.weight")]
            heads[name] = (value.shape[0], value.shape[1])
    return heads


def build_model(state: dict, src_vocab, tgt_vocab=None, where: str = "the checkpoint", args=None):
    """The model ``state`` holds, built without data from its own configuration (or ``args``)
    with dictionaries ``src_vocab`` / ``tgt_vocab`` (sizes or fairseq Dictionaries; see
    :func:`lightcompress.build.build_model_without_data`) and the classification heads it
    holds, its weights loaded strictly; in eval mode. ``where`` starts the error message."""
    from lightcompress.build import build_model_without_data

    args = copy.deepcopy(model_config(state)) if args is None else args
    sd = state["model"]
    try:
        model = build_model_without_data(args, src_vocab, tgt_vocab)
        for name, (classes, inner) in classification_heads_in(sd).items():
            model.register_classification_head(name, num_classes=classes, inner_dim=inner)
        model.load_state_dict(sd, strict=True)
    except (RuntimeError, ValueError) as exc:
        raise CheckpointError(
            f"{where}: the weights do not fit its architecture: {one_line(exc)}"
        ) from None
    model.eval()
    return model


def _check_data(data: str | None, source_lang: str | None, target_lang: str | None) -> None:
    """Each cause of a missing language pair its own message (fairseq says only "Could not
    infer language pair")."""
    if bool(source_lang) != bool(target_lang):
        raise CheckpointError(
            "give both the source and the target language (-s and -t), or neither"
        )
    if not data:
        return
    if not os.path.isdir(data):
        raise CheckpointError(f"--data {data} is not a directory")
    dicts = sorted(f for f in os.listdir(data) if f.startswith("dict.") and f.endswith(".txt"))
    if not dicts:
        raise CheckpointError(f"--data {data} holds no dictionaries (dict.LANG.txt)")
    for lang in (source_lang, target_lang):
        if lang and f"dict.{lang}.txt" not in dicts:
            raise CheckpointError(
                f"--data {data} has no dict.{lang}.txt (it has {', '.join(dicts)})"
            )


def load_checkpoint(
    path: str, data: str | None, source_lang: str | None = None, target_lang: str | None = None
):
    """Load one checkpoint as ``fairseq-generate`` does, every failure as a
    :class:`~lightcompress.errors.CheckpointError`.

    Returns ``(model, task, model_args)``: the model in eval mode, its task (dictionaries of
    ``data``), and the model configuration the checkpoint holds (``args`` or ``cfg.model``).

    The file is read once (``load_checkpoint_to_cpu``, which also applies ``--data`` and
    upgrades old checkpoints), checked (a fairseq checkpoint, a registered architecture), then
    built by ``load_model_ensemble_and_task`` from that state.
    """
    from fairseq import checkpoint_utils

    import lightcompress.plugin  # noqa: F401  (the allow-list; the plugin's architectures)

    if not os.path.exists(path):
        raise CheckpointError(f"checkpoint not found: {path}")
    if not os.path.isfile(path):
        raise CheckpointError(f"checkpoint {path} is not a file")
    _check_data(data, source_lang, target_lang)
    overrides = {"data": data} if data else {}
    if source_lang:
        overrides.update(source_lang=source_lang, target_lang=target_lang)
    state = read_checkpoint(path, upgrade=True, overrides=overrides or None)
    arch = check_registered(path, state)
    try:
        models, cfg, task = checkpoint_utils.load_model_ensemble_and_task(
            [path], arg_overrides=overrides or None, state=state
        )
    except FileNotFoundError as exc:
        raise CheckpointError(
            f"cannot load {path}: {one_line(exc)} (give --data with the checkpoint's dictionaries)"
        ) from None
    except Exception as exc:  # noqa: BLE001  (weights that do not fit, a plugin's ConfigError)
        if "infer language pair" in str(exc):  # fairseq's translation task, from file names
            dicts = sorted(f for f in os.listdir(data) if f.startswith("dict.")) if data else []
            raise CheckpointError(
                f"the checkpoint does not name its languages and {data or 'its data directory'} "
                "has no binarized split to infer them from"
                + (f" (dictionaries: {', '.join(dicts)})" if dicts else " (and no dict.*.txt)")
                + ": give them with -s SRC -t TGT"
            ) from None
        raise CheckpointError(
            f"cannot load {path} ({arch}): {type(exc).__name__}: {one_line(exc)}"
        ) from None
    model_args = state.get("args") or state["cfg"]["model"]
    del state
    model = models[0]
    check_finite(model, path)
    model.prepare_for_inference_(cfg)
    model.eval()
    return model, task, model_args


def check_finite(model, path: str) -> None:
    """Refuse a model whose weights hold NaN or infinity (a diverged training, a damaged file):
    it would translate into garbage or fail deep inside the beam search."""
    import torch

    for name, tensor in model.named_parameters():
        if tensor.is_floating_point() and not torch.isfinite(tensor).all():
            bad = int((~torch.isfinite(tensor)).sum())
            raise CheckpointError(
                f"{path} holds non-finite weights: {name} has {bad:,} NaN or infinite values (a "
                "diverged training or a damaged file): it cannot translate"
            )


def load_for_task(path: str, task):
    """The model of checkpoint ``path`` built by ``task`` (``task.build_model``: its
    dictionaries, e.g. a teacher's for the student's task), weights loaded strictly; in eval
    mode, on CPU. Weights that do not fit the task's dictionaries are a CheckpointError."""
    from fairseq import checkpoint_utils

    import lightcompress.plugin  # noqa: F401  (the allow-list; the plugin's architectures)

    state = read_checkpoint(path, upgrade=True)
    arch = check_registered(path, state)
    try:
        models, _ = checkpoint_utils.load_model_ensemble([path], task=task, state=state)
    except ConfigError:  # the plugin's own words on its configuration
        raise
    except Exception as exc:  # noqa: BLE001  (size mismatches: other dictionaries, ...)
        detail = (str(exc).strip().splitlines() or [type(exc).__name__])[-1][:300]
        raise CheckpointError(f"cannot build {path} ({arch}): {detail}") from None
    model = models[0]
    model.eval()
    return model
