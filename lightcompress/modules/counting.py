"""Parameter counts by category (embedding / encoder / decoder / other), every tensor once.

The categories are those of the papers' tables, read from the parameter names of fairseq's
encoder-decoder models (and of RoBERTa-style sentence encoders); see
:mod:`lightcompress.measure.params` for the conventions. Plain PyTorch: only names and tensors.
"""

from __future__ import annotations

from collections.abc import Iterable

from torch import nn

from lightcompress.modules.sharing import unique_parameters

__all__ = ["count_parameters"]

_EMBEDDING_MODULES = ("embed_tokens", "output_projection", "adaptive_softmax")
# RoBERTa-style sentence encoders: the embedding layer of Xia et al. (2022) and the output heads
_SENTENCE_ENCODER = "encoder.sentence_encoder."
_SENTENCE_EMBEDDING_MODULES = ("embed_positions", "layernorm_embedding", "emb_layer_norm")
_SENTENCE_HEADS = ("encoder.lm_head.", "classification_heads.")


def _category(names: Iterable[str]) -> str:
    names = list(names)
    for name in names:
        parts = name.split(".")
        if any(m in parts[:-1] for m in _EMBEDDING_MODULES):
            return "embedding"
    first = names[0]
    if first.startswith(_SENTENCE_ENCODER):  # a RoBERTa-style sentence encoder
        module = first[len(_SENTENCE_ENCODER) :].split(".")[0]
        return "embedding" if module in _SENTENCE_EMBEDDING_MODULES else "encoder"
    if first.startswith(_SENTENCE_HEADS):
        return "other"
    if first.startswith("encoder."):
        return "encoder"
    if first.startswith("decoder."):
        return "decoder"
    return "other"


def count_parameters(model: nn.Module) -> dict:
    """Parameter counts of ``model`` by category, each tensor counted once.

    Parameters
    ----------
    model : nn.Module
        Typically a fairseq encoder-decoder model (``model.encoder``, ``model.decoder``).

    Returns
    -------
    dict
        Integers ``total``, ``embedding``, ``encoder``, ``decoder``, ``other`` with
        ``total = embedding + encoder + decoder + other`` (see the module docstring for the
        categories). Tensors are deduplicated as
        :func:`lightcompress.modules.sharing.count_unique_params` does (by ``Parameter``
        identity and, for real tensors, by storage), so ``total`` equals it, on the meta device
        too.
    """
    groups = unique_parameters(model)
    counts = {"total": 0, "embedding": 0, "encoder": 0, "decoder": 0, "other": 0}
    for p, names in groups:
        counts[_category(names)] += p.numel()
    counts["total"] = counts["embedding"] + counts["encoder"] + counts["decoder"] + counts["other"]
    return counts
