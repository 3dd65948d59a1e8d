"""``fairseq-hydra-train`` with the plugin: a config that cannot train ends in one line.

Under ``fairseq-hydra-train`` (``configs/``) hydra runs the training inside its own error
handler, which prints every exception with a traceback, so the plugin's one-line errors
(:func:`lightcompress.compat.report_config_errors`) never show, and fairseq's own failures on a
config left incomplete are tracebacks from deep inside it. fairseq imports the plugin
(``common.user_dir``) at the start of its training ``main``; :func:`install` then

- checks the config (:func:`check_config`) right after fairseq fills in its defaults, before
  the save directory, the data or the model are touched: a mandatory value left at ``???``
  (``task.data``, ``model.dawid_teacher``, ...), a ``task.data`` directory that does not
  exist, the plugin models' integer and number flags given something else (``model.lc_rank=abc``),
  ``common.fp16`` on a run without a CUDA device (fairseq's fp16 optimizer needs one);
- makes the plugin's errors raised while fairseq sets up the task, builds the model or the
  criterion and loads the checkpoint (a bad spec, a rank the matrix cannot have, a data-bin
  without its dictionaries) errors of a class that also derives from hydra's
  ``CompactHydraException``, which hydra prints as its message alone.

The error is still the plugin's (:class:`~lightcompress.errors.ConfigError`, or the class
raised): with ``HYDRA_FULL_ERROR=1`` it reaches the plugin's excepthook, one line too. Outside
a hydra run (``fairseq-train``, the plugin's commands, a library user) nothing changes.
"""

from __future__ import annotations

import functools
import os
import sys

from lightcompress.errors import ConfigError, LightcompressError, one_line

__all__ = ["check_config", "compact", "install"]


def _under_hydra() -> bool:
    """True inside a hydra job (``fairseq-hydra-train``)."""
    if "hydra" not in sys.modules:
        return False
    try:
        from hydra.core.hydra_config import HydraConfig
    except ImportError:  # pragma: no cover - fairseq depends on hydra
        return False
    return HydraConfig.initialized()


@functools.cache
def _compact_class(cls: type) -> type:
    from hydra.errors import CompactHydraException

    if issubclass(cls, CompactHydraException):
        return cls
    return type(cls.__name__, (cls, CompactHydraException), {"__module__": cls.__module__})


def compact(exc: LightcompressError) -> LightcompressError:
    """``exc`` as an error hydra prints as one line (its message): an instance of a subclass of
    its class and of ``CompactHydraException``."""
    new = _compact_class(type(exc))(str(exc))
    new.__dict__.update(exc.__dict__)
    return new


def _config_error(message: str) -> LightcompressError:
    return compact(ConfigError(message))


# ------------------------------------------------------------------------------ the checks


def check_config(cfg) -> None:
    """Refuse (:class:`ConfigError`, one line naming the key) a ``fairseq-hydra-train`` config
    that cannot train: see the module docstring. ``cfg`` is fairseq's training config after
    ``add_defaults`` (the plugin imported)."""
    _check_missing(cfg)
    _check_data(cfg)
    _check_model_flags(cfg)
    _check_fp16(cfg)


def _check_missing(cfg) -> None:
    from omegaconf import DictConfig, OmegaConf

    for group in cfg:
        node = cfg.get(group) if group != "job_logging_cfg" else None
        if not isinstance(node, DictConfig):
            continue
        for key in node:
            if (group, key) != ("task", "data") and OmegaConf.is_missing(node, key):
                hint = "DIR" if key == "data" or key.endswith(("_data", "_dir")) else "..."
                raise _config_error(
                    f"{group}.{key} is not set (??? in the config): give it on the command "
                    f"line, {group}.{key}={hint}"
                )


def _check_data(cfg) -> None:
    from omegaconf import OmegaConf

    task = cfg.get("task")
    if task is None or "data" not in task:
        return
    data = None if OmegaConf.is_missing(task, "data") else task.get("data")
    if data is None or (isinstance(data, str) and not data.strip()):
        raise _config_error(
            "task.data is not set: give the data-bin directory (fairseq-preprocess's "
            "--destdir) on the command line, task.data=DIR"
        )
    if not isinstance(data, str) or "://" in data:
        return
    paths = data.split(os.pathsep)  # fairseq's shards: DIR1:DIR2:...
    for path in paths:
        if os.path.isfile(path):
            raise _config_error(
                f"task.data={data}: {path} is a file; task.data is the data-bin directory "
                "(fairseq-preprocess's --destdir)"
            )
        if not os.path.isdir(path):
            raise _config_error(
                f"task.data={data}: no directory {path} (task.data is the data-bin directory, "
                "fairseq-preprocess's --destdir)"
            )
    _check_dictionaries(task, data, paths[0])


