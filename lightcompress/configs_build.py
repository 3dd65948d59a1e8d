"""A row's hydra config (``configs/<family>/<row>.yaml``) composed and its model built, as
``fairseq-hydra-train`` does, without data.

:func:`compose` reads a config the way ``fairseq-hydra-train --config-dir DIR --config-name
NAME`` does (fairseq's ``FairseqConfig`` schema, the config, the overrides; the plugin imported
from ``common.user_dir``; ``add_defaults`` filling in the dataclass defaults of the task,
criterion, optimizer and scheduler). :func:`build_config_model` builds the model of a composed
config (or of a ``{group: {key: value}}`` dict) through fairseq's own ``build_model``: the
plugin's architectures are fairseq's legacy (argparse) models, whose architecture function
fills in the preset's defaults on the config; a dataclass model (the Subformer language model)
merges its dataclass.
"""

from __future__ import annotations

import functools
import os
import warnings
from collections.abc import Sequence

from torch.overrides import TorchFunctionMode

__all__ = ["build_config_model", "compose"]


def compose(config_dir: str, name: str, overrides: Sequence[str] = ()):
    """The configuration ``fairseq-hydra-train --config-dir config_dir --config-name name
    overrides...`` trains with (a ``DictConfig``)."""
    from fairseq import utils
    from fairseq.dataclass.initialize import add_defaults, hydra_init
    from hydra import compose as hydra_compose
    from hydra import initialize_config_dir
    from hydra.core.config_store import ConfigStore
    from hydra.core.global_hydra import GlobalHydra
    from omegaconf import OmegaConf

    path = os.path.join(config_dir, name + ".yaml")
    if not os.path.isfile(path):
        # fairseq-hydra-train would compose fairseq's empty defaults under that name
        rows = sorted(f[:-5] for f in os.listdir(config_dir) if f.endswith(".yaml"))
        near = ", ".join(r for r in rows if r.split("_")[0] == name.split("_")[0]) or ", ".join(
            rows
        )
        raise ValueError(f"no config {name!r} in {config_dir} (rows there: {near})")
    GlobalHydra.instance().clear()
    # hydra_init stores fairseq's schema under the config's name; that entry is removed again
    # after composing (each composed name would otherwise stay in hydra's store, which every
    # later compose copies whole: a process composing a hundred rows got slower with each)
    store, key = ConfigStore.instance().repo, f"{name}.yaml"
    stored = key in store
    hydra_init(name)
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            with initialize_config_dir(config_dir=os.path.abspath(config_dir), version_base="1.1"):
                cfg = hydra_compose(config_name=name, overrides=list(overrides))
    finally:
        if not stored:
            store.pop(key, None)
    GlobalHydra.instance().clear()
    utils.import_user_module(cfg.common)
    add_defaults(cfg)
    OmegaConf.set_struct(cfg, False)
    return cfg


def build_config_model(cfg, src_vocab: int, tgt_vocab: int | None = None, meta: bool = True):
    """Build the model of ``cfg`` (a composed config, or a ``{group: {key: value}}`` dict)
    with random weights and dictionaries of the given sizes (on the meta device by default:
    the parameter count without the memory)."""
    import torch
    from fairseq.models import build_model
    from omegaconf import OmegaConf

    from lightcompress.build import NoDataTask

    if not OmegaConf.is_config(cfg):
        cfg = OmegaConf.create(cfg)
    src = _dictionary(src_vocab)
    tgt = src if tgt_vocab is None else _dictionary(tgt_vocab)
    model_cfg = cfg.model
    if "tokens_per_sample" in cfg.get("task", {}) and OmegaConf.is_config(model_cfg):
        # a language model's interpolation ${task.tokens_per_sample}, resolved in place
        model_cfg = OmegaConf.create(OmegaConf.to_container(cfg, resolve=True)["model"])
    task = NoDataTask(src, tgt)
    if cfg.task.get("_name") == "sentence_prediction":
        task.cfg = cfg.task  # RoBERTa's classification head reads num_classes from it
    if not meta:
        return build_model(model_cfg, task)
    with torch.device("meta"), _NoInitOnMeta():
        return build_model(model_cfg, task)


@functools.lru_cache(maxsize=8)
def _dictionary(size: int):
    from lightcompress.build import dictionary_of_size

    return dictionary_of_size(size)


class _NoInitOnMeta(TorchFunctionMode):
    """Meta tensors hold no values: their in-place initialisers are skipped (on the meta device
    torch runs them through Python reference code, slower than building the model)."""

    def __torch_function__(self, func, types, args=(), kwargs=None):
        if (
            args
            and getattr(func, "__name__", "") in _INITIALISERS
            and getattr(args[0], "is_meta", False)
        ):
            return args[0]
        return func(*args, **(kwargs or {}))


_INITIALISERS = frozenset(
    (
        "normal_",
        "uniform_",
        "fill_",
        "zero_",
        "erfinv_",
        "mul_",
        "add_",
        "clamp_",
        "copy_",
        "exponential_",
        "random_",
        "bernoulli_",
        "div_",
        "sub_",
    )
)
