"""The ONNX backend of the search: an export's graphs as a :class:`~.search.Step`.

:class:`OnnxStep` runs the encoder once per batch (its outputs kept once per sentence), then
one decoder call per step, which reorders the self-attention caches, adds the score bias and
returns each hypothesis' ``2 x beam`` best next tokens; :class:`OnnxGenerator` is the beam
search (:class:`~.search.BeamSearch`) over it. Scores are fairseq's to floating-point order
(ONNX Runtime sums in another order).
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
from .search import BeamSearch, SearchError
from .shortlist import Shortlist

__all__ = ["OnnxGenerator", "OnnxStep", "use_shortlist"]


def use_shortlist(config: dict, shortlist: bool | None) -> bool:
    """Whether a translator scores the export's shortlist: ``shortlist`` as given, and for
    None (the translators' default) whenever the export ships one (``--shortlist FILE`` at
    export time, which ``lightcompress-compress`` gives by default)."""
    return bool(config.get("shortlist")) if shortlist is None else bool(shortlist)


class OnnxStep:
    """An export's encoder and decoder step (see the module notes).

    Parameters
    ----------
    model_dir : str
        An export of ``lightcompress-export-onnx``.
    threads : int
        ONNX Runtime's intra-op threads.
    shortlist : bool or None
        Score only the candidates of the export's shortlist (:class:`Shortlist`), log-softmax
        renormalized over them; an export made with a shortlist scores every token without.
        None: the shortlist when the export ships one (:func:`use_shortlist`).
    """

    def __init__(self, model_dir: str, threads: int = 1, shortlist: bool | None = False):
        self.config = config = load_config(model_dir)
        shortlist = use_shortlist(config, shortlist)
        self.pad, self.eos, self.unk = config["pad"], config["eos"], config["unk"]
        self.vocab_size = config["vocab_size"]
        self.layers = config["layers"]
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
            self.shortlist = Shortlist(
                config_path(model_dir, config, "shortlist"),
                *dicts,
                specials=(self.pad, self.eos, self.unk),
                old_text=True,
            )
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
            steps = max(steps, 64, 2 * len(cached) if cached is not None else 0)  # (grown rarely)
            ids = np.arange(self.offset + 1, self.offset + steps + 1, dtype=np.int64)
            if self._pos_input == "pos_emb":  # the rows of fairseq's sinusoidal table
                config = self.config
                ids = sinusoid(ids, config["position_dim"], config.get("position_freq"))
            self._position_cache = cached = ids
        return cached

    def _vocabulary(self, src_tokens: np.ndarray, beam: int) -> tuple[int, dict, np.ndarray | None]:
        """The number of tokens scored for a batch, the graph's candidate inputs (the ids, and
        with ``rows.onnx`` their output rows) if any, and the ids the step's bias is taken at
        (None: the whole vocabulary)."""
        if self.shortlist is None and "cands" not in self._dec_inputs:
            return self.vocab_size, {}, None
        all_ids = self.shortlist is None  # (a shortlist export run without it: every id)
        cands = (
            np.arange(self.vocab_size)
            if all_ids
            else self.shortlist.candidates(src_tokens, 2 * beam)
        )
        feed = {"cands": cands.astype(np.int64, copy=False)}
        if self.rows is None:
            return len(cands), feed, None
        names = self.config["shortlist_rows_outputs"]
        feed.update(zip(names, self.rows.run(names, feed)))
        return len(cands), feed, feed["cands"]

    def start(
        self, src_tokens: np.ndarray, src_lengths: np.ndarray, beam: int
    ) -> tuple[int, np.ndarray | None]:
        """The encoder's outputs (once per sentence) and empty self-attention caches."""
        enc = self.encoder.run(None, {"src_tokens": src_tokens})
        self._per_sentence = self.config.get("cross_layout") == "sentence"  # (else: per hypothesis)
        self._cross = cross = {
            n: a if self._per_sentence else a.repeat(beam, 0)
            for n, a in zip(self._enc_outputs, enc)
        }
        n = len(src_tokens) * beam
        past = {}
        for i, spec in enumerate(self.layers):
            for c in ("k", "v"):  # (factor-space attention: [1 x rank] per hypothesis)
                heads, width = spec.get(f"{c}_cache", (spec["heads"], spec["head_dim"]))
                past[f"past_{c}{i}"] = np.zeros((n, heads, 0, width), dtype=np.float32)
        self._past_names = list(past)
        vocab, cands, at = self._vocabulary(src_tokens, beam)  # (a shortlist's candidates)
        self._feed = {**cross, **past, **cands}
        self._k = None
        return vocab, at

    def step(
        self,
        tokens: np.ndarray,
        order: np.ndarray,
        bias: np.ndarray,
        k: int,
        kept: np.ndarray | None,
    ) -> tuple[np.ndarray, np.ndarray]:
        """One decoder call: it reorders the caches, adds the bias and takes the top ``k``."""
        feed = self._feed
        step = tokens.shape[1] - 1
        if kept is not None:  # finished sentences left the batch
            cross = self._cross
            for name in cross:
                cross[name] = cross[name][kept if self._per_sentence else order]
            feed.update(cross)
        if self._k != k:
            feed["k"] = np.array([k], dtype=np.int64)
            self._k = k
        if self._pos_input is not None:
            feed[self._pos_input] = self._positions(step + 1)[step : step + 1]
        feed["prev"] = np.ascontiguousarray(tokens[:, step])
        feed["order"] = order
        feed["bias"] = bias
        out = self._run_decoder(feed)
        feed.update(zip(self._past_names, out[2:]))
        return out[0], out[1]


class OnnxGenerator(BeamSearch):
    """fairseq's beam search (:class:`~.search.BeamSearch`) over an export's graphs.

    Parameters
    ----------
    model_dir : str
        An export of ``lightcompress-export-onnx``.
    beam_size, len_penalty, min_len, max_len_a, max_len_b, unk_penalty
        As fairseq's ``--beam``, ``--lenpen``, ``--min-len``, ``--max-len-a``,
        ``--max-len-b``, ``--unkpen``.
    threads, shortlist
        :class:`OnnxStep`'s.
    """

    def __init__(
        self,
        model_dir: str,
        beam_size: int = 5,
        len_penalty: float = 1.0,
        min_len: int = 1,
        max_len_a: float = 0.0,
        max_len_b: int = 200,
        unk_penalty: float = 0.0,
        threads: int = 1,
        shortlist: bool | None = False,
    ):
        step = OnnxStep(model_dir, threads=threads, shortlist=shortlist)
        super().__init__(
            step,
            beam_size=beam_size,
            len_penalty=len_penalty,
            min_len=min_len,
            max_len_a=max_len_a,
            max_len_b=max_len_b,
            unk_penalty=unk_penalty,
        )
        self.config, self.encoder, self.decoder = step.config, step.encoder, step.decoder

    def generate(self, src_tokens: np.ndarray, src_lengths: np.ndarray) -> list[list[dict]]:
        """:meth:`BeamSearch.generate` (its settings errors as :class:`OnnxError`)."""
        try:
            return super().generate(src_tokens, src_lengths)
        except SearchError as exc:
            raise OnnxError(str(exc)) from None
