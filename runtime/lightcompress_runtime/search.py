"""fairseq's beam search in numpy, over a step interface: one search for every backend.

:class:`BeamSearch` is fairseq's ``SequenceGenerator`` beam search (the same candidate
selection, finalization, length penalty, ``min_len`` / ``max_len`` rules, batch shrinking and
results), translation only (no attention tracking, constraints, prefixes, language-model fusion
or ensembles), written once over a small :class:`Step` interface that a backend implements:

- :class:`~.onnx_step.OnnxStep`: an export's ONNX Runtime sessions (the encoder once per batch,
  one decoder call per step; :class:`~.onnx_step.OnnxGenerator`);
- ``lightcompress.deploy.generator.TorchStep``: the same encoder and decoder step, the modules
  the export traces, run eagerly in PyTorch on the model itself (``FastGenerator``:
  ``lightcompress-translate`` and the ``Translator`` API).

A step returns each hypothesis' ``k = 2 x beam`` best next tokens (log-probability + the
search's bias); the global top ``2 x beam`` of a sentence is among them, so the search selects
what fairseq's ``topk`` over ``beam x V`` selects (ties to the lower (beam, token) index, as a
stable sort orders them). The equality tests against fairseq's generator over both backends
and every family are the guard (tests/test_deploy.py).
"""

from __future__ import annotations

from typing import Protocol

import numpy as np

__all__ = ["BeamSearch", "SearchError", "Step"]


class SearchError(ValueError):
    """Settings the search cannot use (one line)."""


class Step(Protocol):
    """What the search needs of a model: its target vocabulary, special ids and length limit,
    an encoder (:meth:`start`) and an incremental decoder step (:meth:`step`)."""

    vocab_size: int
    pad: int
    eos: int
    unk: int
    max_positions: int  # (the decoder's: at most max_positions - 1 tokens before EOS)

    def start(
        self, src_tokens: np.ndarray, src_lengths: np.ndarray, beam: int
    ) -> tuple[int, np.ndarray | None]:
        """Encode a batch (``src_tokens`` ``[B x S]`` int64, left-padded; ``src_lengths``
        ``[B]``) for ``beam`` hypotheses per sentence. Returns the number of tokens a step scores and the ids they
        are (a shortlist's candidates; None: the whole vocabulary, in order)."""
        ...

    def step(
        self,
        tokens: np.ndarray,
        order: np.ndarray,
        bias: np.ndarray,
        k: int,
        kept: np.ndarray | None,
    ) -> tuple[np.ndarray, np.ndarray]:
        """One step for the ``N`` hypotheses: ``tokens`` ``[N x t]`` their prefixes (EOS
        first), ``order`` ``[N]`` the previous step's hypotheses they continue (its caches
        reordered so), ``bias`` the scored tokens' bias, ``kept`` the sentences of the previous
        step still searched (None: all). Returns the ``k`` best next tokens of each hypothesis:
        log-probabilities + bias ``[N x k]`` float32 (NaN as -inf), best first, and their token
        ids ``[N x k]`` int64."""
        ...


