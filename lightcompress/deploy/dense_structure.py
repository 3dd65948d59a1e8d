"""What a dense fairseq Transformer has, for :mod:`lightcompress.deploy.densify` and the dense
check of :mod:`lightcompress.deploy.ct2`: why a model is not fairseq's Transformer
encoder-decoder apart from how its maps are stored (:func:`structure_error`), its weight slots
in order (:func:`model_slots`), and whether a slot holds what CTranslate2 reads as it is
(:func:`is_dense_slot`)."""

from __future__ import annotations

from torch import nn

__all__ = ["is_dense_slot", "model_slots", "structure_error"]


def structure_error(model: nn.Module, arch: str) -> str | None:
    """Why ``model`` is not fairseq's Transformer encoder-decoder apart from how its maps are
    stored (``None`` when it is): Subformer and other models, layers that are not fairseq's
    (DA-WID), decoder input / output projections, Admin residual scaling."""
    from fairseq.models.transformer import TransformerModel
    from fairseq.modules.transformer_layer import (
        TransformerDecoderLayerBase,
        TransformerEncoderLayerBase,
    )

    if not isinstance(model, TransformerModel) or type(model).__name__.startswith("Subformer"):
        return (
            f"architecture {arch!r} ({type(model).__name__}) is not a fairseq Transformer "
            "encoder-decoder that CTranslate2 can express (Subformer's SAFE and sandwich "
            "layers, language models and other models are not)"
        )
    for side, kind in (
        ("encoder", TransformerEncoderLayerBase),
        ("decoder", TransformerDecoderLayerBase),
    ):
        for i, layer in enumerate(getattr(model, side).layers):
            if not isinstance(layer, kind):
                return (
                    f"architecture {arch!r}: {side}.layers.{i} is a {type(layer).__name__}, not "
                    "fairseq's Transformer layer (DA-WID's layers have per-layer widths, and its "
                    "training model compactors and masks): CTranslate2 cannot express it"
                )
    for name in ("project_in_dim", "project_out_dim"):
        if getattr(model.decoder, name, None) is not None:
            return (
                f"architecture {arch!r} has a decoder {name.replace('_', ' ')} projection "
                "(--decoder-input-dim / --decoder-output-dim other than the model width): "
                "CTranslate2's Transformer has none"
            )
    for side in ("encoder", "decoder"):
        for i, layer in enumerate(getattr(model, side).layers):
            if layer._modules.get("admin") is not None:
                return (
                    f"architecture {arch!r} scales residuals (Admin, --admin-init) in "
                    f"{side}.layers.{i}: CTranslate2 has no residual scaling, and the dense "
                    "Transformer none to multiply it into (train the student with --admin-init "
                    "none to export it)"
                )
    return None


def model_slots(model: nn.Module):
    """``(path, module, target)`` of every weight slot of a fairseq Transformer, in order:
    ``embedding`` (each table once), ``qkv`` (a fused Q/K/V map), ``linear`` (the attention
    projections, FFN maps) and ``output`` (the decoder's output projection)."""
    seen = set()
    for side in ("encoder", "decoder"):
        emb = getattr(model, side).embed_tokens
        if id(emb) not in seen:
            seen.add(id(emb))
            yield f"{side}.embed_tokens", emb, "embedding"
    for side in ("encoder", "decoder"):
        for i, layer in enumerate(getattr(model, side).layers):
            prefix = f"{side}.layers.{i}"
            attns = [("self_attn", layer.self_attn)]
            if getattr(layer, "encoder_attn", None) is not None:
                attns.append(("encoder_attn", layer.encoder_attn))
            for name, attn in attns:
                fused = attn._modules.get("qkv_proj")
                if fused is not None:
                    yield f"{prefix}.{name}.qkv_proj", fused, "qkv"
                else:
                    for proj in ("q_proj", "k_proj", "v_proj"):
                        yield f"{prefix}.{name}.{proj}", getattr(attn, proj, None), "linear"
                yield f"{prefix}.{name}.out_proj", getattr(attn, "out_proj", None), "linear"
            yield f"{prefix}.fc1", layer.fc1, "linear"
            yield f"{prefix}.fc2", layer.fc2, "linear"
    yield "decoder.output_projection", model.decoder.output_projection, "output"


def is_dense_slot(module, target: str) -> bool:
    """Whether the slot holds what CTranslate2 reads as it is (``nn.Linear`` / ``nn.Embedding``)."""
    if target == "embedding":
        return type(module) is nn.Embedding
    return target != "qkv" and type(module) is nn.Linear
