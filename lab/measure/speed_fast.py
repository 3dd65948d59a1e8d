"""lightcompress's PyTorch fast path timed next to fairseq (the lab's ``measure_speed --fast``):
:class:`FastRunner` (a runner as :mod:`lightcompress.measure.engines` describes them) and
:func:`with_fast`."""

from __future__ import annotations

from argparse import Namespace
from collections.abc import Sequence

import torch

from lightcompress.measure.candidates import Candidate, SpeedError
from lightcompress.measure.engines import left_padded

__all__ = ["FastRunner", "with_fast"]


class FastRunner:
    """lightcompress's fast path (:class:`lightcompress.deploy.generator.FastGenerator`) over
    the fairseq model itself (float32 or int8-quantized), the same settings as fairseq."""

    engine = "lightcompress"

    def __init__(self, model, task, gen, shortlist=None):
        from lightcompress.deploy.generator import FastGenerator

        self.model, self.task, self.shortlist = model, task, shortlist
        self.model_max_positions = model.max_positions()
        self.generator = FastGenerator(
            model,
            task.target_dictionary,
            beam_size=gen.beam,
            len_penalty=gen.lenpen,
            min_len=gen.min_len,
            max_len_a=gen.max_len_a,
            max_len_b=gen.max_len_b,
            shortlist=shortlist,
        )
        self.gen = gen

    def _for(self, gen):
        same = all(getattr(gen, k) == getattr(self.gen, k) for k in vars(self.gen))
        return self if same else FastRunner(self.model, self.task, gen, self.shortlist)

    def prepare(self, sentences: Sequence[torch.Tensor], gen, batch_size: int = 1) -> list:
        """Left-padded batches of ``batch_size`` consecutive sentences."""
        runner = self._for(gen)
        pad = self.task.source_dictionary.pad()
        return [
            (runner, *left_padded(sentences[start : start + batch_size], pad))
            for start in range(0, len(sentences), batch_size)
        ]

    def run_one(self, prepared) -> int:
        runner, src, lengths = prepared
        eos = runner.generator.eos
        tokens = 0
        for hyps in runner.generator.generate(src, lengths):
            hyp = hyps[0]["tokens"]
            n = int(hyp.numel())
            tokens += n - 1 if n and int(hyp[-1]) == eos else n
        return tokens

    def translate(self, sentences: Sequence[torch.Tensor], gen, batch_size: int) -> list[list[int]]:
        from lightcompress.deploy.torch_translator import left_pad_batches

        runner = self._for(gen)
        out: list[list[int] | None] = [None] * len(sentences)
        pad = self.task.source_dictionary.pad()
        for idx, src, lengths in left_pad_batches(sentences, batch_size, pad):
            for i, hyps in zip(idx, runner.generator.generate(src, lengths)):
                out[i] = [t for t in hyps[0]["tokens"].tolist() if t != runner.generator.eos]
        return out


def with_fast(
    candidates: Sequence[Candidate], gen_args: Namespace, shortlist: str | None = None
) -> list[Candidate]:
    """After each fairseq candidate (float32 or int8), the same model on lightcompress's fast
    path (:class:`lightcompress.deploy.generator.FastGenerator`), and with ``shortlist`` the
    same again scoring only the shortlist's candidates."""
    from lightcompress.deploy.shortlist import ShortlistError, load_shortlist

    out = []
    for c in candidates:
        out.append(c)
        if c.engine != "fairseq":
            continue
        for path in (None, shortlist) if shortlist else (None,):
            try:
                sl = path and load_shortlist(
                    path, c.task.source_dictionary, c.task.target_dictionary
                )
            except ShortlistError as exc:
                raise SpeedError(f"{c.label}: --shortlist {exc}") from None
            out.append(
                Candidate(
                    c.label,
                    c.source,
                    c.model,
                    c.task,
                    c.params,
                    c.precision,
                    c.random_weights,
                    c.args,
                    engine="lightcompress",
                    runner=FastRunner(c.model, c.task, gen_args, shortlist=sl or None),
                    model_args=c.model_args,
                    float_model=c.float_model,
                    shortlist=path,
                )
            )
    return out
