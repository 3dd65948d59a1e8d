"""Rebuilding fairseq's optimizer in place after some parameters were replaced.

A rank change gives a CP layer new ``nn.Parameter`` objects of other shapes. fairseq's trainer
built its optimizer over the old ones and the task cannot reach the trainer, so the optimizer
object the trainer holds (and its learning-rate scheduler refers to) is rebuilt in place:

- every replaced parameter is swapped for its replacement at the same position of its
  parameter group (the order ``model.parameters()`` gives, which the trainer would use to build
  a new optimizer, e.g. when resuming from the checkpoint), and its state (Adam moments, step)
  is dropped: the new factors start with fresh statistics; every other parameter keeps its
  state object untouched;
- ``--fp16`` (:class:`fairseq.optim.FP16Optimizer`): the fp32 master copies are rebuilt from
  the fp16 parameters (one flat tensor per device, or one per parameter with
  ``--fp16-no-flatten-grads``); the state of the flat master is re-laid out, moving each kept
  parameter's slice of every moment to its new offset and zeroing the new parameters' slices;
- ``--memory-efficient-fp16``, ``--amp`` and plain optimizers: the wrapped torch optimizer's
  groups are edited as above.
"""

from __future__ import annotations

import torch
from torch import nn

__all__ = ["replace_parameters"]


def _torch_optimizer(opt):
    inner = getattr(opt, "_optimizer", None)
    if isinstance(opt, torch.optim.Optimizer):
        return opt
    if isinstance(inner, torch.optim.Optimizer):
        return inner
    raise TypeError(f"cannot find the torch optimizer inside {type(opt).__name__}")


def _swap_torch(topt: torch.optim.Optimizer, mapping: dict[int, nn.Parameter]) -> int:
    """Swap parameters of a torch optimizer (by ``id`` of the old one); drop their state."""
    swapped = 0
    for group in topt.param_groups:
        params = []
        for p in group["params"]:
            new = mapping.get(id(p))
            if new is not None:
                topt.state.pop(p, None)
                params.append(new)
                swapped += 1
            else:
                params.append(p)
        group["params"] = params
    return swapped


def _flat_master(params: list[nn.Parameter], like: torch.Tensor) -> nn.Parameter:
    total = sum(p.numel() for p in params)
    flat = like.new_empty(total)
    offset = 0
    for p in params:
        flat[offset : offset + p.numel()].copy_(p.data.view(-1))
        offset += p.numel()
    flat = nn.Parameter(flat)
    flat.grad = flat.data.new_zeros(total)
    return flat


def _rebuild_fp16(opt, mapping: dict[int, nn.Parameter]) -> int:
    old16 = list(opt.fp16_params)
    new16 = [mapping.get(id(p), p) for p in old16]
    swapped = sum(1 for p in old16 if id(p) in mapping)
    topt = _torch_optimizer(opt.fp32_optimizer)
    if isinstance(opt.fp32_params, dict):  # flat masters, one per device
        if len(opt.fp32_params) != 1:
            raise RuntimeError("rank changes are not supported with pipeline-parallel fp16")
        ((device, old_flat),) = opt.fp32_params.items()
        new_flat = _flat_master(new16, old_flat.data)
        # where every kept parameter lay in the old flat tensor and lies in the new one
        moves, old_off, new_off = [], 0, 0
        for old, new in zip(old16, new16):
            if old is new:
                moves.append((old_off, new_off, old.numel()))
            old_off += old.numel()
            new_off += new.numel()
        state = topt.state.pop(old_flat, None)
        if state:
            relaid = {}
            for key, value in state.items():
                if torch.is_tensor(value) and value.numel() == old_flat.numel():
                    fresh = value.new_zeros(new_flat.numel())
                    for a, b, n in moves:
                        fresh[b : b + n].copy_(value[a : a + n])
                    relaid[key] = fresh
                else:
                    relaid[key] = value
            topt.state[new_flat] = relaid
        for group in topt.param_groups:
            group["params"] = [new_flat if p is old_flat else p for p in group["params"]]
        opt.fp32_params[device] = new_flat
    else:  # one fp32 master per parameter
        masters = list(opt.fp32_params)
        master_map = {}
        for i, (old, new) in enumerate(zip(old16, new16)):
            if old is not new:
                p32 = nn.Parameter(new.data.float())
                p32.grad = torch.zeros_like(p32.data)
                master_map[id(masters[i])] = p32
                masters[i] = p32
        _swap_torch(topt, master_map)
        opt.fp32_params = masters
    opt.fp16_params = new16
    return swapped


def replace_parameters(optimizer, mapping: dict[int, nn.Parameter]) -> int:
    """Swap replaced parameters inside a fairseq (or torch) optimizer (module docstring).

    Parameters
    ----------
    optimizer
        fairseq's optimizer as the trainer holds it (``FairseqOptimizer``, ``FP16Optimizer``,
        ``MemoryEfficientFP16Optimizer``, ``AMPOptimizer``) or a torch optimizer.
    mapping : dict
        ``id(old parameter) -> new parameter``.

    Returns
    -------
    int
        How many parameters were swapped.
    """
    if not mapping:
        return 0
    if hasattr(optimizer, "fp16_params") and hasattr(optimizer, "fp32_params"):
        return _rebuild_fp16(optimizer, mapping)
    for attr in ("wrapped_optimizer", "fp32_optimizer"):  # memory-efficient fp16, amp
        inner = getattr(optimizer, attr, None)
        if inner is not None:
            return replace_parameters(inner, mapping)
    return _swap_torch(_torch_optimizer(optimizer), mapping)
