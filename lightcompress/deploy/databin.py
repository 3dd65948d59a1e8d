"""An ONNX Runtime export's translations of a fairseq data-bin split: the split read as
fairseq's translation task reads it, the export checked against the data's dictionaries, the
sentences searched in batches of similar length (longest first) by the export's beam search
(:class:`lightcompress_runtime.OnnxGenerator`, fairseq's own search).

Two commands use it: the int8 step of ``lightcompress-compress`` (the test split, scored by
the report as fairseq-generate's output is) and the KD data's ONNX engine
(``lightcompress.kd.onnx_generate``: the training split)::

    split = DataBinTranslation("student-onnx-int8", "data-bin", "test", "de", "en", beam=5)
    for batch in split.batches(64):          # each batch as it is done
        for i, score, tokens in batch:       # sentence id, score (natural log), token ids
            ...
"""

from __future__ import annotations

import os

from lightcompress.errors import LightcompressError

__all__ = ["DataBinError", "DataBinTranslation", "load_split"]


class DataBinError(LightcompressError):
    """A data-bin or export that cannot be used together (one line)."""


def load_split(data: str, subset: str, src: str, tgt: str, lang: str, dictionary):
    """The ``subset`` side ``lang`` of a fairseq data-bin (``subset.src-tgt.lang``, or the
    reversed pair's file as fairseq's translation task reads it)."""
    from fairseq.data import data_utils

    for pair in (f"{src}-{tgt}", f"{tgt}-{src}"):
        prefix = os.path.join(data, f"{subset}.{pair}.{lang}")
        dataset = data_utils.load_indexed_dataset(prefix, dictionary)
        if dataset is not None:
            return dataset
    raise DataBinError(
        f"{data} has no {subset} split for {src}-{tgt} ({subset}.{src}-{tgt}.{lang})"
    )


class DataBinTranslation:
    """The ``subset`` split of the data-bin ``data`` (``src`` -> ``tgt``) and the export that
    translates it. ``search`` goes to :class:`~lightcompress_runtime.OnnxGenerator`
    (``beam_size``, ``len_penalty``, ``min_len``, ``max_len_a``, ``max_len_b``,
    ``unk_penalty``, ``threads``). Raises :class:`DataBinError` for a missing dictionary or
    split, an export the runtime refuses, or an export made with other dictionaries."""

    def __init__(self, export: str, data: str, subset: str, src: str, tgt: str, **search):
        import numpy as np
        from fairseq.data import Dictionary

        from lightcompress_runtime import OnnxError, OnnxGenerator

        self.data, self.subset, self.src, self.tgt = data, subset, src, tgt
        dicts = []
        for lang in (src, tgt):
            path = os.path.join(data, f"dict.{lang}.txt")
            if not os.path.isfile(path):
                raise DataBinError(f"{path} not found")
            dicts.append(Dictionary.load(path))
        self.src_dict, self.tgt_dict = dicts
        sources = load_split(data, subset, src, tgt, src, self.src_dict)
        self.sentences = [np.asarray(sources[i], dtype=np.int64) for i in range(len(sources))]
        try:
            self.generator = OnnxGenerator(export, **search)
        except OnnxError as exc:
            raise DataBinError(str(exc)) from None
        config = self.generator.config
        if config["vocab_size"] != len(self.tgt_dict) or config["src_vocab_size"] != len(
            self.src_dict
        ):
            raise DataBinError(f"{export} was not exported with the dictionaries of {data}")

    def __len__(self) -> int:
        return len(self.sentences)

    def targets(self):
        """The split's reference side (token ids, as fairseq's dataset gives them)."""
        return load_split(self.data, self.subset, self.src, self.tgt, self.tgt, self.tgt_dict)

    def batches(self, batch_size: int):
        """Each batch's best hypotheses as the batch is done: a list of ``(sentence id,
        score, token ids)``, the score fairseq's (natural log, length-normalised), the ids
        ending with EOS as fairseq-generate's hypotheses do."""
        from lightcompress_runtime import OnnxError
        from lightcompress_runtime.translator import left_pad_batches

        pad = self.src_dict.pad()
        try:
            for idx, batch, lengths in left_pad_batches(self.sentences, batch_size, pad):
                found = []
                for i, hyps in zip(idx, self.generator.generate(batch, lengths)):
                    best = hyps[0]
                    found.append((i, float(best["score"]), [int(t) for t in best["tokens"]]))
                yield found
        except OnnxError as exc:
            raise DataBinError(str(exc)) from None
