"""What a teacher checkpoint and its data-bin say: the student's shape, LayerNorm placement,
shared embeddings, languages, vocabulary. Everything here only reads; a teacher or a data-bin
the command cannot take raises :class:`CompressError` before any work is done.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass, field

__all__ = [
    "BOOL_SETTINGS",
    "SHAPE_KEYS",
    "VALUE_SETTINGS",
    "CompressError",
    "DataBin",
    "Teacher",
    "read_data_bin",
    "read_teacher",
]


class CompressError(Exception):
    """A teacher, data-bin, target or save directory the command cannot take (one line)."""


# the student's shape: taken from the teacher, passed as explicit flags to every command
SHAPE_KEYS = (
    "encoder_layers",
    "decoder_layers",
    "encoder_embed_dim",
    "decoder_embed_dim",
    "encoder_ffn_embed_dim",
    "decoder_ffn_embed_dim",
    "encoder_attention_heads",
    "decoder_attention_heads",
)
# on/off settings that change what the teacher's weights compute (a flag when on)
BOOL_SETTINGS = (
    "share_all_embeddings",
    "share_decoder_input_output_embed",
    "encoder_normalize_before",
    "decoder_normalize_before",
    "no_scale_embedding",
    "layernorm_embedding",
    "no_token_positional_embeddings",
    "encoder_learned_pos",
    "decoder_learned_pos",
    "cross_self_attention",
    "no_cross_attention",
)
# valued settings that change what the weights compute
VALUE_SETTINGS = ("activation_fn", "max_source_positions", "max_target_positions")


@dataclass
class Teacher:
    """A dense fairseq Transformer checkpoint, as read from its file."""

    path: str
    arch: str
    args: object
    src_vocab: int
    tgt_vocab: int
    params: int
    source_lang: str | None
    target_lang: str | None
    settings: dict = field(default_factory=dict)

    @property
    def post_ln(self) -> bool:
        return not (
            self.settings.get("encoder_normalize_before")
            or self.settings.get("decoder_normalize_before")
        )

    @property
    def shared(self) -> bool:
        return bool(self.settings.get("share_all_embeddings"))

    @property
    def dropout(self) -> float:
        value = getattr(self.args, "dropout", None)
        return float(value) if isinstance(value, (int, float)) else 0.1

    def shape_flags(self) -> list[str]:
        """The teacher's shape and function settings as fairseq model flags (the flags a user
        would otherwise copy by hand)."""
        flags = []
        for key in SHAPE_KEYS + VALUE_SETTINGS:
            if self.settings.get(key) is not None:
                flags += ["--" + key.replace("_", "-"), str(self.settings[key])]
        for key in BOOL_SETTINGS:
            if self.settings.get(key):
                flags.append("--" + key.replace("_", "-"))
        return flags

    def sharing(self) -> str:
        if self.shared:
            return "all embeddings shared (one joined dictionary)"
        if self.settings.get("share_decoder_input_output_embed"):
            return "decoder input and output tables tied, source table separate"
        return "no shared tables (source, target and output tables separate)"

    def describe(self) -> str:
        s = self.settings
        ln = "post-LN" if self.post_ln else "pre-LN"
        return (
            f"{self.arch} {s['encoder_layers']}-{s['decoder_layers']}: encoder d "
            f"{s['encoder_embed_dim']}, FFN {s['encoder_ffn_embed_dim']}, "
            f"{s['encoder_attention_heads']} heads; decoder d {s['decoder_embed_dim']}, FFN "
            f"{s['decoder_ffn_embed_dim']}, {s['decoder_attention_heads']} heads; {ln}; "
            f"{self.sharing()}"
        )


def _get(obj, key, default=None):
    """``obj.key`` of a Namespace, dict or omegaconf node (``default`` when absent)."""
    if obj is None:
        return default
    if isinstance(obj, dict):
        return obj.get(key, default)
    try:
        return getattr(obj, key, default)
    except Exception:  # noqa: BLE001  (an omegaconf node in struct mode without the key)
        return default


def read_teacher(path: str) -> Teacher:
    """Read ``path`` (weights only, through the plugin's allow-list) and check that it is a
    complete, dense fairseq Transformer."""
    import torch
    from fairseq.models import ARCH_MODEL_NAME_REGISTRY

    import lightcompress.plugin  # noqa: F401  (architectures; fairseq's checkpoint types allow-listed)

    if not os.path.isfile(path):
        raise CompressError(f"no such teacher checkpoint: {path}")
    from lightcompress.checkpoint import CheckpointError, verify_sums

    try:
        verify_sums(path)
    except CheckpointError as exc:
        raise CompressError(str(exc)) from None
    try:
        state = torch.load(path, map_location="cpu", weights_only=True)
    except Exception as exc:  # noqa: BLE001  (truncated zip, not a torch file, foreign pickle)
        why = " ".join(str(exc).split())[:160]
        raise CompressError(
            f"cannot read {path} as a fairseq checkpoint ({type(exc).__name__}: {why}); is the "
            "file complete? (copy it again, or pass the checkpoint_best.pt / checkpoint_last.pt "
            "fairseq-train wrote)"
        ) from None
    if not isinstance(state, dict) or not isinstance(state.get("model"), dict):
        raise CompressError(f"{path} is not a fairseq checkpoint (no 'model' weights)")
    cfg = state.get("cfg")
    args = _get(cfg, "model") if cfg is not None else None
    args = args if args is not None else state.get("args")
    if args is None:
        raise CompressError(f"{path} is not a fairseq checkpoint (no cfg.model, no args)")
    arch = _get(args, "arch") or _get(args, "_name")
    family = ARCH_MODEL_NAME_REGISTRY.get(arch)
    if family != "transformer":
        what = f"a {family!r} model" if family else f"architecture {arch!r}"
        raise CompressError(
            f"{path} is {what}, not a dense fairseq Transformer (arch transformer*): "
            "lightcompress-compress compresses a trained teacher; a compressed or foreign model "
            "cannot be its input"
        )
    sd = state["model"]
    if "encoder.embed_tokens.weight" not in sd or "decoder.embed_tokens.weight" not in sd:
        raise CompressError(f"{path}: no encoder/decoder embedding in the model weights")
    seen, params = set(), 0
    for name, tensor in sd.items():
        if (
            not hasattr(tensor, "untyped_storage")
            or not tensor.is_floating_point()
            or name.endswith(".version")
        ):
            continue  # (fairseq's version buffers are not parameters)
        key = (tensor.untyped_storage().data_ptr(), tensor.storage_offset(), tuple(tensor.shape))
        if key not in seen:
            seen.add(key)
            params += tensor.numel()
    settings = {k: _get(args, k) for k in SHAPE_KEYS + BOOL_SETTINGS + VALUE_SETTINGS}
    missing = [k for k in SHAPE_KEYS if not isinstance(settings[k], int)]
    if missing:
        raise CompressError(f"{path}: the model configuration does not give {', '.join(missing)}")
    task = _get(cfg, "task") if cfg is not None else None
    src = _get(task, "source_lang") if task is not None else _get(args, "source_lang")
    tgt = _get(task, "target_lang") if task is not None else _get(args, "target_lang")
    return Teacher(
        path=path,
        arch=arch,
        args=args,
        src_vocab=int(sd["encoder.embed_tokens.weight"].shape[0]),
        tgt_vocab=int(sd["decoder.embed_tokens.weight"].shape[0]),
        params=params,
        source_lang=src,
        target_lang=tgt,
        settings=settings,
    )


@dataclass
class DataBin:
    """A fairseq data-bin directory of one language pair."""

    path: str
    src: str
    tgt: str
    src_dict_size: int
    tgt_dict_size: int

    def split_prefix(self, split: str) -> str:
        return os.path.join(self.path, f"{split}.{self.src}-{self.tgt}.{self.src}")

    def has_split(self, split: str) -> bool:
        return os.path.isfile(self.split_prefix(split) + ".idx")

    def mean_source_length(self, split: str = "test") -> float:
        """Mean source length (tokens, EOS excluded) of ``split``, from its index."""
        import logging

        from fairseq.data import data_utils

        logging.getLogger("fairseq.data.data_utils").setLevel(logging.WARNING)
        ds = data_utils.load_indexed_dataset(self.split_prefix(split), None)
        if ds is None or len(ds) == 0:
            raise CompressError(f"{self.path}: the {split} split is empty")
        return float(ds.sizes.mean()) - 1


def _dict_size(path: str) -> int:
    """Entries of a fairseq dict.*.txt plus its 4 specials (as fairseq loads it, padded)."""
    with open(path, encoding="utf-8") as f:
        n = sum(1 for line in f if line.strip())
    return n + 4


def read_data_bin(path: str, teacher: Teacher, src: str | None, tgt: str | None) -> DataBin:
    """Check the data-bin against the teacher: languages (given, the teacher's, or the only
    pair of the binarized files), dictionaries, and the train / valid / test splits."""
    if not os.path.isdir(path):
        raise CompressError(f"--data {path} is not a directory")
    files = os.listdir(path)
    if bool(src) != bool(tgt):
        raise CompressError("give both -s and -t, or neither")
    src = src or teacher.source_lang
    tgt = tgt or teacher.target_lang
    if not (src and tgt):
        pairs = {
            m.group(1, 2)
            for f in files
            if (m := re.fullmatch(r"train\.([^.-]+)-([^.-]+)\.\1\.idx", f))
        }
        if len(pairs) != 1:
            raise CompressError(
                f"cannot tell the language pair of {path} (binarized train pairs: "
                f"{sorted(pairs) or 'none'}): give -s SRC -t TGT"
            )
        src, tgt = pairs.pop()
    for lang in (src, tgt):
        if f"dict.{lang}.txt" not in files:
            raise CompressError(f"--data {path} has no dict.{lang}.txt")
    data = DataBin(
        path,
        src,
        tgt,
        _dict_size(os.path.join(path, f"dict.{src}.txt")),
        _dict_size(os.path.join(path, f"dict.{tgt}.txt")),
    )
    for split in ("train", "valid", "test"):
        if not data.has_split(split):
            raise CompressError(
                f"--data {path} has no binarized {split} split ({split}.{src}-{tgt}.{src}.idx): "
                "fine-tuning needs train and valid, the report test"
            )
    # fairseq pads dictionaries to a multiple of 8: the teacher's table may be a little larger
    for side, size, table in (
        ("source", data.src_dict_size, teacher.src_vocab),
        ("target", data.tgt_dict_size, teacher.tgt_vocab),
    ):
        if not size <= table < size + 8:
            raise CompressError(
                f"the teacher's {side} embedding has {table} rows but {path}'s dictionary has "
                f"{size} entries: not the data-bin this teacher was trained on"
            )
    return data