class BeamSearch:
    """fairseq's beam search over ``step`` (see the module notes).

    Parameters
    ----------
    step : Step
        The backend.
    beam_size, len_penalty, min_len, max_len_a, max_len_b, unk_penalty
        As fairseq's ``--beam``, ``--lenpen``, ``--min-len``, ``--max-len-a``,
        ``--max-len-b``, ``--unkpen``: at most ``min(int(max_len_a * src_len + max_len_b),
        max_positions - 1)`` tokens before EOS, ``src_len`` the padded source length (EOS
        included).
    """

    def __init__(
        self,
        step: Step,
        beam_size: int = 5,
        len_penalty: float = 1.0,
        min_len: int = 1,
        max_len_a: float = 0.0,
        max_len_b: int = 200,
        unk_penalty: float = 0.0,
    ):
        self.step = step
        self.pad, self.eos, self.unk = step.pad, step.eos, step.unk
        self.vocab_size = step.vocab_size
        self.max_positions = step.max_positions
        self.beam_size = min(beam_size, self.vocab_size - 1)
        self.len_penalty, self.unk_penalty = len_penalty, unk_penalty
        self.min_len, self.max_len_a, self.max_len_b = min_len, max_len_a, max_len_b

    def _biases(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """The per-token score bias before ``min_len``, between, and at ``max_len`` (fairseq:
        ``-inf`` for padding, the unknown penalty, EOS forbidden / forced)."""
        key = (self.pad, self.unk, self.eos, self.unk_penalty, self.vocab_size)
        if getattr(self, "_bias_key", None) != key:
            normal = np.zeros(self.vocab_size, dtype=np.float32)
            normal[self.pad] = -np.inf
            normal[self.unk] -= self.unk_penalty
            short = normal.copy()
            short[self.eos] = -np.inf
            end = np.full(self.vocab_size, -np.inf, dtype=np.float32)
            end[self.eos] = normal[self.eos]
            self._bias_cache, self._bias_key = (short, normal, end), key
        return self._bias_cache

    def _biases_at(self, at: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """:meth:`_biases` at the scored ids ``at`` (a shortlist's candidates; the last batch's
        kept: a batch of the same candidates reuses them)."""
        cached = getattr(self, "_at_cache", None)
        if cached is None or cached[0] is not at and not np.array_equal(cached[0], at):
            cached = self._at_cache = (at, tuple(b[at] for b in self._biases()))
        return cached[1]

    def generate(self, src_tokens: np.ndarray, src_lengths: np.ndarray) -> list[list[dict]]:
        """Translate a batch: ``src_tokens`` ``[B x S]`` int64, left-padded, ``src_lengths``
        ``[B]``. Returns, per sentence, the ``beam`` finished hypotheses best first:
        ``{"tokens": int64 array (ending with EOS), "score": float}``."""
        beam, eos, pad = self.beam_size, self.eos, self.pad
        src_tokens = np.ascontiguousarray(src_tokens, dtype=np.int64)
        bsz, src_len = src_tokens.shape
        max_len = min(int(self.max_len_a * src_len + self.max_len_b), self.max_positions - 1)
        if self.min_len > max_len:
            raise SearchError(f"min_len {self.min_len} is larger than max_len {max_len}")
        n = bsz * beam
        # (with a shortlist: the number of its candidates and their ids)
        vocab, at = self.step.start(src_tokens, np.asarray(src_lengths), beam)
        short, normal, end = self._biases() if at is None else self._biases_at(at)
        tokens = np.full((n, max_len + 2), pad, dtype=np.int64)
        tokens[:, 0] = eos
        cands_to_ignore = np.zeros((bsz, beam), dtype=bool)
        ignoring = False  # (cands_to_ignore.any())
        cum = np.zeros((n, 1), dtype=np.float32)  # (each hypothesis' score so far, a column)
        finalized: list[list[dict]] = [[] for _ in range(bsz)]
        finished = [False] * bsz
        num_remaining = bsz
        cand_size = 2 * beam
        bbsz_offsets = (np.arange(bsz) * beam)[:, None]
        cand_offsets = np.arange(cand_size)
        order = np.arange(n, dtype=np.int64)
        batch_idxs: np.ndarray | None = None
        rows = np.arange(bsz)[:, None]
        k = min(cand_size, vocab)

        for step in range(max_len + 1):  # one extra step for EOS
            if step > 0 and batch_idxs is not None:  # finished sentences left the batch
                corr = batch_idxs - np.arange(batch_idxs.size)
                order = (order.reshape(-1, beam) + corr[:, None] * beam).reshape(-1)
            bias = end if step >= max_len else (short if step < self.min_len else normal)
            kept = batch_idxs if step > 0 else None
            top_lp, top_ids = self.step.step(tokens[:, : step + 1], order, bias, k, kept)

            # fairseq's BeamSearch.step over each hypothesis' best k tokens: the sentence's
            # 2 x beam best of beam x k, best first, ties to the lower (beam, token) index
            # (within equal values, positions are in that order: a stable sort keeps it)
            if step == 0:  # the first hypothesis of each sentence
                vals, ids = top_lp[::beam], top_ids[::beam]  # [bsz x k]
                want = min(cand_size, vocab - 1)
            else:
                vals = (top_lp + cum).reshape(bsz, beam * k)
                ids = top_ids.reshape(bsz, beam * k)
                want = min(cand_size, beam * vocab - 1)
            pick = (-vals).argsort(axis=1, kind="stable")[:, :want]
            if bsz == 1:  # (one sentence: positions are flat positions, offsets are 0)
                cand_scores, cand_indices, cand_bbsz_idx = vals[0, pick], ids[0, pick], pick // k
            else:
                flat = pick + rows * vals.shape[1]  # (positions in the flattened [bsz x beam k])
                cand_scores, cand_indices = vals.take(flat), ids.take(flat)
                cand_bbsz_idx = pick // k + bbsz_offsets

            if not ignoring and want >= beam and not (cand_indices[:, :beam] == eos).any():
                # the common step: none of the beam best candidates ends and none is ignored,
                # so they are the active hypotheses (what the general path below gives: the
                # other candidates only matter when one of the beam best ends)
                batch_idxs = None
                active_bbsz_idx = cand_bbsz_idx[:, :beam].reshape(-1)
                prev = cand_indices[:, :beam].reshape(-1)
                cum = cand_scores[:, :beam].reshape(-1, 1)
            else:
                eos_mask = (cand_indices == eos) & (cand_scores != -np.inf)
                eos_mask[:, :beam] &= ~cands_to_ignore
                finalized_sents: list[int] = []
                if eos_mask[:, :beam].any():
                    eos_bbsz_idx = cand_bbsz_idx[:, :beam][eos_mask[:, :beam]]
                    eos_scores = cand_scores[:, :beam][eos_mask[:, :beam]]
                    finalized_sents = self._finalize(
                        step, eos_bbsz_idx, eos_scores, tokens, finalized, finished, beam, max_len
                    )
                    num_remaining -= len(finalized_sents)
                if num_remaining == 0:
                    break
                if finalized_sents:
                    new_bsz = bsz - len(finalized_sents)
                    batch_mask = np.ones(bsz, dtype=bool)
                    batch_mask[finalized_sents] = False
                    batch_idxs = np.nonzero(batch_mask)[0]
                    eos_mask = eos_mask[batch_idxs]
                    bbsz_offsets = (np.arange(new_bsz) * beam)[:, None]
                    moved = bbsz_offsets - batch_idxs[:, None] * beam  # (new offsets - old)
                    cand_bbsz_idx = cand_bbsz_idx[batch_idxs] + moved
                    cand_scores = cand_scores[batch_idxs]
                    cand_indices = cand_indices[batch_idxs]
                    cands_to_ignore = cands_to_ignore[batch_idxs]
                    tokens = tokens.reshape(bsz, -1)[batch_idxs].reshape(new_bsz * beam, -1)
                    bsz = new_bsz
                    rows = np.arange(bsz)[:, None]
                else:
                    batch_idxs = None

                # the beam best candidates that do not end, in order (fairseq's active hypotheses)
                eos_mask[:, :beam] |= cands_to_ignore
                active_mask = eos_mask * cand_size + cand_offsets[: eos_mask.shape[1]]
                active_hypos = np.argsort(active_mask, axis=1, kind="stable")[:, :beam]
                cands_to_ignore = active_mask[rows, active_hypos] >= cand_size
                ignoring = bool(cands_to_ignore.any())
                active_bbsz_idx = cand_bbsz_idx[rows, active_hypos].reshape(-1)
                prev = cand_indices[rows, active_hypos].reshape(-1)
                cum = cand_scores[rows, active_hypos].reshape(-1, 1)
            tokens = tokens[active_bbsz_idx]  # (columns after this step are padding in all)
            tokens[:, step + 1] = prev
            order = active_bbsz_idx

        for sent in range(len(finalized)):
            s = np.array([h["score"] for h in finalized[sent]], dtype=np.float64)
            finalized[sent] = [finalized[sent][i] for i in np.argsort(-s, kind="stable")]
        return finalized

    def _finalize(self, step, bbsz_idx, eos_scores, tokens, finalized, finished, beam, max_len):
        """fairseq's ``finalize_hypos``: store the hypotheses that end in EOS; returns the
        batch positions of the sentences that are now finished."""
        tokens_clone = tokens[bbsz_idx, 1 : step + 2].copy()  # no leading EOS
        tokens_clone[:, step] = self.eos
        eos_scores = eos_scores / (step + 1) ** self.len_penalty
        cum_unfin: list[int] = []
        prev = 0
        for f in finished:
            if f:
                prev += 1
            else:
                cum_unfin.append(prev)
        cum_fin = np.array(cum_unfin, dtype=np.int64)
        unfin_idx = bbsz_idx // beam
        sent = unfin_idx + cum_fin[unfin_idx]
        seen = (sent << 32) + unfin_idx
        for i in range(bbsz_idx.size):
            if len(finalized[sent[i]]) < beam:
                finalized[sent[i]].append(
                    {"tokens": tokens_clone[i], "score": float(eos_scores[i])}
                )
        newly_finished: list[int] = []
        for unique_s in np.unique(seen).tolist():
            unique_sent = unique_s >> 32
            unique_unfin_idx = unique_s - (unique_sent << 32)
            if not finished[unique_sent] and (
                len(finalized[unique_sent]) == beam or step == max_len
            ):
                finished[unique_sent] = True
                newly_finished.append(unique_unfin_idx)
        return newly_finished
