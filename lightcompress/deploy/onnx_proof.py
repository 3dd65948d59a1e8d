"""The ONNX exporter's last check: the export, run as a user runs it, translates like the model.

The graph check of :mod:`lightcompress.deploy.onnx_export` compares single graph calls on a probe
batch; it cannot see an export whose runtime fails (a graph input the runtime does not feed, a
configuration it misreads). :func:`prove_translations` therefore imports the export's own
``translate.py`` in a Python process of its own (the export's ``runtime/``, the code a
deployment runs, not the package's), translates a few probe sentences with its
:class:`OnnxTranslator` (config, manifest, dictionaries, both graphs, the numpy beam search) and
compares the best hypotheses with fairseq's ``SequenceGenerator`` on the model:

- float32: every best hypothesis must be fairseq's (the same tokens; a different hypothesis is
  accepted only as a tie, with fairseq's score of the export's hypothesis within ``1e-4`` of its
  best), or :class:`~lightcompress.deploy.onnx_graphs.ExportError`;
- int8: the share of probe sentences whose best hypothesis is fairseq's float32 one is returned
  (the export records it; int8 is expected to move some of them).

A runtime error is an ``ExportError`` naming it; the caller writes nothing in either case.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

import torch

__all__ = ["PROBE_BEAM", "PROBE_LENGTHS", "probe_sentences", "prove_translations"]

PROBE_BEAM = 2
PROBE_LENGTHS = (2, 5, 8, 13)  # source tokens before EOS (capped by the model's positions)
_MAX_LEN_B = 12  # output tokens at most: enough to run past the first EOS decisions
_TIE = 1e-4


def probe_sentences(src_dict, max_source_positions: int, seed: int = 0) -> list[torch.Tensor]:
    """Source id sentences (each ending with EOS) of :data:`PROBE_LENGTHS` tokens drawn from the
    dictionary's ordinary symbols (its special symbols only when it has no other)."""
    g = torch.Generator().manual_seed(seed)
    low = src_dict.nspecial if len(src_dict) > src_dict.nspecial else src_dict.unk()
    high = max(len(src_dict), low + 1)
    out = []
    for n in PROBE_LENGTHS:
        n = max(1, min(n, int(max_source_positions) - 1))
        ids = torch.randint(low, high, (n,), generator=g)
        out.append(torch.cat([ids, torch.tensor([src_dict.eos()])]))
    return out


# run in a process of its own, by the export's translate.py: ids in (JSON on stdin), ids out
_CHILD = """import json, sys
sys.path.insert(0, sys.argv[1])
import numpy as np
import translate
settings = json.loads(sys.argv[2])
translator = translate.OnnxTranslator(sys.argv[1], **settings)
sentences = [np.array(s, dtype=np.int64) for s in json.load(sys.stdin)]
print(json.dumps(translator.translate_ids(sentences)))
"""


def _run_export(folder: str, sentences: list[list[int]], **settings) -> list[list[int]]:
    """The export's own ``translate.py`` (its ``OnnxTranslator``), in a process of its own: the
    best hypothesis of every sentence. Raises RuntimeError with the child's last line."""
    env = dict(os.environ, OMP_NUM_THREADS="1", PYTHONWARNINGS="ignore")
    proc = subprocess.run(
        [sys.executable, "-B", "-c", _CHILD, os.path.abspath(folder), json.dumps(settings)],
        input=json.dumps(sentences),
        capture_output=True,
        text=True,
        env=env,
        timeout=600,
        check=False,
    )
    if proc.returncode != 0:
        lines = proc.stderr.strip().splitlines() or [f"exit status {proc.returncode}"]
        raise RuntimeError(lines[-1])
    return json.loads(proc.stdout.strip().splitlines()[-1])


def _fairseq_best(model, tgt_dict, sentences, pad: int) -> list[tuple[list[int], float]]:
    from fairseq.sequence_generator import SequenceGenerator

    generator = SequenceGenerator(
        [model], tgt_dict, beam_size=PROBE_BEAM, max_len_a=0, max_len_b=_MAX_LEN_B
    )
    width = max(len(s) for s in sentences)
    src = torch.full((len(sentences), width), pad, dtype=torch.long)
    for i, s in enumerate(sentences):  # left-padded, as fairseq's translation task pads
        src[i, width - len(s) :] = s
    lengths = torch.tensor([len(s) for s in sentences])
    with torch.inference_mode():
        hyps = generator.generate(
            [model], {"net_input": {"src_tokens": src, "src_lengths": lengths}}
        )
    eos = tgt_dict.eos()
    return [([int(t) for t in h[0]["tokens"] if t != eos], float(h[0]["score"])) for h in hyps]


def _fairseq_score(model, src: torch.Tensor, hyp: list[int], eos: int, pad: int) -> float:
    """fairseq's beam score (mean log-probability, length penalty 1) of ``hyp`` + EOS."""
    target = torch.tensor([hyp + [eos]])
    prev = torch.tensor([[eos] + hyp])
    with torch.inference_mode():
        out = model(src.unsqueeze(0), torch.tensor([len(src)]), prev)
        lprobs = model.get_normalized_probs(out, log_probs=True)[0].float()
    picked = lprobs.gather(-1, target[0].unsqueeze(-1)).squeeze(-1)
    return float(picked.sum() / len(picked))


def prove_translations(folder: str, model, task, int8: str | None) -> float:
    """Translate the probe sentences with the export in ``folder`` (complete: config, manifest,
    ``translate.py``) and with fairseq; returns the share of equal best hypotheses (1.0 for a
    float32 export, which must agree or raises ``ExportError``)."""
    from lightcompress.deploy.onnx_graphs import ExportError

    src_dict, tgt_dict = task.source_dictionary, task.target_dictionary
    sentences = probe_sentences(src_dict, model.max_positions()[0])
    try:  # (every token scored, as fairseq does, also where the export ships a shortlist)
        got = _run_export(
            folder,
            [s.tolist() for s in sentences],
            beam=PROBE_BEAM,
            max_len_a=0.0,
            max_len_b=_MAX_LEN_B,
            batch_size=len(sentences),
            shortlist=False,
        )
    except (RuntimeError, OSError, ValueError, subprocess.TimeoutExpired) as exc:
        detail = " ".join(str(exc).split())[:300]
        raise ExportError(f"the export does not run with its translate.py ({detail})") from None
    ref = _fairseq_best(model, tgt_dict, sentences, src_dict.pad())
    same = sum(g == r for g, (r, _score) in zip(got, ref))
    if int8:
        return same / len(sentences)
    for i, (g, (r, best)) in enumerate(zip(got, ref)):
        if g == r:
            continue
        score = _fairseq_score(model, sentences[i], g, tgt_dict.eos(), tgt_dict.pad())
        if not abs(score - best) <= _TIE:  # (NaN-aware: a NaN score is never a tie)
            raise ExportError(
                f"the export does not translate like the model: probe sentence {i + 1} gives "
                f"{len(g)} tokens scored {score:.4f} by the model, fairseq's best has {len(r)} "
                f"tokens scored {best:.4f}"
            )
    return 1.0