def _check_dictionaries(task, data, path) -> None:
    """A translation task's data-bin holds ``dict.<lang>.txt`` of both its languages."""
    from fairseq.tasks import TASK_REGISTRY
    from fairseq.tasks.translation import TranslationTask

    cls = TASK_REGISTRY.get(task.get("_name"))
    if cls is None or not issubclass(cls, TranslationTask):
        return
    for side in ("source_lang", "target_lang"):
        lang = task.get(side)
        if lang and not os.path.isfile(os.path.join(path, f"dict.{lang}.txt")):
            have = sorted(f for f in os.listdir(path) if f.startswith("dict.")) or ["none"]
            raise _config_error(
                f"task.data={data}: no dict.{lang}.txt in {path} (task.{side}={lang}; "
                f"dictionaries there: {', '.join(have)}): not a data-bin of fairseq-preprocess "
                "for these languages"
            )


def _model_class(name):
    from fairseq.models import ARCH_MODEL_REGISTRY, MODEL_REGISTRY

    return ARCH_MODEL_REGISTRY.get(name) or MODEL_REGISTRY.get(name)


def _model_flags(cls) -> dict:
    """dest -> argparse action of the flags of the legacy (argparse) model ``cls``."""
    import argparse

    parser = argparse.ArgumentParser(add_help=False, allow_abbrev=False)
    cls.add_args(parser)
    return {a.dest: a for a in parser._actions}


def _check_model_flags(cfg) -> None:
    """The plugin's legacy models take their flags from the config as they are (fairseq's
    argparse converts them on the command line, hydra does not): an integer or number flag
    given a string, a boolean or a list, or a value outside its choices, is refused; a string
    that argparse would have converted (``'8'``) is converted."""
    from fairseq.models import MODEL_DATACLASS_REGISTRY, MODEL_REGISTRY
    from omegaconf import ListConfig

    model = cfg.get("model")
    name = model.get("_name") if model is not None else None
    cls = _model_class(name) if name else None
    if cls is None or not cls.__module__.startswith("lightcompress."):
        return
    model_name = next((n for n, c in MODEL_REGISTRY.items() if c is cls), None)
    if model_name in MODEL_DATACLASS_REGISTRY or not hasattr(cls, "add_args"):
        return  # a dataclass model: omegaconf checks its types
    flags = _model_flags(cls)
    for key in model:
        action = flags.get(key)
        value = model.get(key)
        if action is None or value is None:
            continue
        flag = action.option_strings[-1] if action.option_strings else key
        what = f"model.{key}={value!r}"
        about = f"{flag} of {name}" + (f": {one_line(action.help, 120)}" if action.help else "")
        kind = action.type if action.type in (int, float) else None
        if kind is not None:
            if isinstance(value, (list, tuple, ListConfig, bool)):
                ok = False
            elif isinstance(value, str):
                try:
                    converted = kind(value)
                except ValueError:
                    ok = False
                else:
                    model[key] = value = converted
                    ok = True
            else:
                ok = isinstance(value, int) or (kind is float and isinstance(value, float))
            if not ok:
                expected = "an integer" if kind is int else "a number"
                raise _config_error(f"{what} is not {expected} ({about})")
        choices = action.choices
        if choices is not None and value not in choices and str(value) not in choices:
            listed = ", ".join(str(c) for c in choices)
            raise _config_error(f"{what} is not one of {listed} ({about})")


def _check_fp16(cfg) -> None:
    """fairseq's fp16 optimizer (``common.fp16`` without the memory-efficient, bf16 or AMP
    variants, or ``fp16_no_flatten_grads``) keeps its flat fp32 copy on the current CUDA
    device: a run without one fails after the model is built ("Torch not compiled with CUDA
    enabled")."""
    common = cfg.get("common")
    if common is None or not common.get("fp16") or common.get("tpu"):
        return
    others = (
        "memory_efficient_fp16",
        "memory_efficient_bf16",
        "bf16",
        "amp",
        "fp16_no_flatten_grads",
    )
    if any(common.get(k) for k in others):
        return
    if cfg.get("distributed_training", {}).get("ddp_backend") == "fully_sharded":
        return
    import torch

    if common.get("cpu"):
        why = "common.cpu=true"
    elif not torch.cuda.is_available():
        why = "torch sees no CUDA device here"
    else:
        return
    raise _config_error(
        f"common.fp16=true needs a CUDA GPU (fairseq's fp16 optimizer) and this run has none "
        f"({why}): train in fp32 with common.fp16=false, or in bf16 with common.fp16=false "
        "common.bf16=true"
    )


# --------------------------------------------------------------------------- installing


