"""Cross-layer parameter sharing (LightFormer groups, Subformer sandwich and Table 2 variants).

A *schedule* is a list of ``L`` integers: position ``i`` uses unique layer ``schedule[i]``;
unique layers are numbered ``0..U-1`` in order of first use. :func:`tie_layers` makes the
positions with the same number share parameters.

Ties and checkpoints: ties are made at model-build time (call :func:`tie_layers` after the
layers are built, and after any module replacement such as
:meth:`CompressionSpec.apply <lightcompress.modules.spec.CompressionSpec.apply>` or
:meth:`CPLinear.set_rank <lightcompress.modules.cp.CPLinear.set_rank>`). ``state_dict()`` of a
tied model lists the shared tensor under every position's key; ``load_state_dict`` copies each
key into the same ``Parameter``, so ties survive (the values of the duplicates are equal in a
checkpoint saved from a tied model).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import torch
from torch import nn

__all__ = [
    "all_except_last",
    "all_shared",
    "count_unique_params",
    "every_k",
    "group_schedule",
    "num_unique",
    "sandwich_schedule",
    "tie_layers",
    "unique_parameters",
]


def _check_layers(num_layers: int) -> None:
    if num_layers < 1:
        raise ValueError(f"need at least one layer, got {num_layers}")


def group_schedule(num_layers: int, num_groups: int) -> list[int]:
    """Contiguous groups (LightFormer): ``L`` layers in ``G`` groups sharing all parameters.

    Uneven splits follow ``numpy.array_split``: the first ``L mod G`` groups get one more
    layer. ``group_schedule(6, 3) == [0, 0, 1, 1, 2, 2]``,
    ``group_schedule(7, 3) == [0, 0, 0, 1, 1, 2, 2]``.
    """
    _check_layers(num_layers)
    if not 1 <= num_groups <= num_layers:
        raise ValueError(f"num_groups must be in [1, {num_layers}], got {num_groups}")
    base, extra = divmod(num_layers, num_groups)
    out: list[int] = []
    for g in range(num_groups):
        out += [g] * (base + (1 if g < extra else 0))
    return out


def sandwich_schedule(num_layers: int) -> list[int]:
    """Subformer sandwich: first and last independent, the middle ``L - 2`` layers shared.

    ``sandwich_schedule(6) == [0, 1, 1, 1, 1, 2]``; ``L <= 2`` shares nothing.
    """
    _check_layers(num_layers)
    if num_layers <= 2:
        return list(range(num_layers))
    return [0] + [1] * (num_layers - 2) + [2]


def all_shared(num_layers: int) -> list[int]:
    """Every layer shares one set of parameters: ``[0] * L``."""
    _check_layers(num_layers)
    return [0] * num_layers


def every_k(num_layers: int, k: int) -> list[int]:
    """Blocks of ``k`` consecutive layers share (Subformer "every 2 layers": [1,2],[3,4],...).

    ``every_k(6, 2) == [0, 0, 1, 1, 2, 2]``; a last, shorter block when ``k`` does not divide
    ``L`` (``every_k(5, 2) == [0, 0, 1, 1, 2]``).
    """
    _check_layers(num_layers)
    if k < 1:
        raise ValueError(f"k must be >= 1, got {k}")
    return [i // k for i in range(num_layers)]


def all_except_last(num_layers: int) -> list[int]:
    """Layers ``1..L-1`` share, the last is independent: ``[0] * (L - 1) + [1]``."""
    _check_layers(num_layers)
    if num_layers == 1:
        return [0]
    return [0] * (num_layers - 1) + [1]


def num_unique(schedule: Sequence[int]) -> int:
    """Number of unique layers in a schedule."""
    return len(set(schedule))


def tie_layers(
    layers: Sequence[nn.Module],
    schedule: Sequence[int],
    share: Callable[[str], bool] = lambda name: True,
) -> list[str]:
    """Make layers with the same schedule number share parameters (in place).

    The first position using a unique layer owns its parameters; every later position with
    the same number gets the owner's ``nn.Parameter`` objects assigned to its own submodules
    (its module objects stay distinct, so per-layer buffers and attributes are kept).

    Parameters
    ----------
    layers : sequence of nn.Module
        E.g. an ``nn.ModuleList`` of ``L`` structurally identical layers.
    schedule : sequence of int
        ``L`` unique-layer numbers (see the schedule functions).
    share : callable
        ``share(name) -> bool`` on parameter names relative to a layer (e.g.
        ``"self_attn.k_proj.weight"``); only those for which it is True are tied. Subformer's
        sandwich keeps LayerNorms independent: ``share=lambda n: "layer_norm" not in n``;
        "all-shared, independent FFN": ``share=lambda n: not n.startswith(("fc1", "fc2"))``.

    Returns
    -------
    list of str
        ``"<position>.<name>"`` of every parameter that was replaced.

    Raises
    ------
    ValueError
        If lengths differ or a shared parameter is missing or has another shape in a layer.
    """
    if len(layers) != len(schedule):
        raise ValueError(f"{len(layers)} layers but a schedule of length {len(schedule)}")
    owners: dict[int, int] = {}
    tied: list[str] = []
    for pos, uid in enumerate(schedule):
        if uid not in owners:
            owners[uid] = pos
            continue
        owner = layers[owners[uid]]
        target = layers[pos]
        target_params = dict(target.named_parameters(remove_duplicate=False))
        for name, param in owner.named_parameters(remove_duplicate=False):
            if not share(name):
                continue
            if name not in target_params:
                raise ValueError(
                    f"layer {pos} has no parameter {name!r} to tie to layer {owners[uid]}"
                )
            if target_params[name].shape != param.shape:
                raise ValueError(
                    f"cannot tie {name!r}: shape {tuple(target_params[name].shape)} in layer "
                    f"{pos} vs {tuple(param.shape)} in layer {owners[uid]}"
                )
            mod_name, _, attr = name.rpartition(".")
            module = target.get_submodule(mod_name) if mod_name else target
            setattr(module, attr, param)
            tied.append(f"{pos}.{name}")
    return tied


def _storage_key(p: torch.Tensor) -> tuple | None:
    """Where a real tensor's values live (one view of one storage), or None when that is not
    known: meta tensors have no storage (every one reports address 0), sparse and other
    exotic tensors none that a view can be compared by."""
    if p.device.type == "meta" or p.layout is not torch.strided or not p.numel():
        return None
    try:
        ptr = p.untyped_storage().data_ptr()
    except (RuntimeError, NotImplementedError, TypeError):
        return None
    return (
        p.device,
        ptr,
        p.storage_offset(),
        tuple(p.shape),
        tuple(p.stride()),
        p.dtype,
    )


def unique_parameters(
    module: nn.Module, trainable_only: bool = False
) -> list[tuple[nn.Parameter, list[str]]]:
    """Every distinct parameter tensor of ``module`` once, with all the names it is reachable
    under, in the order of ``named_parameters``.

    Two names denote the same tensor when they lead to the same ``Parameter`` object (a tied
    weight, a module used twice, layers tied by :func:`tie_layers`) or, for tensors with real
    storage, to the same view of the same storage (two ``Parameter`` objects over one tensor:
    same storage address, offset, shape, stride and dtype). Tensors on the meta device have no
    storage and are told apart by object identity only, so distinct tensors of equal shape are
    never merged.

    Parameters
    ----------
    trainable_only : bool
        Skip parameters with ``requires_grad=False``.
    """
    by_id: dict[int, int] = {}
    by_storage: dict[tuple, int] = {}
    groups: list[tuple[nn.Parameter, list[str]]] = []
    for name, p in module.named_parameters(remove_duplicate=False):
        if trainable_only and not p.requires_grad:
            continue
        index = by_id.get(id(p))
        if index is None:
            key = _storage_key(p)
            index = by_storage.get(key) if key is not None else None
            if index is None:
                index = len(groups)
                groups.append((p, []))
                if key is not None:
                    by_storage[key] = index
            by_id[id(p)] = index
        groups[index][1].append(name)
    return groups


def count_unique_params(module: nn.Module, trainable_only: bool = False) -> int:
    """Number of parameter entries, counting each distinct tensor once
    (see :func:`unique_parameters`: by ``Parameter`` identity and, for real tensors, by shared
    storage; correct on the meta device, where only identity applies)."""
    return sum(p.numel() for p, _names in unique_parameters(module, trainable_only))
