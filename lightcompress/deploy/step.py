"""What the one encoder and decoder step of :mod:`lightcompress.deploy.onnx_graphs` (traced by
the ONNX export, run eagerly by the PyTorch backend,
:class:`~lightcompress.deploy.generator.TorchStep`) assume of a model: the walk of one fairseq
layer around its attentions (:func:`layer_step`) and the checks of what they compute
(:func:`decoder_error`, :func:`lean_step_supported`: fairseq's and the plugin's compressed
decoder layers). The checks of the whole model (:func:`~lightcompress.deploy.onnx_graphs.export_error`:
those, Subformer's and DA-WID's; the encoder's lean layers) are in :mod:`~lightcompress.deploy.onnx_graphs`;
this module imports nothing of the package.
"""

from __future__ import annotations

from torch import Tensor

__all__ = [
    "decoder_error",
    "layer_step",
    "lean_step_supported",
]


def _lean_layer_error(layer, extra_forwards=()) -> str | None:
    from fairseq.modules.transformer_layer import TransformerDecoderLayerBase

    if not isinstance(layer, TransformerDecoderLayerBase):
        return f"{type(layer).__name__} is not fairseq's decoder layer"
    if type(layer).forward not in (*_lean_forwards(), *extra_forwards):
        return f"{type(layer).__name__} has its own forward"
    for name in ("c_attn", "attn_ln", "ffn_layernorm", "w_resid"):
        if getattr(layer, name, None) is not None:
            return f"{name} (--scale-* options)"
    if layer.cross_self_attention:
        return "cross self-attention"
    for attn in (layer.self_attn, layer.encoder_attn):
        attn = getattr(attn, "attention", attn)  # (Subformer's query-projected attention)
        if attn is not None and (attn.bias_k is not None or attn.add_zero_attn):
            return "attention bias_k / zero attention"
    return None


def _lean_forwards():
    from fairseq.modules.transformer_layer import TransformerDecoderLayerBase

    from lightcompress.models.compressed import CompressedDecoderLayer

    return (TransformerDecoderLayerBase.forward, CompressedDecoderLayer.forward)


def _sublayer(layer, x: Tensor, norm, f) -> Tensor:
    """``f`` with the layer's residual and ``norm`` around it (pre- or post-LN)."""
    residual = x
    if layer.normalize_before:
        x = norm(x)
    x = layer.residual_connection(f(x), residual)
    if not layer.normalize_before:
        x = norm(x)
    return x


def layer_step(layer, x: Tensor, self_attention, cross_attention=None) -> Tensor:
    """fairseq's ``TransformerDecoderLayerBase.forward`` (or ``TransformerEncoderLayerBase``'s)
    around the attentions, which the caller computes: ``self_attention(x)`` and, for a layer
    with encoder attention, ``cross_attention(x)`` get the normalized input and return the
    output projection's result. Residuals (Admin's too), pre- or post-LN, the feed-forward
    sublayer. The one layer walk of the decoder step and of the lean encoder."""
    cross = getattr(layer, "encoder_attn", None) is not None
    start_admin = getattr(layer, "_start_admin", None)
    if start_admin is not None:
        start_admin(["self_attn", "encoder_attn", "ffn"] if cross else ["self_attn", "ffn"])
    x = _sublayer(layer, x, layer.self_attn_layer_norm, self_attention)
    if cross:
        x = _sublayer(layer, x, layer.encoder_attn_layer_norm, cross_attention)
    ffn = lambda y: layer.fc2(layer.activation_fn(layer.fc1(y)))
    return _sublayer(layer, x, layer.final_layer_norm, ffn)


def decoder_error(dec) -> str | None:
    """``None`` when ``dec`` is fairseq's Transformer decoder computing its features as
    fairseq does, with a plain output layer (what a step over its layers assumes), else why
    not. Its layers are the caller's to check (the lean step's, the ONNX export's)."""
    from fairseq.models.transformer import TransformerDecoderBase

    if not isinstance(dec, TransformerDecoderBase):
        return f"{type(dec).__name__} is not fairseq's Transformer decoder"
    if (
        type(dec).extract_features_scriptable
        is not TransformerDecoderBase.extract_features_scriptable
    ):
        return f"{type(dec).__name__} computes its own features"
    if dec.adaptive_softmax is not None:
        return "adaptive softmax"
    return None


def lean_step_supported(model, extra_forwards=()) -> str | None:
    """``None`` when the decoder step computes ``model``'s decoder layers as fairseq's and the
    plugin's compressed decoder layers, else why not; ``extra_forwards``: further layer
    ``forward`` functions a caller's step computes (the ONNX export's step also computes
    Subformer's layers)."""
    dec = getattr(model, "decoder", None)
    why = decoder_error(dec)
    if why is not None:
        return why
    for i, layer in enumerate(dec.layers):
        why = _lean_layer_error(layer, extra_forwards)
        if why:
            return f"decoder.layers.{i}: {why}"
    return None
