"""The protocol of a speed measurement (:mod:`lightcompress.measure.speed`): which sentences,
the timed runs (interleaved, trimmed), and the BLEU of each model on a whole subset.
"""

from __future__ import annotations

import time
from argparse import Namespace
from collections.abc import Sequence

import torch

from lightcompress.measure.candidates import Candidate, SpeedError, state_dict_bytes
from lightcompress.measure.timing import (
    interleaved_schedule,
    summarize_runs,
)

__all__ = [
    "as_samples",
    "measure",
    "pick_sentences",
    "random_sentences",
    "sacrebleu_of",
    "time_run",
]


# --------------------------------------------------------------------------------------------
# sentences
# --------------------------------------------------------------------------------------------


def pick_sentences(
    task, subset: str, n: int, src_len: int, natural: bool = False
) -> list[torch.Tensor]:
    """The ``n`` source sentences of ``subset`` with length (no EOS) closest to ``src_len``;
    ``natural``: every k-th sentence of the split instead (k = its size // ``n``, in file
    order), at the lengths they have."""
    try:
        task.load_dataset(subset)
    except FileNotFoundError as exc:
        raise SpeedError(f"cannot load subset {subset!r}: {exc}") from None
    ds = task.dataset(subset)
    src = getattr(ds, "src", None)
    if src is None or len(ds) == 0:
        raise SpeedError(f"subset {subset!r} has no source sentences")
    if natural:
        every = max(1, len(ds) // n)
        return [src[i].long() for i in range(0, len(ds), every)[:n]]
    sizes = [int(s) - 1 for s in ds.src_sizes]  # binarized sentences end with EOS
    order = sorted(range(len(sizes)), key=lambda i: (abs(sizes[i] - src_len), i))
    return [src[i].long() for i in order[:n]]


def random_sentences(dictionary, n: int, src_len: int, seed: int = 1) -> list[torch.Tensor]:
    """``n`` sentences of ``src_len`` random word ids (no specials) followed by EOS."""
    gen = torch.Generator().manual_seed(seed)
    out = []
    for _ in range(n):
        ids = torch.randint(dictionary.nspecial, len(dictionary), (src_len,), generator=gen)
        out.append(torch.cat([ids, torch.tensor([dictionary.eos()])]))
    return out


def as_samples(sentences: Sequence[torch.Tensor], batch_size: int = 1, pad: int = 1) -> list[dict]:
    """fairseq samples of ``batch_size`` consecutive sentences, left-padded as fairseq pads."""
    from lightcompress.measure.engines import left_padded

    out = []
    for start in range(0, len(sentences), batch_size):
        src, lengths = left_padded(sentences[start : start + batch_size], pad)
        out.append(
            {
                "id": torch.arange(start, start + len(src)),
                "net_input": {"src_tokens": src, "src_lengths": lengths},
            }
        )
    return out


# --------------------------------------------------------------------------------------------
# timing
# --------------------------------------------------------------------------------------------


def _generator(candidate: Candidate, gen_args: Namespace):
    return candidate.task.build_generator([candidate.model], gen_args)


def _hyp_tokens(tokens: torch.Tensor, eos: int) -> int:
    n = int(tokens.numel())
    return n - 1 if n and int(tokens[-1]) == eos else n


def time_run(candidate: Candidate, generator, samples: Sequence) -> tuple[float, int]:
    """One timed pass over ``samples`` (batch 1): (seconds, generated tokens without EOS).

    ``generator`` is fairseq's generator, or ``None`` for a candidate with a runner (another
    engine), whose ``samples`` are what its ``prepare`` returned."""
    if candidate.runner is not None:
        run_one = candidate.runner.run_one
        tokens = 0
        start = time.perf_counter()
        for prepared in samples:
            tokens += run_one(prepared)
        return time.perf_counter() - start, tokens
    eos = candidate.task.target_dictionary.eos()
    task, models = candidate.task, [candidate.model]
    tokens = 0
    start = time.perf_counter()
    for sample in samples:
        hyps = task.inference_step(generator, models, sample)
        tokens += sum(_hyp_tokens(h[0]["tokens"], eos) for h in hyps)
    return time.perf_counter() - start, tokens


def measure(
    candidates: Sequence[Candidate],
    samples: Sequence[dict],
    gen_args: Namespace,
    runs: int = 10,
    warmup: int = 1,
    trim: float = 0.1,
    log=None,
    sentences: Sequence[torch.Tensor] | None = None,
    batch_size: int = 1,
) -> list[dict]:
    """Warm up each model, then time ``runs`` interleaved passes; returns one record per model.

    ``samples`` are fairseq's batches of ``batch_size`` of the source ``sentences``."""
    gens = [None if c.runner is not None else _generator(c, gen_args) for c in candidates]
    if sentences is None:  # batch 1
        sentences = [s["net_input"]["src_tokens"][0] for s in samples]
    inputs = [
        samples if c.runner is None else c.runner.prepare(sentences, gen_args, batch_size)
        for c in candidates
    ]
    with torch.inference_mode():
        for c, g, x in zip(candidates, gens, inputs):
            for _ in range(warmup):
                time_run(c, g, x)
        raw = [[] for _ in candidates]
        for r, m in interleaved_schedule(len(candidates), runs):
            seconds, tokens = time_run(candidates[m], gens[m], inputs[m])
            raw[m].append({"run": r, "seconds": seconds, "tokens": tokens})
            if log:
                log(
                    f"run {r + 1}/{runs} {candidates[m].label} [{candidates[m].engine} "
                    f"{candidates[m].precision}]: "
                    f"{tokens / seconds:.1f} tokens/s"
                )
    records = []
    for c, runs_c in zip(candidates, raw):
        summary = summarize_runs(
            [x["seconds"] for x in runs_c], [x["tokens"] for x in runs_c], trim
        )
        for x, rate in zip(runs_c, summary["tokens_per_s"]):
            x["tokens_per_s"] = rate
        records.append(
            {
                "label": c.label,
                "source": c.source,
                "engine": c.engine,
                "precision": c.precision,
                "size_bytes": c.size_bytes
                if c.size_bytes is not None
                else state_dict_bytes(c.model),
                "random_weights": c.random_weights,
                "params": c.params,
                "runs": runs_c,
                "kept_tokens_per_s": summary["kept"],
                "tokens_per_s": summary["mean"],
                "tokens_per_s_std": summary["std"],
                "tokens_per_s_min": summary["min"],
                "tokens_per_s_max": summary["max"],
                "tokens_per_run": runs_c[0]["tokens"],
            }
        )
        if c.shortlist:
            records[-1]["shortlist"] = c.shortlist
        if c.text:
            records[-1]["text"] = True
    ref = records[0]["tokens_per_s"]
    for rec in records:
        rec["speed_ratio"] = rec["tokens_per_s"] / ref
    return records


# --------------------------------------------------------------------------------------------
# BLEU
# --------------------------------------------------------------------------------------------


def sacrebleu_of(
    candidate: Candidate,
    subset: str,
    gen_args: Namespace,
    batch_size: int = 32,
    post_process: str | None = None,
    tokenize: str = "13a",
) -> dict:
    """Translate the whole ``subset`` and score it with sacreBLEU.

    Returns ``{"bleu", "bleu_signature", "hypotheses"}`` (hypotheses in sentence-id order).
    """
    import sacrebleu
    from fairseq import utils

    task, model, runner = candidate.task, candidate.model, candidate.runner
    task.load_dataset(subset)
    dataset = task.dataset(subset)
    tgt_dict = task.target_dictionary
    if runner is None:
        generator = task.build_generator([model], gen_args)
        strip = getattr(generator, "symbols_to_strip_from_output", {generator.eos})
    else:
        strip = {tgt_dict.eos()}
    max_positions = runner.model_max_positions if runner is not None else model.max_positions()
    itr = task.get_batch_iterator(
        dataset=dataset,
        max_sentences=batch_size,
        max_positions=utils.resolve_max_positions(task.max_positions(), max_positions),
        ignore_invalid_inputs=True,
        seed=1,
        num_workers=0,
    ).next_epoch_itr(shuffle=False)
    hyps, refs = {}, {}
    pending = []  # (sentence id, source ids) for an engine other than fairseq's generator
    with torch.inference_mode():
        for sample in itr:
            if not sample:
                continue
            out = None if runner is not None else task.inference_step(generator, [model], sample)
            for i, sid in enumerate(sample["id"].tolist()):
                if out is None:
                    src = sample["net_input"]["src_tokens"][i]
                    pending.append((sid, utils.strip_pad(src, task.source_dictionary.pad())))
                else:
                    hyp = out[i][0]["tokens"].int().cpu()
                    hyps[sid] = tgt_dict.string(hyp, post_process, extra_symbols_to_ignore=strip)
                ref = utils.strip_pad(sample["target"][i], tgt_dict.pad()).int().cpu()
                refs[sid] = tgt_dict.string(
                    ref, post_process, escape_unk=True, extra_symbols_to_ignore=strip
                )
        if pending:
            ids = runner.translate([src for _sid, src in pending], gen_args, batch_size)
            for (sid, _src), hyp in zip(pending, ids):
                hyp = torch.tensor(hyp, dtype=torch.int)
                hyps[sid] = tgt_dict.string(hyp, post_process, extra_symbols_to_ignore=strip)
    ids = sorted(hyps)
    metric = sacrebleu.metrics.BLEU(tokenize=tokenize)
    score = metric.corpus_score([hyps[i] for i in ids], [[refs[i] for i in ids]])
    return {
        "bleu": score.score,
        "bleu_signature": str(metric.get_signature()),
        "hypotheses": [hyps[i] for i in ids],
    }
