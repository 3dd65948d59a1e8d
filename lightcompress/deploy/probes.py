"""Probes that prove two models compute the same translation model, to float rounding.

A model derived from another (a student multiplied out into the dense Transformer,
:mod:`lightcompress.deploy.densify`; its CTranslate2 export, :mod:`lightcompress.deploy.ct2`)
is checked against it on random probe sentences of the task's dictionaries, two ways:
teacher forcing (:func:`gold_logprobs`: every target token's log-probability; the largest
difference, :func:`max_logprob_difference`) and greedy translation (:func:`greedy`: the argmax at
every step, no token masked; :func:`greedy_mismatch`: equal, or parting only at a near tie).
Both are within :data:`TOLERANCE`.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch

from lightcompress.errors import LightcompressError

__all__ = [
    "TOLERANCE",
    "ProbeMismatch",
    "gold_logprobs",
    "greedy",
    "greedy_mismatch",
    "max_len_of",
    "max_logprob_difference",
    "probe_pairs",
]

TOLERANCE = 1e-3
"""Largest difference of a per-token log-probability (teacher forcing) between a model and
the model it was derived from (dense, exported) on the probes, and largest log-probability gap of a greedy step where their
translations may part (a near tie): the products regrouped differ in the last float32 digits
(~1e-6 on the tiny models)."""


class ProbeMismatch(LightcompressError, ValueError):
    """A derived model translates a probe sentence otherwise than the model it was derived
    from (not at a near tie): it computes another model."""


def probe_pairs(task, sentences: int = 4, seed: int = 0) -> list[tuple[torch.Tensor, torch.Tensor]]:
    """Random ``(source, target)`` token pairs (no EOS, no special tokens) of the task's
    dictionaries, lengths 5.. and 4.. (the same for a given seed)."""
    src_dict, tgt_dict = task.source_dictionary, task.target_dictionary
    gen = torch.Generator().manual_seed(seed)
    pairs = []
    for i in range(sentences):
        src = torch.randint(src_dict.nspecial, len(src_dict), (5 + i,), generator=gen)
        tgt = torch.randint(tgt_dict.nspecial, len(tgt_dict), (4 + i,), generator=gen)
        pairs.append((src, tgt))
    return pairs


@torch.no_grad()
def gold_logprobs(model, task, pairs) -> list[torch.Tensor]:
    """Per pair, the model's log-probability of each target token and of EOS (teacher
    forcing; fairseq's forward)."""
    src_dict, tgt_dict = task.source_dictionary, task.target_dictionary
    was_training = model.training
    model.eval()
    try:
        out = []
        for src, tgt in pairs:
            src_tokens = torch.cat([src, torch.tensor([src_dict.eos()])]).unsqueeze(0)
            prev = torch.cat([torch.tensor([tgt_dict.eos()]), tgt]).unsqueeze(0)
            net = model(src_tokens, torch.tensor([src_tokens.shape[1]]), prev)
            lprobs = model.get_normalized_probs(net, log_probs=True)[0].float()
            gold = torch.cat([tgt, torch.tensor([tgt_dict.eos()])])
            out.append(lprobs.gather(-1, gold.unsqueeze(-1)).squeeze(-1))
        return out
    finally:
        model.train(was_training)


def max_logprob_difference(model, other, task, sentences: int = 4, seed: int = 0) -> float:
    """Largest absolute difference of the per-token log-probabilities of two fairseq models on
    :func:`probe_pairs` (``inf`` when either is not finite)."""
    pairs = probe_pairs(task, sentences, seed)
    worst = 0.0
    for a, b in zip(gold_logprobs(model, task, pairs), gold_logprobs(other, task, pairs)):
        if not (torch.isfinite(a).all() and torch.isfinite(b).all()):
            return float("inf")
        worst = max(worst, float((a - b).abs().max()))
    return worst


def max_len_of(source: torch.Tensor) -> int:
    """The probe translations' length limit (tokens before EOS) for a source."""
    return 2 * source.numel() + 2


@torch.no_grad()
def greedy(model, task, sources: Sequence[torch.Tensor]) -> list[tuple[list[int], list]]:
    """Greedy translations of ``sources`` (token tensors without EOS) by a fairseq model, with
    no token masked (the argmax of the model's distribution at each step, EOS ends), at most
    :func:`max_len_of` tokens; per source ``(tokens without EOS, per-step log-probabilities)``."""
    src_dict, tgt_dict = task.source_dictionary, task.target_dictionary
    eos = tgt_dict.eos()
    was_training = model.training
    model.eval()
    try:
        out = []
        for src in sources:
            src_tokens = torch.cat([src, torch.tensor([src_dict.eos()])]).unsqueeze(0)
            lengths = torch.tensor([src_tokens.shape[1]])
            encoder_out = model.encoder(src_tokens, src_lengths=lengths)
            tokens, steps = [], []
            for _ in range(max_len_of(src) + 1):
                prev = torch.tensor([[eos, *tokens]])
                net = model.decoder(prev, encoder_out=encoder_out)
                lp = model.get_normalized_probs(net, log_probs=True)[0, -1].float()
                steps.append(lp)
                token = int(lp.argmax())
                if token == eos or len(tokens) == max_len_of(src):
                    break
                tokens.append(token)
            out.append((tokens, steps))
        return out
    finally:
        model.train(was_training)


def greedy_mismatch(ours, theirs: Sequence[Sequence[int]], eos: int, what: str) -> dict:
    """Compare greedy translations ``theirs`` (token lists without EOS) with the reference
    ``ours`` (:func:`greedy`'s output): equal, or parting at a near tie (at the first step where
    they differ, the reference's log-probabilities of the two tokens, EOS where one ended,
    within :data:`TOLERANCE`). Returns ``{"sentences", "equal", "near_ties"}``; raises
    :class:`ProbeMismatch` naming ``what`` when a translation parts elsewhere."""
    equal = ties = 0
    for i, ((a, steps), b) in enumerate(zip(ours, theirs)):
        b = [int(t) for t in b]
        if a == b:
            equal += 1
            continue
        t = next((j for j, (x, y) in enumerate(zip(a, b)) if x != y), min(len(a), len(b)))
        gap = float("inf")
        if t < len(steps):
            mine = a[t] if t < len(a) else eos
            other = b[t] if t < len(b) else eos
            if 0 <= other < steps[t].numel():
                gap = float(steps[t][mine] - steps[t][other])
        if not abs(gap) <= TOLERANCE:
            raise ProbeMismatch(
                f"{what} translates probe sentence {i} otherwise: {b} instead of {a}, parting "
                f"at step {t} where the reference's log-probabilities of the two tokens are "
                f"{gap:.3g} apart (allowed {TOLERANCE:g} for float rounding)"
            )
        ties += 1
    return {"sentences": len(ours), "equal": equal, "near_ties": ties}
