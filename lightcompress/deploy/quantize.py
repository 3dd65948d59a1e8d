"""Dynamic int8 quantization of every linear map of a model, factorized layers included.

Usage (any script that generates with fairseq)::

    from lightcompress.deploy.quantize import quantize_model_int8

    models, cfg, task = checkpoint_utils.load_model_ensemble_and_task([path])
    models = [quantize_model_int8(m) for m in models]  # returns quantized copies
    generator = task.build_generator(models, cfg.generation)

``scripts/measure_speed.sh --quantize int8`` (or ``--compare-int8``) does exactly this.

What happens
------------
1. Modules whose class is registered in :data:`QUANTIZE_HANDLERS` are replaced by an equivalent
   module built from ``nn.Linear`` s (same outputs in float32). The handlers of the layer kinds
   come from the kind registry (each variant's ``int8``, :mod:`lightcompress.modules.registry`):

   - ``LowRankLinear`` (``y = x V^T U^T + b``) -> ``Linear(in, r, bias=False)`` then
     ``Linear(r, out)``; both maps become int8;
   - ``CPLinear`` -> ``Linear(d_k, R, bias=False)`` applied per head, the element-wise head
     weighting ``w1`` (kept float32), then ``Linear(R, out)``;
   - ``TiedOutputProjection`` (logits from a tied, possibly low-rank, embedding table) -> one
     ``Linear(d, V)`` or, for a table whose kind declares two factors (``LowRankEmbedding``:
     the registry's ``factors``), ``Linear(d, r)`` then ``Linear(r, V)``: the
     output projection gets its own int8 copy of the table, as fairseq's tied ``nn.Linear``
     does; the embedding lookup itself stays float32;
   - ``HybridLinear`` needs no handler: its dense part is an ``nn.Linear`` and its factorized part
     is handled by its own class;
   - ``TTLinear`` has none: its forward is a chain of tensor contractions (``tensordot``) of the
     cores, not products with a weight matrix that ``quantize_dynamic`` could pack; TT layers stay
     float32 (densifying them would change what is computed).

   Further classes register a converter with :func:`register_quantize_handler`. Modules shared by
   several parents (layer sharing) are converted once and stay shared.
2. ``torch.ao.quantization.quantize_dynamic(model, {nn.Linear}, dtype=torch.qint8)``: weights are
   stored as packed int8 (per-tensor scale), activations quantized on the fly. Embedding tables
   stay float32 (lookups); a tied output projection gets its own int8 copy of the table.
3. fairseq's ``MultiheadAttention`` is switched off its fast path (``_set_skip_embed_dim_check``):
   without incremental state (the encoder, and teacher-forced decoding) it calls
   ``F.multi_head_attention_forward`` with ``q_proj.weight`` etc., which on a dynamically quantized
   Linear is a method, not a tensor, so the call would fail. With the flag set, attention calls
   ``self.q_proj(x)`` - the quantized module - and computes the same result.
"""

from __future__ import annotations

import copy
from collections.abc import Callable

import torch
from torch import nn

from lightcompress.integration import TiedOutputProjection, disable_attention_fast_path
from lightcompress.modules.lowrank import TwoLinear
from lightcompress.modules.registry import QUANTIZE, two_factors

__all__ = [
    "LARGE_MAP_ELEMENTS",
    "QUANTIZE_HANDLERS",
    "count_quantized_linears",
    "disable_attention_fast_path",
    "linear_names",
    "prepare_for_int8",
    "quantize_model_int8",
    "register_quantize_handler",
]

#: class -> function(module) returning an equivalent module made of nn.Linear (float32).
QUANTIZE_HANDLERS: dict[type, Callable[[nn.Module], nn.Module]] = dict(QUANTIZE)


def register_quantize_handler(cls: type):
    """Decorator: register ``fn(module) -> nn.Module`` as the int8 converter of ``cls``
    (layer kinds register theirs in the kind registry instead)."""

    def deco(fn):
        QUANTIZE_HANDLERS[cls] = fn
        return fn

    return deco


@register_quantize_handler(TiedOutputProjection)
def _tied_output_projection(proj) -> nn.Module:
    """Logits ``x E^T`` of a tied (possibly low-rank) embedding as quantizable Linear(s)."""
    emb = proj.embedding
    factors = two_factors(emb)
    if factors is not None:
        # factorized table E = U V: [... x d] -> [... x r] -> [... x V]
        v, u = factors
        first = nn.Linear(v.shape[1], v.shape[0], bias=False)
        second = nn.Linear(u.shape[1], u.shape[0], bias=False)
        with torch.no_grad():
            first.weight.copy_(v)
            second.weight.copy_(u)
        return TwoLinear(first, second).to(u.dtype)
    weight = emb.weight
    lin = nn.Linear(weight.shape[1], weight.shape[0], bias=False)
    with torch.no_grad():
        lin.weight.copy_(weight)
    return lin.to(weight.dtype)


def _handler(cls: type):
    """The int8 converter of ``cls``: registered here, or by its kind in the kind registry
    (also a kind registered after this module was imported)."""
    return QUANTIZE_HANDLERS.get(cls) or QUANTIZE.get(cls)


