"""fairseq integration of the factorization library (the only place that knows both).

- :func:`compress_fairseq_model` applies a :class:`~lightcompress.modules.CompressionSpec` to a
  fairseq encoder-decoder model, then repairs what fairseq assumes about dense layers:

  * **aliases**: fairseq shares one embedding module between encoder and decoder
    (``--share-all-embeddings``); the spec replaces a module where ``named_modules()`` first
    lists it, and we put the replacement in every other place that held the same object;
  * **tied output projection**: fairseq ties ``decoder.output_projection.weight`` to the
    embedding's ``weight`` Parameter at build time; after the embedding is factorized the
    projection becomes :class:`TiedOutputProjection`, which computes the logits from the
    factors (``(x V^T) U^T`` for a low-rank table, cheaper than rebuilding ``V x d``);
  * **attention fast path**: ``MultiheadAttention.forward`` calls
    ``F.multi_head_attention_forward`` with ``q_proj.weight``... whenever it is not decoding
    incrementally, which would silently bypass factorized projections in training and
    validation. Every attention module with a non-``nn.Linear`` projection gets
    ``_set_skip_embed_dim_check()``, which turns the fast path off.

- :func:`tie_encoder_decoder_layers` applies a sharing schedule to ``encoder.layers`` /
  ``decoder.layers`` (:mod:`lightcompress.modules.sharing`).
"""

from __future__ import annotations

import torch.nn.functional as F
from fairseq.modules import MultiheadAttention
from torch import nn

from lightcompress.modules import CompressionSpec, LowRankEmbedding, tie_layers

__all__ = [
    "TiedOutputProjection",
    "compress_fairseq_model",
    "disable_attention_fast_path",
    "retie_output_projection",
    "tie_stack_layers",
]


class TiedOutputProjection(nn.Module):
    """Output projection tied to a (possibly factorized) embedding: ``logits = x E^T``.

    The embedding is referenced, not registered, so its parameters appear once in
    ``state_dict()`` (under the embedding's own name).

    Parameters
    ----------
    embedding : nn.Module
        Anything with fairseq's embedding interface (``.weight`` of shape ``(V, d)``).
    """

    def __init__(self, embedding: nn.Module):
        super().__init__()
        self._embedding = [embedding]  # a list keeps it out of the module tree

    @property
    def embedding(self) -> nn.Module:
        return self._embedding[0]

    @property
    def weight(self):
        """``(V, d)``, for code that reads ``output_projection.weight``."""
        return self.embedding.weight

    def forward(self, x):
        """``(..., d)`` -> ``(..., V)``."""
        emb = self.embedding
        # One 2-D GEMM: with a 3-D (e.g. transposed, non-contiguous) input and a weight that is
        # not a leaf parameter (the HTT table), F.linear fell back to a batched matmul over an
        # expanded weight, which made Hypoformer's decoding step 2x slower at beam 5.
        lead = x.shape[:-1]
        x = x.reshape(-1, x.shape[-1])  # [... x d] -> [N x d]
        if isinstance(emb, LowRankEmbedding):
            # [N x d] -> [N x r] -> [N x V]; the padding row of u is the pad logit
            out = F.linear(F.linear(x, emb.v), emb.u)
        else:
            out = F.linear(x, emb.weight)
        return out.reshape(*lead, out.shape[-1])

    def extra_repr(self) -> str:
        return f"tied to {type(self.embedding).__name__}"


def _alias_slots(model: nn.Module) -> dict[int, list[tuple[nn.Module, str]]]:
    """``id(module) -> [(parent, attribute)]`` for every module held in more than one place."""
    slots: dict[int, list[tuple[nn.Module, str]]] = {}
    seen = set()
    for _, parent in model.named_modules(remove_duplicate=False):
        for child_name, child in parent.named_children():
            if (id(parent), child_name) in seen:
                continue
            seen.add((id(parent), child_name))
            slots.setdefault(id(child), []).append((parent, child_name))
    return {k: v for k, v in slots.items() if len(v) > 1}


def retie_output_projection(model: nn.Module) -> None:
    """Re-tie ``decoder.output_projection`` to a factorized ``decoder.embed_tokens``."""
    decoder = getattr(model, "decoder", None)
    if decoder is None or not getattr(decoder, "share_input_output_embed", False):
        return
    emb = decoder.embed_tokens
    if isinstance(emb, nn.Embedding):
        return  # fairseq's own tie (shared Parameter) is intact
    decoder.output_projection = TiedOutputProjection(emb)


def disable_attention_fast_path(model: nn.Module) -> int:
    """Turn off fairseq's ``F.multi_head_attention_forward`` path where projections are
    factorized; returns the number of attention modules changed."""
    changed = 0
    for module in model.modules():
        if not isinstance(module, MultiheadAttention):
            continue
        projs = [getattr(module, n, None) for n in ("q_proj", "k_proj", "v_proj", "out_proj")]
        if any(p is not None and type(p) is not nn.Linear for p in projs):
            module._set_skip_embed_dim_check()
            changed += 1
    return changed


def compress_fairseq_model(model: nn.Module, spec: CompressionSpec, mode: str = "init"):
    """Apply ``spec`` to a fairseq model (see the module docstring); returns the report."""
    aliases = _alias_slots(model)
    report = spec.apply(model, mode=mode)
    for key, places in aliases.items():
        replaced = [getattr(p, n) for p, n in places if id(getattr(p, n)) != key]
        if replaced:  # the spec replaced it in one place: replace it everywhere
            for parent, name in places:
                setattr(parent, name, replaced[0])
    retie_output_projection(model)
    disable_attention_fast_path(model)
    return report


def tie_stack_layers(layers: nn.ModuleList, schedule, share=lambda name: True) -> list[str]:
    """Share parameters between the layers of one stack following ``schedule``."""
    return tie_layers(layers, schedule, share=share)
