"""fairseq's beam search in numpy over an export's graphs (:class:`OnnxGenerator`).

:class:`OnnxGenerator` is fairseq's ``SequenceGenerator`` beam search (the same candidate
selection, finalization, length penalty, ``min_len`` / ``max_len`` rules, batch shrinking and
results as :class:`lightcompress.deploy.generator.FastGenerator`) in numpy, over the exported
graphs: the encoder once per batch (its outputs kept once per sentence), then one decoder call
per step, which reorders the self-attention caches, adds the score bias and returns each
hypothesis' ``2 x beam`` best next tokens (the global top ``2 x beam`` of a sentence is among
them). Scores are fairseq's to floating-point order (ONNX Runtime sums in another order).
"""

from __future__ import annotations

import os

import numpy as np

from .files import (
    OnnxError,
    check_graphs,
    config_path,
    load_config,
    read_symbols,
    session,
    sinusoid,
)
from .shortlist import Shortlist

__all__ = ["OnnxGenerator"]


class OnnxGenerator:
    """Beam search over an export's graphs (see the module notes).

    Parameters
    ----------
    model_dir : str
        An export of ``lightcompress-export-onnx``.
    beam_size, len_penalty, min_len, max_len_a, max_len_b, unk_penalty
        As fairseq's ``--beam``, ``--lenpen``, ``--min-len``, ``--max-len-a``,
        ``--max-len-b``, ``--unkpen``.
    threads : int
        ONNX Runtime's intra-op threads.
    shortlist : bool
        Score only the candidates of the export's shortlist (:class:`Shortlist`), log-softmax
        renormalized over them; an export made with a shortlist scores every token without.
    """

    def __init__(self, model_dir: str, beam_size: int = 5, len_penalty: float = 1.0,
                 min_len: int = 1, max_len_a: float = 0.0, max_len_b: int = 200,
                 unk_penalty: float = 0.0, threads: int = 1, shortlist: bool = False):  # fmt: skip
        self.config = config = load_config(model_dir)
        self.pad, self.eos, self.unk = config["pad"], config["eos"], config["unk"]
        self.vocab_size = config["vocab_size"]
        self.layers = config["layers"]
        self.beam_size = min(beam_size, self.vocab_size - 1)
        self.len_penalty, self.unk_penalty = len_penalty, unk_penalty
        self.min_len, self.max_len_a, self.max_len_b = min_len, max_len_a, max_len_b
        self.max_positions = config["max_decoder_positions"]
        self.offset = config["position_offset"]
        self.encoder = session(os.path.join(model_dir, "encoder.onnx"), threads)
        self.decoder = session(os.path.join(model_dir, "decoder.onnx"), threads)
        check_graphs(model_dir, config, self.encoder, self.decoder)
        # a shortlist export of a float output layer: rows.onnx gathers the candidates' output
        # rows once per batch (the decoder step takes them and the candidates' bias)
        self.rows = None
        if config.get("shortlist_rows"):
            self.rows = session(config_path(model_dir, config, "shortlist_rows"), threads)
        self._dec_inputs = [i.name for i in self.decoder.get_inputs()]
        self._enc_outputs = [o.name for o in self.encoder.get_outputs()]
        self._dec_outputs = [o.name for o in self.decoder.get_outputs()]
        # (none for a model without positions: the traced graph has no such input)
        self._pos_input = next((n for n in ("pos_emb", "pos") if n in self._dec_inputs), None)
        self._position_cache: np.ndarray | None = None
        self.shortlist = None
        if shortlist:
            if not config.get("shortlist"):
                raise OnnxError(f"{model_dir} has no shortlist: export it with --shortlist FILE")
            dicts = [read_symbols(f"{model_dir}/dict.{s}.txt") for s in ("src", "tgt")]
            self.shortlist = Shortlist(config_path(model_dir, config, "shortlist"), *dicts,
                                       specials=(self.pad, self.eos, self.unk),
                                       old_text=True)  # fmt: skip
        # the session's own run, without the Python wrapper's per-call input validation (about
        # 50 us a step, 5 % of a small model's step; the feed is built here, always complete)
        inner = getattr(self.decoder, "_sess", None)
        self._run_decoder = (
            (lambda feed: inner.run(self._dec_outputs, feed, None))
            if inner is not None
            else (lambda feed: self.decoder.run(self._dec_outputs, feed))
        )

    def _positions(self, steps: int) -> np.ndarray:
        """The decoder's position inputs of the first ``steps`` steps: the position ids, or
        for sinusoidal positions the embedding rows (computed once, kept for longer outputs)."""
        cached = self._position_cache
        if cached is None or len(cached) < steps:
            ids = np.arange(self.offset + 1, self.offset + steps + 1, dtype=np.int64)
            if self._pos_input == "pos_emb":  # the rows of fairseq's sinusoidal table
                config = self.config
                ids = sinusoid(ids, config["position_dim"], config.get("position_freq"))
            self._position_cache = cached = ids
        return cached

    def _vocabulary(self, src_tokens: np.ndarray) -> tuple[int, dict, np.ndarray | None]:
        """The number of tokens scored for a batch, the graph's candidate inputs (the ids, and
        with ``rows.onnx`` their output rows) if any, and the ids the step's bias is taken at
        (None: the whole vocabulary)."""
        if self.shortlist is None and "cands" not in self._dec_inputs:
            return self.vocab_size, {}, None
        all_ids = self.shortlist is None  # (a shortlist export run without it: every id)
        cands = (np.arange(self.vocab_size) if all_ids
                 else self.shortlist.candidates(src_tokens, 2 * self.beam_size))  # fmt: skip
        feed = {"cands": cands.astype(np.int64, copy=False)}
        if self.rows is None:
            return len(cands), feed, None
        names = self.config["shortlist_rows_outputs"]
        feed.update(zip(names, self.rows.run(names, feed)))
        return len(cands), feed, feed["cands"]

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

    # Mirrors: lightcompress.deploy.generator.FastGenerator.generate@4c74e40e92d5, fairseq.sequence_generator.SequenceGenerator._generate@bd6adae3d7c8; self@31d3741edd81
    def generate(self, src_tokens: np.ndarray, src_lengths: np.ndarray) -> list[list[dict]]:
        """Translate a batch: ``src_tokens`` ``[B x S]`` int64, left-padded, ``src_lengths``
        ``[B]``. Returns, per sentence, the ``beam`` finished hypotheses best first:
        ``{"tokens": int64 array (ending with EOS), "score": float}``."""
        beam, eos, pad = self.beam_size, self.eos, self.pad
        src_tokens = np.ascontiguousarray(src_tokens, dtype=np.int64)
        bsz, src_len = src_tokens.shape
        max_len = min(int(self.max_len_a * src_len + self.max_len_b), self.max_positions - 1)
        if self.min_len > max_len:
            raise OnnxError(f"min_len {self.min_len} is larger than max_len {max_len}")
        enc = self.encoder.run(None, {"src_tokens": src_tokens})
        per_sentence = self.config.get("cross_layout") == "sentence"  # (else: per hypothesis)
        cross = {n: a if per_sentence else a.repeat(beam, 0)
                 for n, a in zip(self._enc_outputs, enc)}  # fmt: skip
        n = bsz * beam
        past = {}
        for i, spec in enumerate(self.layers):
            for c in ("k", "v"):  # (factor-space attention: [1 x rank] per hypothesis)
                heads, width = spec.get(f"{c}_cache", (spec["heads"], spec["head_dim"]))
                past[f"past_{c}{i}"] = np.zeros((n, heads, 0, width), dtype=np.float32)

        scores = np.zeros((n, max_len + 1), dtype=np.float32)
        tokens = np.full((n, max_len + 2), pad, dtype=np.int64)
        tokens[:, 0] = eos
        cands_to_ignore = np.zeros((bsz, beam), dtype=bool)
        ignoring = False  # (cands_to_ignore.any())
        cum = scores[:, 0]  # (each hypothesis' score so far: scores[:, step - 1])
        finalized: list[list[dict]] = [[] for _ in range(bsz)]
        finished = [False] * bsz
        num_remaining = bsz
        cand_size = 2 * beam
        bbsz_offsets = (np.arange(bsz) * beam)[:, None]
        cand_offsets = np.arange(cand_size)
        order = np.arange(n, dtype=np.int64)
        batch_idxs: np.ndarray | None = None
        positions = self._positions(max_len + 1)  # [steps] ids or [steps x C] sinusoid rows
        past_names = list(past)
        rows = np.arange(bsz)[:, None]
        vocab, cands, at = self._vocabulary(src_tokens)  # (a shortlist's candidates: inputs)
        short, normal, end = (b if at is None else b[at] for b in self._biases())
        feed = {"k": np.array([min(cand_size, vocab)], dtype=np.int64), **cross, **past, **cands}
        feed["prev"] = tokens[:, 0].copy()

        for step in range(max_len + 1):  # one extra step for EOS
            if step > 0 and batch_idxs is not None:  # finished sentences left the batch
                corr = batch_idxs - np.arange(batch_idxs.size)
                order = (order.reshape(-1, beam) + corr[:, None] * beam).reshape(-1)
                for name in cross:
                    cross[name] = cross[name][batch_idxs if per_sentence else order]
                feed.update(cross)
            if self._pos_input is not None:
                feed[self._pos_input] = positions[step : step + 1]
            feed["order"] = order
            feed["bias"] = end if step >= max_len else (short if step < self.min_len else normal)
            out = self._run_decoder(feed)
            top_lp, top_ids = out[0], out[1]
            feed.update(zip(past_names, out[2:]))

            # fairseq's BeamSearch.step over each hypothesis' best k tokens: the sentence's
            # 2 x beam best of beam x k, best first, ties to the lower (beam, token) index
            # (within equal values, positions are in that order: a stable sort keeps it)
            k = top_lp.shape[1]
            if step == 0:  # the first hypothesis of each sentence
                vals, ids = top_lp[::beam], top_ids[::beam]  # [bsz x k]
            else:
                vals = (top_lp + cum[:, None]).reshape(bsz, beam * k)
                ids = top_ids.reshape(bsz, beam * k)
            want = min(cand_size, (beam if step > 0 else 1) * vocab - 1)
            pick = (-vals).argsort(axis=1, kind="stable")[:, :want]
            flat = pick + rows * vals.shape[1]  # (positions in the flattened [bsz x beam k])
            cand_scores = vals.take(flat)
            cand_indices = ids.take(flat)
            cand_bbsz_idx = pick // k + bbsz_offsets

            ends = cand_indices == eos
            if not ignoring and not np.count_nonzero(ends):
                # the common step: no candidate ends and none is ignored, so the active
                # hypotheses are the beam best candidates (what the general path below gives)
                batch_idxs = None
                active_bbsz_idx = cand_bbsz_idx[:, :beam].reshape(-1)
                prev = cand_indices[:, :beam].reshape(-1)
                cum = cand_scores[:, :beam].reshape(-1)
            else:
                eos_mask = ends & (cand_scores != -np.inf)
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
                    scores = scores.reshape(bsz, -1)[batch_idxs].reshape(new_bsz * beam, -1)
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
                cum = cand_scores[rows, active_hypos].reshape(-1)
            tokens = tokens[active_bbsz_idx]  # (columns after this step are padding in all)
            feed["prev"] = tokens[:, step + 1] = prev
            scores = scores[active_bbsz_idx]
            scores[:, step] = cum
            order = active_bbsz_idx

        for sent in range(len(finalized)):
            s = np.array([h["score"] for h in finalized[sent]], dtype=np.float64)
            finalized[sent] = [finalized[sent][i] for i in np.argsort(-s, kind="stable")]
        return finalized

    # Mirrors: lightcompress.deploy.generator.FastGenerator._finalize@2cf60f12a9f8, fairseq.sequence_generator.SequenceGenerator.finalize_hypos@388f067e383e; self@371ee7610fb6
    def _finalize(self, step, bbsz_idx, eos_scores, tokens, finalized, finished, beam, max_len):
        """fairseq's ``finalize_hypos`` (as :class:`FastGenerator` does it)."""
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