def _sharing_key(module: nn.Module):
    """Modules of a sharing group are distinct objects holding the same Parameters: one key
    for all of them (a module without parameters is its own group)."""
    params = tuple(id(p) for p in module.parameters())
    return (type(module), params) if params else id(module)


def _has_large_linear(module: nn.Module, min_weight_elements: int) -> bool:
    return any(
        type(m) is nn.Linear and m.weight.numel() >= min_weight_elements for m in module.modules()
    )


def prepare_for_int8(model: nn.Module, min_weight_elements: int = 0) -> int:
    """Replace (in place) every module with a registered handler; returns how many were replaced.

    Modules that share their parameters (layer sharing) get one replacement, shared. With
    ``min_weight_elements``, a module whose replacement has no linear map that large is kept
    as it is (it will not be quantized)."""
    replaced: dict = {}
    # Collect first: replacing while iterating named_modules would visit new children.
    targets = []
    for parent in model.modules():
        for name, child in parent.named_children():
            if _handler(type(child)) is not None:
                targets.append((parent, name, child))
    for parent, name, child in targets:
        key = _sharing_key(child)
        if key not in replaced:
            new = _handler(type(child))(child)
            if min_weight_elements > 0 and not _has_large_linear(new, min_weight_elements):
                new = None  # stays float32 as it is
            replaced[key] = new
        if replaced[key] is not None:
            setattr(parent, name, replaced[key])
    return sum(v is not None for v in replaced.values())


def _linear_occurrences(model: nn.Module) -> list[list[tuple[nn.Module, str]]]:
    """``(parent, name)`` of every ``nn.Linear``, grouped by the Parameters it holds."""
    groups: dict = {}
    for parent in model.modules():
        for name, child in parent.named_children():
            if type(child) is nn.Linear:
                key = (id(child.weight), id(child.bias) if child.bias is not None else None)
                groups.setdefault(key, []).append((parent, name))
    return list(groups.values())


def count_quantized_linears(model: nn.Module) -> int:
    """Number of dynamically quantized Linear modules in ``model``."""
    from torch.ao.nn.quantized import dynamic as nnqd

    return sum(isinstance(m, nnqd.Linear) for m in model.modules())


#: ``min_weight_elements`` of :func:`quantize_model_int8` for ``int8-large``: maps with at least
#: this many weights (the output projection, dense 512 x 512 maps) become int8, smaller ones
#: (low-rank factors, CP factors) stay float32. Measured on this project's CPU at batch 1,
#: beam 5 (5 rows): a 512 x 80 factor takes 22 us in float32 and 40 us in int8 (quantizing
#: the activations costs more than the smaller GEMM saves), 512 x 512 107 vs 57 us, the rank-135
#: output factor 10152 x 135 512 vs 181 us.
LARGE_MAP_ELEMENTS = 2**17


def linear_names(model: nn.Module, min_weight_elements: int = 0) -> set[str]:
    """Names (every name of a shared module) of the ``nn.Linear`` modules of ``model`` with at
    least ``min_weight_elements`` weights."""
    return {
        name
        for name, m in model.named_modules(remove_duplicate=False)
        if type(m) is nn.Linear and m.weight.numel() >= min_weight_elements
    }


def quantize_model_int8(
    model: nn.Module, inplace: bool = False, min_weight_elements: int = 0
) -> nn.Module:
    """Dynamic int8 quantization of every linear map (see the module notes).

    Parameters
    ----------
    model : nn.Module
        A float32 model (e.g. a fairseq ``TransformerModel``), on CPU.
    inplace : bool
        Modify ``model`` itself instead of a deep copy.
    min_weight_elements : int
        Quantize only the linear maps (after factorized layers became ``nn.Linear`` chains)
        with at least this many weights; 0: every one. :data:`LARGE_MAP_ELEMENTS` keeps the
        small factors of factorized maps in float32 (``--quantize int8-large``).

    Returns
    -------
    nn.Module
        The quantized model, in eval mode, usable with fairseq's ``SequenceGenerator``.
    """
    engines = torch.backends.quantized.supported_engines
    if torch.backends.quantized.engine == "none" or torch.backends.quantized.engine not in engines:
        for name in ("x86", "fbgemm", "qnnpack"):
            if name in engines:
                torch.backends.quantized.engine = name
                break
    if not inplace:
        model = copy.deepcopy(model)
    model.eval()
    prepare_for_int8(model, min_weight_elements)
    spec = {nn.Linear} if min_weight_elements <= 0 else linear_names(model, min_weight_elements)
    groups = _linear_occurrences(model)
    model = torch.ao.quantization.quantize_dynamic(model, spec, dtype=torch.qint8, inplace=True)
    # quantize_dynamic packs every occurrence of a shared map anew: share the first packing
    for group in groups:
        first = getattr(group[0][0], group[0][1])
        for parent, name in group[1:]:
            setattr(parent, name, first)
    disable_attention_fast_path(model, every=True)
    return model