def _checked_add_defaults(add_defaults):
    @functools.wraps(add_defaults)
    def wrapper(cfg, *args, **kwargs):
        if not _under_hydra():
            return add_defaults(cfg, *args, **kwargs)
        from omegaconf.errors import OmegaConfBaseException

        _check_missing(cfg)  # before the plugin's dataclasses replace a ??? by their default
        try:
            result = add_defaults(cfg, *args, **kwargs)
        except OmegaConfBaseException as exc:  # a value of a dataclass's type it cannot take
            key = getattr(exc, "full_key", None)
            group = _group_of(getattr(exc, "object_type", None))
            if key and group:
                key = f"{group}.{key}"
            message = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
            raise _config_error(f"{key}: {message}" if key else message) from None
        check_config(cfg)
        _remember_save_dir(cfg)
        return result

    wrapper._lightcompress = True
    return wrapper


def _group_of(dataclass) -> str | None:
    """The config group (``task``, ``criterion``, ...) whose registry holds ``dataclass``."""
    if dataclass is None:
        return None
    from fairseq.models import MODEL_DATACLASS_REGISTRY
    from fairseq.registry import REGISTRIES
    from fairseq.tasks import TASK_DATACLASS_REGISTRY

    registries = {"task": TASK_DATACLASS_REGISTRY, "model": MODEL_DATACLASS_REGISTRY}
    registries.update((k, v["dataclass_registry"]) for k, v in REGISTRIES.items())
    for group, registry in registries.items():
        if any(dataclass is dc for dc in registry.values()):
            return group
    return None


_NEW_DIRS: list[str] = []  # the save directory and its parents the run is about to create


def _remember_save_dir(cfg) -> None:
    """Note which directories of ``checkpoint.save_dir`` do not exist yet (fairseq creates
    it before it reads the data and builds the model): a run that fails on its config then
    leaves none of them behind (:func:`_forget_new_dirs`)."""
    _NEW_DIRS.clear()
    save_dir = cfg.get("checkpoint", {}).get("save_dir")
    if not isinstance(save_dir, str) or not save_dir:
        return
    path = os.path.abspath(save_dir)
    while path and not os.path.exists(path) and path != os.path.dirname(path):
        _NEW_DIRS.append(path)
        path = os.path.dirname(path)


def _forget_new_dirs() -> None:
    for path in _NEW_DIRS:  # the deepest first
        try:
            os.rmdir(path)  # only an empty one
        except OSError:
            break
    _NEW_DIRS.clear()


def _compact_errors(fn, describe=None):
    """``fn`` raising the plugin's errors as :func:`compact` ones under hydra; ``describe``
    (``exc, args -> message or None``) turns other errors into one-line ConfigErrors."""

    @functools.wraps(fn)
    def wrapper(*args, **kwargs):
        try:
            return fn(*args, **kwargs)
        except LightcompressError as exc:
            if not _under_hydra():
                raise
            _forget_new_dirs()
            raise compact(exc) from exc
        except Exception as exc:
            if describe is None or not _under_hydra():
                raise
            message = describe(exc, args)
            if message is None:
                raise
            _forget_new_dirs()
            raise _config_error(message) from exc

    wrapper._lightcompress = True
    return wrapper


def _describe_task_error(exc, args):
    """A data-bin fairseq cannot read (no dictionary for the languages, no split)."""
    if not isinstance(exc, OSError) or not args or not hasattr(args[0], "get"):
        return None
    data, name = args[0].get("data"), args[0].get("_name")
    text = exc.strerror or one_line(exc)
    where = f": {exc.filename}" if getattr(exc, "filename", None) else ""
    return (
        f"task.data={data}: the {name} task cannot read it ({text}{where}); is it a "
        "data-bin of fairseq-preprocess for task.source_lang / task.target_lang?"
    )


def _wrap(module, name, make) -> None:
    fn = getattr(module, name, None)
    if fn is not None and not getattr(fn, "_lightcompress", False):
        setattr(module, name, make(fn))


def install() -> None:
    """Install the checks (once; they act only inside a hydra job)."""
    from fairseq import checkpoint_utils, criterions, models, tasks

    _wrap(tasks, "setup_task", lambda f: _compact_errors(f, _describe_task_error))
    _wrap(models, "build_model", _compact_errors)
    _wrap(criterions, "build_criterion", _compact_errors)
    _wrap(checkpoint_utils, "load_checkpoint", _compact_errors)
    train = sys.modules.get("fairseq_cli.train")
    if train is not None:  # fairseq's training main imports the plugin: it is running
        _wrap(train, "add_defaults", _checked_add_defaults)
    for name in ("fairseq_cli.hydra_train", "__main__"):
        module = sys.modules.get(name)
        if module is not None and hasattr(module, "_hydra_main"):
            # the next jobs of this process (hydra's --multirun): their first add_defaults
            # knows the plugin's dataclasses and would replace a ??? by the default
            _wrap(module, "add_defaults", _missing_checked)


def _missing_checked(add_defaults):
    @functools.wraps(add_defaults)
    def wrapper(cfg, *args, **kwargs):
        if _under_hydra():
            _check_missing(cfg)
        return add_defaults(cfg, *args, **kwargs)

    wrapper._lightcompress = True
    return wrapper
