"""Engines that ``measure_speed`` times next to fairseq's ``SequenceGenerator``.

Each engine is a *runner* over one model with the same interface:

- ``prepare(sentences, gen, batch_size=1)``: per batch what the timed loop feeds the engine
  (done before timing, as reading data is not timed);
- ``run_one(prepared) -> int``: translate one batch (of ``batch_size`` sentences, 1 by
  default), the number of generated target tokens of the best hypotheses, EOS excluded;
- ``translate(sentences, gen, batch_size) -> list[list[int]]``: target ids (no EOS) of every
  sentence, for BLEU.

``sentences`` are source id tensors ending with EOS (fairseq's binarized form); ``gen`` holds
fairseq's generation settings (``beam``, ``lenpen``, ``min_len``, ``max_len_a``,
``max_len_b``). Output lengths follow fairseq's rule: at most
``min(int(max_len_a * src_len + max_len_b), max_decoder_positions - 1)`` tokens before EOS, with
``src_len`` counting the source EOS (:func:`fairseq_max_len`).

:class:`CT2Runner`: a CTranslate2 ``Translator`` of an export of the model
(:mod:`lightcompress.deploy.ct2`); ``max_decoding_length`` is fairseq's maximum (CTranslate2
stops there without an EOS, fairseq forces one: equal tokens, EOS not counted),
``min_decoding_length`` fairseq's ``min_len``, the same beam size and length penalty.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch

__all__ = ["CT2Runner", "OnnxRunner", "fairseq_max_len", "left_padded"]


def fairseq_max_len(src_len: int, gen, max_positions: int) -> int:
    """fairseq's maximum output length (tokens before EOS) for a source of ``src_len`` tokens
    (EOS included), as ``SequenceGenerator`` computes it."""
    return min(int(gen.max_len_a * src_len + gen.max_len_b), max_positions - 1)


def left_padded(chunk: Sequence[torch.Tensor], pad: int) -> tuple[torch.Tensor, torch.Tensor]:
    """``(src_tokens, src_lengths)`` of consecutive sentences, left-padded as fairseq pads."""
    length = max(s.numel() for s in chunk)
    src = torch.full((len(chunk), length), pad, dtype=torch.long)
    for row, s in enumerate(chunk):
        src[row, length - s.numel() :] = s
    return src, torch.tensor([s.numel() for s in chunk])


class CT2Runner:
    """A CTranslate2 model directory on the CPU, translating fairseq id tensors.

    Parameters
    ----------
    model_dir : str
        A CTranslate2 model (``lightcompress-export-ct2``).
    compute_type : str
        ``float32`` or ``int8`` (CTranslate2's int8 GEMMs, activations quantized on the fly).
    threads : int
        CTranslate2's ``intra_threads`` (one translation at a time: ``inter_threads=1``).
    src_dict, tgt_dict : fairseq Dictionary
        The model's dictionaries (CTranslate2's vocabularies were written from them).
    max_positions : int
        The fairseq model's ``max_decoder_positions()``.
    model_max_positions : tuple
        The fairseq model's ``max_positions()`` (which sentences fairseq's batches leave out).
    use_vmap : bool
        Score only a batch's candidates of the export's vocabulary map (``vmap.txt``:
        ``lightcompress-export-ct2 --shortlist``).
    """

    engine = "ctranslate2"

    def __init__(
        self,
        model_dir: str,
        compute_type: str,
        threads: int,
        src_dict,
        tgt_dict,
        max_positions: int,
        model_max_positions=None,
        use_vmap: bool = False,
    ):
        import ctranslate2

        self.model_dir = model_dir
        self.compute_type = compute_type
        self.translator = ctranslate2.Translator(
            model_dir,
            device="cpu",
            compute_type=compute_type,
            intra_threads=threads,
            inter_threads=1,
        )
        self.src_dict, self.tgt_dict = src_dict, tgt_dict
        self.max_positions = max_positions
        self.model_max_positions = model_max_positions
        self.use_vmap = use_vmap

    def _tokens(self, sentence: torch.Tensor) -> list[str]:
        ids = sentence.tolist()
        if ids and ids[-1] == self.src_dict.eos():
            ids = ids[:-1]  # CTranslate2 appends the source EOS itself (add_source_eos)
        return [self.src_dict[i] for i in ids]

    def _options(self, gen, max_len: int) -> dict:
        options = {
            "beam_size": gen.beam,
            "length_penalty": gen.lenpen,
            "max_decoding_length": max_len,
            "min_decoding_length": min(gen.min_len, max_len),
        }
        if self.use_vmap:
            options["use_vmap"] = True
        return options

    def prepare(self, sentences: Sequence[torch.Tensor], gen, batch_size: int = 1) -> list:
        """Batches of ``batch_size`` consecutive sentences: ``(token lists, options)``, the
        maximum length from the batch's longest source (fairseq's padded length)."""
        out = []
        for start in range(0, len(sentences), batch_size):
            chunk = sentences[start : start + batch_size]
            src_len = max(s.numel() for s in chunk)
            out.append(
                (
                    [self._tokens(s) for s in chunk],
                    self._options(gen, fairseq_max_len(src_len, gen, self.max_positions)),
                )
            )
        return out

    def _index(self, token: str) -> int:
        # the exporter wrote fairseq's <pad> as CTranslate2's <blank>
        return self.tgt_dict.pad() if token == "<blank>" else self.tgt_dict.index(token)

    def run_one(self, prepared) -> int:
        tokens, options = prepared
        results = self.translator.translate_batch(tokens, max_batch_size=len(tokens), **options)
        return sum(len(r.hypotheses[0]) for r in results)

    def translate(self, sentences: Sequence[torch.Tensor], gen, batch_size: int) -> list[list[int]]:
        prepared = [p for s in sentences for p in self.prepare([s], gen)]
        out: list[list[int] | None] = [None] * len(prepared)
        # one call per maximum length (fairseq's limit depends on each source's length)
        groups: dict[int, list[int]] = {}
        for i, (_tokens, options) in enumerate(prepared):
            groups.setdefault(options["max_decoding_length"], []).append(i)
        for idx in groups.values():
            options = prepared[idx[0]][1]
            results = self.translator.translate_batch(
                [prepared[i][0][0] for i in idx], max_batch_size=batch_size, **options
            )
            for i, r in zip(idx, results):
                out[i] = [self._index(t) for t in r.hypotheses[0]]
        return out


class OnnxRunner:
    """A ``lightcompress-export-onnx`` export on ONNX Runtime's CPU provider
    (:class:`lightcompress_runtime.OnnxGenerator`: fairseq's beam search in numpy),
    the same settings as fairseq.

    Parameters
    ----------
    model_dir : str
        The export.
    threads : int
        ONNX Runtime's intra-op threads.
    pad : int
        The source padding id (left-padded batches, as fairseq pads them).
    model_max_positions : tuple
        The fairseq model's ``max_positions()``.
    shortlist : bool
        Score only the export's shortlist candidates.
    """

    engine = "onnxruntime"

    def __init__(
        self,
        model_dir: str,
        threads: int,
        pad: int,
        model_max_positions=None,
        shortlist: bool = False,
    ):
        from lightcompress_runtime import OnnxGenerator

        self.model_dir = model_dir
        self.pad = pad
        self.threads = threads
        self.shortlist = shortlist
        self.generator = OnnxGenerator(model_dir, threads=threads, shortlist=shortlist)
        self.model_max_positions = model_max_positions

    def _set(self, gen) -> None:
        g = self.generator
        g.beam_size = min(gen.beam, g.vocab_size - 1)
        g.len_penalty, g.min_len = gen.lenpen, gen.min_len
        g.max_len_a, g.max_len_b = gen.max_len_a, gen.max_len_b

    def prepare(self, sentences: Sequence[torch.Tensor], gen, batch_size: int = 1) -> list:
        """Left-padded numpy batches of ``batch_size`` consecutive sentences."""
        out = []
        for start in range(0, len(sentences), batch_size):
            src, lengths = left_padded(sentences[start : start + batch_size], self.pad)
            out.append((gen, src.numpy(), lengths.numpy()))
        return out

    def run_one(self, prepared) -> int:
        gen, src, lengths = prepared
        self._set(gen)
        eos = self.generator.eos
        tokens = 0
        for hyps in self.generator.generate(src, lengths):
            hyp = hyps[0]["tokens"]
            n = len(hyp)
            tokens += n - 1 if n and int(hyp[-1]) == eos else n
        return tokens

    def translate(self, sentences: Sequence[torch.Tensor], gen, batch_size: int) -> list[list[int]]:
        from lightcompress.deploy.torch_translator import left_pad_batches

        self._set(gen)
        eos = self.generator.eos
        out: list[list[int] | None] = [None] * len(sentences)
        for idx, src, lengths in left_pad_batches(sentences, batch_size, self.pad):
            for i, hyps in zip(idx, self.generator.generate(src.numpy(), lengths.numpy())):
                out[i] = [int(t) for t in hyps[0]["tokens"] if t != eos]
        return out
