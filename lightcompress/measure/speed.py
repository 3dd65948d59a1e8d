"""Translation speed (tokens/s) on the papers' CPU protocol, several models side by side.

Protocol (Hypoformer appendix A.4, LightFormer section 4.3), all settable:

- 50 source sentences of the average length (``--src-len``: 23 for IWSLT-style data, the
  default; 30 for WMT), batch size 1, one CPU thread (``--threads``), beam 5 (``--beam``),
  ``--lenpen`` as given;
- 10 timed runs over those sentences (``--runs``) after ``--warmup`` untimed runs;
- the fastest and the slowest 10 % of runs dropped (``--trim``), the mean of the rest reported;
- tokens/s = generated target tokens / wall time of the run. **The EOS of each hypothesis is not
  counted** (only the best hypothesis of the beam counts). Source encoding, beam search and the
  output projection are all inside the timed region; reading data is not.

Decoding goes through fairseq's own ``SequenceGenerator`` built by ``task.build_generator`` and
``task.inference_step`` (what ``fairseq-generate`` runs), for fairseq's Transformers and every
plugin architecture alike.

Sentences: with ``--data DIR`` the ``--num-sentences`` sentences of ``--subset`` whose source
length (without EOS) is closest to ``--src-len`` (ties: lower index first; deterministic);
without data, random word ids of exactly ``--src-len`` tokens (+ EOS) from ``--seed``.

Output length: ``--min-len L --max-len L`` forces every hypothesis to L tokens (+ EOS), mapped
to SequenceGenerator's ``min_len=L, max_len_a=0, max_len_b=L``, so that models do equal work
(needed for untrained models, which otherwise stop at arbitrary lengths). When models with random
weights are measured and no length is given, the output length is forced to ``--src-len``.

Models (interleaved: A B C A B C ... one run of each per round):

- ``--path [LABEL=]a.pt,[LABEL=]b.pt`` with ``--data DIR`` (trained checkpoints);
- ``--arch SPEC,SPEC,...`` with ``--vocab-size N`` (random weights, joined dictionary of N
  entries, ``--share-all-embeddings`` unless ``--no-share-all-embeddings``; with ``--data`` the
  data's dictionary is used instead). ``SPEC`` is ``[LABEL=]ARCH[:--flag[=value]]...``, e.g.
  ``12-2=transformer_iwslt_de_en:--encoder-layers=12:--decoder-layers=2`` (see
  :class:`lightcompress.measure.params.ModelSpec`).

``--quantize int8`` measures int8 versions (``quantize_model_int8``); ``--compare-int8`` measures
each model in float32 and int8. ``--bleu`` (needs ``--data``) translates the whole ``--subset``
with the same beam and length penalty (batches of ``--batch-size``; forced lengths are NOT
applied) and reports sacreBLEU of the ``--post-process``-ed (e.g. BPE-removed) text; the table is
followed by sacreBLEU's signature (``BLEU: sacreBLEU nrefs:1|case:mixed|...``).
Engines, size, memory: ``--fast`` times every model also on lightcompress's fast path
(:class:`lightcompress.deploy.generator.FastGenerator`: fairseq's search and results, a lean
decoder step over the model's own, compressed modules). ``--ct2`` exports every dense model (fairseq's Transformers, dense
plugin architectures; :mod:`lightcompress.deploy.ct2`) to CTranslate2 and times it in float32
and int8 (int8 weights on disk, CTranslate2's int8 GEMMs) next to the fairseq rows, on the same
sentences with the same beam, length penalty and output lengths (:mod:`lightcompress.measure.engines`);
compressed models get a ``note:`` line instead (CTranslate2 would store them dense). ``Size`` is
the model's weights as stored (fairseq: ``torch.save(state_dict())``, shared tensors once;
CTranslate2: its model directory). ``--memory`` adds the peak resident memory of a fresh process
per model that imports only its engine, loads the model and translates the timing sentences once
(:mod:`lightcompress.measure.memory`). ``--onnx`` exports every model that
:mod:`lightcompress.deploy.onnx_export` can express (fairseq's Transformer, LightFormer,
Hypoformer, Smartformer, Subformer; compressed weights kept) and times it on ONNX Runtime
(:class:`lightcompress.deploy.onnx_runtime.OnnxGenerator`, engine ``onnxruntime``) in float32,
and in ONNX Runtime's int8 with ``--int8-large`` (the large maps) / ``--compare-int8`` (every
map); its size is the export directory.

``--json OUT`` writes every raw run, the protocol, date, CPU model and library versions (the
file is written atomically).

Bad input (a value out of range, a missing, damaged or foreign checkpoint, an architecture
fairseq does not know, a ``--json`` path that cannot be written) ends the command with one line
on stderr and exit status 2, and everything that needs no model, the output path included, is
checked before any model is loaded or timed.
"""

from __future__ import annotations

import argparse
import datetime
import json
import math
import os
import platform
import sys
import time
import warnings
from argparse import Namespace
from collections.abc import Sequence
from dataclasses import dataclass, field

import torch

from lightcompress import cli
from lightcompress.checkpoint import load_checkpoint  # (re-exported: its old home)
from lightcompress.errors import LightcompressError, one_line
from lightcompress.measure.timing import (
    format_table,
    human_count,
    interleaved_schedule,
    summarize_runs,
    trim_count,
)

__all__ = [
    "Candidate",
    "SpeedError",
    "bleu_lines",
    "check_args",
    "check_output_file",
    "cpu_model",
    "load_candidates",
    "load_checkpoint",
    "main",
    "measure",
    "pick_sentences",
    "random_sentences",
    "sacrebleu_of",
    "time_run",
    "write_json",
]

PROG = "measure_speed"
IWSLT_AVG_LEN = 23
WMT_AVG_LEN = 30


class SpeedError(LightcompressError, ValueError):
    """A user error: reported as one line, exit code 2."""


@dataclass
class Candidate:
    """One model under measurement."""

    label: str
    source: str  # checkpoint path or arch spec
    model: torch.nn.Module
    task: object
    params: int
    precision: str = "float32"
    random_weights: bool = False
    args: list = field(default_factory=list)
    engine: str = "fairseq"
    runner: object = None  # engines other than fairseq's generator (lightcompress.measure.engines)
    model_args: object = None  # the model configuration (args / cfg.model)
    size_bytes: int | None = None
    float_model: torch.nn.Module | None = None  # the float32 model an int8 one was made from


# --------------------------------------------------------------------------------------------
# models
# --------------------------------------------------------------------------------------------


def _split_label(item: str) -> tuple[str | None, str]:
    if "=" in item:
        label, rest = item.split("=", 1)
        if label and "/" not in label:
            return label, rest
    return None, item


def _build_random(spec, vocab_size: int | None, data: str | None, share: bool):
    from lightcompress.measure import params as P

    share = share and spec.share_all_embeddings
    if data:
        from fairseq import tasks

        args = P.parse_model_args(spec.arch, P._with_sharing(spec.args, share), data=data)
        task = tasks.setup_task(args)
        model = task.build_model(args)
        model.eval()
        return model, task, args
    if vocab_size is None:
        raise SpeedError("--arch without --data needs --vocab-size")
    model, task, args = P.build_model_without_data(
        spec.arch, vocab_size, spec.args, share, return_task=True
    )
    return model, task, args


def load_candidates(
    paths: Sequence[str] = (),
    archs: Sequence[str] = (),
    data: str | None = None,
    vocab_size: int | None = None,
    share_all_embeddings: bool = True,
    seed: int = 1,
) -> list[Candidate]:
    """Load checkpoints (``[LABEL=]path``) and build random-weight models (model specs)."""
    from lightcompress.measure.params import ParamsError, count_parameters, parse_model_specs

    out = []
    for item in paths:
        label, path = _split_label(item)
        model, task, model_args = load_checkpoint(path, data)
        if label is None:
            stem = os.path.splitext(os.path.basename(path))[0]
            label = f"{os.path.basename(os.path.dirname(os.path.abspath(path)))}/{stem}"
        out.append(
            Candidate(label, path, model, task, count_parameters(model)["total"],
                      model_args=model_args)
        )  # fmt: skip
    if archs:
        try:
            specs = parse_model_specs(list(archs))
        except ParamsError as exc:
            raise SpeedError(str(exc)) from None
        for spec in specs:
            torch.manual_seed(seed)
            try:
                model, task, model_args = _build_random(
                    spec, vocab_size, data, share_all_embeddings
                )
            except ParamsError as exc:
                raise SpeedError(str(exc)) from None
            out.append(
                Candidate(
                    spec.name,
                    spec.arch + "".join(f" {a}" for a in spec.args),
                    model,
                    task,
                    count_parameters(model)["total"],
                    random_weights=True,
                    args=list(spec.args),
                    model_args=model_args,
                )
            )
    if not out:
        raise SpeedError("nothing to measure: give --path and/or --arch")
    labels = [c.label for c in out]
    if len(set(labels)) != len(labels):
        raise SpeedError(f"labels must be unique, got {labels} (use LABEL=... to name models)")
    return out


def with_int8(
    candidates: Sequence[Candidate], keep_float: bool, variants: Sequence[str] = ("int8",)
) -> list[Candidate]:
    """int8 copies of ``candidates`` (after each float one when ``keep_float``), one per
    variant: ``int8`` (every linear map) or ``int8-large`` (only maps with at least
    :data:`~lightcompress.deploy.quantize.LARGE_MAP_ELEMENTS` weights)."""
    from lightcompress.deploy.quantize import LARGE_MAP_ELEMENTS, quantize_model_int8

    out = []
    for c in candidates:
        if keep_float:
            out.append(c)
        for variant in variants:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore", UserWarning)  # torch's qint8 deprecation notice
                warnings.simplefilter("ignore", DeprecationWarning)
                q = quantize_model_int8(
                    c.model,
                    min_weight_elements=LARGE_MAP_ELEMENTS if variant == "int8-large" else 0,
                )
            out.append(
                Candidate(c.label, c.source, q, c.task, c.params, variant, c.random_weights,
                          c.args, model_args=c.model_args, float_model=c.model)
            )  # fmt: skip
    return out


def _with_exports(candidates, workdir, engine, name, precisions, export, make_runner, errors,
                  log=None, prefix=""):  # fmt: skip
    """For every float32 fairseq candidate, one candidate per precision of ``engine``:
    ``export(candidate, target, precision)`` writes it into ``workdir``, ``make_runner(
    candidate, target, precision)`` times it. An export refused with one of ``errors`` gives
    a note (and no candidates of that model). Returns the new candidates and the notes."""
    os.makedirs(workdir, exist_ok=True)
    out, notes = [], []
    for i, c in enumerate(candidates):
        if c.engine != "fairseq" or c.precision != "float32":
            continue
        for precision in precisions:
            target = os.path.join(workdir, f"{i}-{prefix}{precision}")
            try:
                export(c, target, precision)
            except errors as exc:
                notes.append(f"{c.label}: no {name} export ({exc})")
                break
            if log:
                log(f"exported {c.label} to {name} ({precision}): {target}")
            out.append(
                Candidate(c.label, target, None, c.task, c.params, precision, c.random_weights,
                          c.args, engine=engine, runner=make_runner(c, target, precision),
                          model_args=c.model_args, size_bytes=directory_bytes(target))
            )  # fmt: skip
    return out, notes


def with_ct2(
    candidates: Sequence[Candidate], workdir: str, threads: int, log=None
) -> tuple[list[Candidate], list[str]]:
    """CTranslate2 float32 and int8 candidates exported from every dense float32 fairseq
    candidate (:func:`lightcompress.deploy.ct2.export_model`, into ``workdir``; the int8 model
    is exported with int8 weights). Returns the new candidates and one note per model that
    could not be exported (a compressed one: CTranslate2 would have to store it dense)."""
    from lightcompress.deploy.ct2 import ExportError, export_model
    from lightcompress.measure.engines import CT2Runner

    def export(c, target, precision):
        export_model(c.model, c.task, c.model_args, target, precision)

    def runner(c, target, precision):
        return CT2Runner(
            target, precision, threads, c.task.source_dictionary, c.task.target_dictionary,
            c.model.max_decoder_positions(), c.model.max_positions(),
        )  # fmt: skip

    return _with_exports(candidates, workdir, "ctranslate2", "CTranslate2",
                         ("float32", "int8"), export, runner, ExportError, log)  # fmt: skip


def with_onnx(
    candidates: Sequence[Candidate],
    workdir: str,
    threads: int,
    variants: Sequence[str],
    log=None,
) -> tuple[list[Candidate], list[str]]:
    """ONNX Runtime candidates (:mod:`lightcompress.deploy.onnx_export`, into ``workdir``) of
    every float32 fairseq candidate: float32, and ``int8`` (every map) / ``int8-large`` (the
    maps of at least 2^17 weights) when in ``variants``. Returns the new candidates and one
    note per model that could not be exported."""
    from lightcompress.deploy.onnx_export import ExportError, export_onnx
    from lightcompress.measure.engines import OnnxRunner

    def export(c, target, precision):
        int8 = {"float32": None, "int8": "all", "int8-large": "large"}[precision]
        export_onnx(c.model, c.task, target, int8=int8)

    def runner(c, target, precision):
        return OnnxRunner(target, threads, c.task.source_dictionary.pad(), c.model.max_positions())

    return _with_exports(candidates, workdir, "onnxruntime", "ONNX", ("float32", *variants),
                         export, runner, ExportError, log, prefix="onnx-")  # fmt: skip


def with_fast(candidates: Sequence[Candidate], gen_args: Namespace) -> list[Candidate]:
    """After each fairseq candidate (float32 or int8), the same model on lightcompress's fast
    path (:class:`lightcompress.deploy.generator.FastGenerator`)."""
    from lightcompress.measure.engines import FastRunner

    out = []
    for c in candidates:
        out.append(c)
        if c.engine == "fairseq":
            out.append(
                Candidate(c.label, c.source, c.model, c.task, c.params, c.precision,
                          c.random_weights, c.args, engine="lightcompress",
                          runner=FastRunner(c.model, c.task, gen_args), model_args=c.model_args,
                          float_model=c.float_model)
            )  # fmt: skip
    return out


def directory_bytes(path: str) -> int:
    """Total size of the files under ``path``."""
    return sum(
        os.path.getsize(os.path.join(root, f))
        for root, _dirs, files in os.walk(path)
        for f in files
    )


def state_dict_bytes(model: torch.nn.Module) -> int:
    """Bytes of the model's weights as ``torch.save`` stores them: its state dict with a module
    that several parents share saved once and a tensor that several modules share stored once
    (layer sharing); int8 models store int8 weights."""
    import io

    state: dict = {}
    for prefix, module in model.named_modules():  # a module shared by several parents once
        module._save_to_state_dict(state, prefix + "." if prefix else "", keep_vars=False)
    buffer = io.BytesIO()
    torch.save(state, buffer)
    return buffer.tell()


# --------------------------------------------------------------------------------------------
# sentences
# --------------------------------------------------------------------------------------------


def pick_sentences(task, subset: str, n: int, src_len: int) -> list[torch.Tensor]:
    """The ``n`` source sentences of ``subset`` with length (no EOS) closest to ``src_len``."""
    try:
        task.load_dataset(subset)
    except FileNotFoundError as exc:
        raise SpeedError(f"cannot load subset {subset!r}: {exc}") from None
    ds = task.dataset(subset)
    src = getattr(ds, "src", None)
    if src is None or len(ds) == 0:
        raise SpeedError(f"subset {subset!r} has no source sentences")
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


def _samples(sentences: Sequence[torch.Tensor], batch_size: int = 1, pad: int = 1) -> list[dict]:
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


# --------------------------------------------------------------------------------------------
# reporting
# --------------------------------------------------------------------------------------------


def cpu_model() -> str:
    """The CPU model name from /proc/cpuinfo (or ``platform.processor()``)."""
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.lower().startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine() or "unknown"


def _environment() -> dict:
    import fairseq

    return {
        "date": datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds"),
        "cpu": cpu_model(),
        "cpu_count": os.cpu_count(),
        "torch": torch.__version__,
        "fairseq": getattr(fairseq, "__version__", "unknown"),
        "python": platform.python_version(),
        "torch_threads": torch.get_num_threads(),
        "quantized_engine": torch.backends.quantized.engine,
    }


def format_results(records: Sequence[dict], bleu: bool = False) -> str:
    """The side-by-side table."""
    memory = any("peak_rss_kib" in r for r in records)
    headers = ["Model", "Engine", "Precision", "Params", "Size"]
    if memory:
        headers += ["Peak RSS", "+Model"]
    headers += ["Tokens/s", "Std", "Kept min-max", "Speed"]
    if bleu:
        headers.append("BLEU")
    rows = []
    for r in records:
        row = [
            r["label"],
            r.get("engine", "fairseq"),
            r["precision"],
            human_count(r["params"], 2),
            _mib(r.get("size_bytes")),
        ]
        if memory:
            peak, base = r.get("peak_rss_kib"), r.get("baseline_rss_kib")
            row += [_mib(peak * 1024 if peak else None),
                    _mib((peak - base) * 1024 if peak and base else None)]  # fmt: skip
        row += [
            f"{r['tokens_per_s']:.1f}",
            f"{r['tokens_per_s_std']:.1f}",
            f"{r['tokens_per_s_min']:.1f}-{r['tokens_per_s_max']:.1f}",
            f"{r['speed_ratio']:.2f}x",
        ]
        if bleu:
            row.append(f"{r['bleu']:.2f}" if r.get("bleu") is not None else "-")
        rows.append(row)
    return format_table(headers, rows, align="lll" + "r" * (len(headers) - 3))


def _mib(n: float | None) -> str:
    return "-" if n is None else f"{n / 2**20:.1f}M" if n >= 2**20 else f"{n / 1024:.0f}K"


def _protocol_line(p: dict) -> str:
    length = (
        f"output forced to {p['min_len']} tokens"
        if p["min_len"] == p["max_len_b"] and p["max_len_a"] == 0
        else f"output length free (max {p['max_len_a']}*src+{p['max_len_b']}, min {p['min_len']})"
    )
    return (
        f"{p['num_sentences']} sentences (source length {p['mean_src_len']:.1f} on average, "
        f"target {p['src_len']}; {p['sentences_from']}), batch {p['batch_size']}, "
        f"beam {p['beam']}, "
        f"lenpen {p['lenpen']}, {p['threads']} thread(s), {p['runs']} runs after "
        f"{p['warmup']} warm-up, {p['dropped_each_end']} fastest + "
        f"{p['dropped_each_end']} slowest dropped; {length}. "
        "Tokens/s counts generated target tokens EXCLUDING EOS (mean of kept runs; Std and "
        "min-max over kept runs; Speed relative to the first row)."
    )


# --------------------------------------------------------------------------------------------
# command line
# --------------------------------------------------------------------------------------------


def _arg_parser() -> argparse.ArgumentParser:
    p = cli.OneLineParser(
        prog=PROG,
        description="Translation speed (tokens/s) of fairseq models on the papers' CPU "
        "protocol, side by side. See the module docstring of lightcompress.measure.speed.",
    )
    m = p.add_argument_group("models")
    m.add_argument(
        "--path",
        action="append",
        default=[],
        help="comma-separated checkpoints, each [LABEL=]PATH (needs --data)",
    )
    m.add_argument(
        "--arch",
        action="append",
        default=[],
        help="comma-separated random-weight model specs "
        "[LABEL=]ARCH[:--flag[=value]]... (needs --vocab-size or --data)",
    )
    m.add_argument(
        "--vocab-size", type=int, help="joined dictionary size for --arch without --data"
    )
    m.add_argument(
        "--no-share-all-embeddings",
        dest="share_all_embeddings",
        action="store_false",
        help="--arch models: do not add --share-all-embeddings",
    )
    m.add_argument("--user-dir", help="an extra fairseq --user-dir to import")
    d = p.add_argument_group("sentences")
    d.add_argument("--data", help="fairseq data-bin directory (dictionaries, --subset)")
    d.add_argument("--subset", default="test", help="split to take sentences from (default test)")
    d.add_argument("--num-sentences", type=int, default=50, help="default 50")
    d.add_argument(
        "--src-len",
        type=int,
        default=IWSLT_AVG_LEN,
        help=f"average source length: {IWSLT_AVG_LEN} IWSLT (default), {WMT_AVG_LEN} WMT",
    )
    d.add_argument("--seed", type=int, default=1, help="random sentences and random weights")
    g = p.add_argument_group("generation")
    g.add_argument("--beam", type=int, default=5)
    g.add_argument("--lenpen", type=float, default=1.0)
    g.add_argument("--min-len", type=int, help="force at least this many output tokens")
    g.add_argument("--max-len", type=int, help="at most this many output tokens (max_len_a=0)")
    g.add_argument(
        "--max-len-a", type=float, default=0.0, help="fairseq max_len_a when --max-len is not given"
    )
    g.add_argument(
        "--max-len-b", type=int, default=200, help="fairseq max_len_b when --max-len is not given"
    )
    t = p.add_argument_group("timing")
    t.add_argument(
        "--timing-batch-size",
        type=int,
        default=1,
        help="sentences per batch in the timed runs (default 1, the papers' protocol; "
        "consecutive sentences, left-padded)",
    )
    t.add_argument("--threads", type=int, default=1, help="torch CPU threads (default 1)")
    t.add_argument("--runs", type=int, default=10, help="timed runs per model (default 10)")
    t.add_argument("--warmup", type=int, default=1, help="untimed runs per model first (default 1)")
    t.add_argument(
        "--trim",
        type=float,
        default=0.1,
        help="fraction of fastest and of slowest runs dropped (default 0.1)",
    )
    q = p.add_argument_group("int8 and BLEU")
    q.add_argument(
        "--quantize",
        choices=["none", "int8", "int8-large"],
        default="none",
        help="measure dynamically int8-quantized models (int8-large: only the maps with at "
        "least 2^17 weights, e.g. the output projection; small factors stay float32)",
    )
    q.add_argument(
        "--int8-large",
        action="store_true",
        help="also measure each model with only its large maps in int8 (see --quantize)",
    )
    q.add_argument(
        "--compare-int8", action="store_true", help="measure each model in float32 and int8"
    )
    q.add_argument(
        "--bleu", action="store_true", help="also translate all of --subset and report sacreBLEU"
    )
    q.add_argument(
        "--batch-size", type=int, default=32, help="batch size of the --bleu translation"
    )
    q.add_argument(
        "--post-process",
        "--remove-bpe",
        dest="post_process",
        nargs="?",
        const="@@ ",
        default=None,
        help="fairseq post-processing before BLEU (e.g. subword_nmt, sentencepiece)",
    )
    q.add_argument("--bleu-tokenize", default="13a", help="sacreBLEU tokenizer (default 13a)")
    q.add_argument(
        "--bleu-threads",
        type=int,
        default=None,
        help="torch CPU threads of the --bleu translation (default: --threads); the timed runs "
        "always use --threads",
    )
    e = p.add_argument_group("engines, size and memory")
    e.add_argument(
        "--ct2",
        action="store_true",
        help="also time CTranslate2 exports (float32 and int8) of every dense model "
        "(lightcompress.deploy.ct2); compressed models are listed as not exportable",
    )
    e.add_argument(
        "--fast",
        action="store_true",
        help="also time every model on lightcompress's fast path (lightcompress.deploy: "
        "fairseq's beam search and results, lean decoder step), float32 and int8 alike",
    )
    e.add_argument(
        "--onnx",
        action="store_true",
        help="also time ONNX Runtime exports (lightcompress.deploy.onnx_export: compressed "
        "weights kept, numpy beam search) of every model it can export, in float32 and, with "
        "--int8-large / --compare-int8, in ONNX Runtime's int8 of the large maps / of every map",
    )
    e.add_argument(
        "--ct2-dir",
        help="keep the CTranslate2 exports in this (new or empty) directory instead of a "
        "temporary one",
    )
    e.add_argument(
        "--memory",
        action="store_true",
        help="add the peak resident memory of each model: one fresh process per model (the "
        "engine's imports only) loads it and translates the timing sentences once",
    )
    p.add_argument("--json", dest="json_out", help="write all results and raw runs to this file")
    p.add_argument("--quiet", action="store_true", help="no per-run progress on stderr")
    return p  # fmt: skip


def _split_list(values: Sequence[str]) -> list[str]:
    return [x for v in values for x in v.split(",") if x.strip()]


def check_output_file(path: str, flag: str) -> None:
    """Raise :class:`SpeedError` unless ``path`` can be written: not a directory, in an existing
    writable directory (probed by creating and removing a temporary file there). Called before
    any work, so that a measurement of hours does not end in a failed write."""
    from lightcompress.io import output_error

    message = output_error(path, flag)
    if message:
        raise SpeedError(message)


def check_args(args: argparse.Namespace) -> None:
    """The checks of every command-line value that need no model (:class:`SpeedError`)."""
    for name, value in (("--runs", args.runs), ("--num-sentences", args.num_sentences),
                        ("--src-len", args.src_len), ("--beam", args.beam),
                        ("--threads", args.threads), ("--batch-size", args.batch_size),
                        ("--timing-batch-size", args.timing_batch_size),
                        ("--bleu-threads", 1 if args.bleu_threads is None else args.bleu_threads)
                        ):  # fmt: skip
        if value < 1:
            raise SpeedError(f"{name} must be >= 1, got {value}")
    if args.vocab_size is not None and args.vocab_size < 5:
        raise SpeedError(
            f"--vocab-size must be >= 5 (4 special symbols + a word), got {args.vocab_size}"
        )
    if args.warmup < 0:
        raise SpeedError("--warmup must be >= 0")
    if not 0 <= args.trim < 0.5:
        raise SpeedError("--trim must be in [0, 0.5)")
    for name, value in (("--min-len", args.min_len), ("--max-len", args.max_len)):
        if value is not None and value < 1:
            raise SpeedError(f"{name} must be >= 1, got {value}")
    if args.max_len_a < 0 or args.max_len_b < 1:
        raise SpeedError("--max-len-a must be >= 0 and --max-len-b >= 1")
    if not math.isfinite(args.lenpen):
        raise SpeedError(f"--lenpen must be a number, got {args.lenpen}")
    if args.path and not args.data:
        raise SpeedError("--path needs --data (the checkpoints' data-bin directory)")
    if args.bleu and not args.data:
        raise SpeedError("--bleu needs --data")
    if args.data and not os.path.isdir(args.data):
        raise SpeedError(f"--data is not a directory: {args.data}")
    for item in _split_list(args.path):
        path = _split_label(item)[1]
        if not os.path.exists(path):
            raise SpeedError(f"checkpoint not found: {path}")
        if not os.path.isfile(path):
            raise SpeedError(f"checkpoint {path} is not a file")
    if args.json_out is not None:
        check_output_file(args.json_out, "--json")
    if args.ct2_dir is not None:
        if not args.ct2:
            raise SpeedError("--ct2-dir needs --ct2")
        if os.path.exists(args.ct2_dir) and (
            not os.path.isdir(args.ct2_dir) or os.listdir(args.ct2_dir)
        ):
            raise SpeedError(f"--ct2-dir {args.ct2_dir} must be a new or empty directory")
        parent = os.path.dirname(os.path.abspath(args.ct2_dir))
        if not os.path.isdir(parent) or not os.access(parent, os.W_OK):
            raise SpeedError(f"--ct2-dir {args.ct2_dir}: cannot create it in {parent}")


def run(args: argparse.Namespace) -> dict:
    """Everything the command line does; returns the JSON document.

    Every argument and the ``--json`` output are checked before anything is loaded or timed.
    """
    import tempfile

    check_args(args)
    with tempfile.TemporaryDirectory(prefix="measure_speed.") as workdir:
        return _run(args, workdir)


def _run(args: argparse.Namespace, workdir: str) -> dict:
    if args.user_dir:
        from fairseq import utils

        try:
            utils.import_user_module(Namespace(user_dir=args.user_dir))
        except FileNotFoundError:
            raise SpeedError(f"--user-dir {args.user_dir}: no such directory") from None
        except ImportError as exc:
            raise SpeedError(f"--user-dir {args.user_dir}: {one_line(exc)}") from None
    import lightcompress  # noqa: F401  (plugin architectures)

    torch.set_num_threads(args.threads)
    try:
        torch.set_num_interop_threads(args.threads)
    except RuntimeError:  # already set in this process
        pass

    candidates = load_candidates(
        _split_list(args.path), args.arch, args.data, args.vocab_size,
        args.share_all_embeddings, args.seed,
    )  # fmt: skip
    notes = []
    log = None if args.quiet else (lambda msg: print(msg, file=sys.stderr, flush=True))
    ct2 = []
    if args.ct2:
        ct2_dir = args.ct2_dir or os.path.join(workdir, "ct2")
        ct2, notes = with_ct2(candidates, ct2_dir, args.threads, log)
    if args.onnx:
        onnx_variants = [v for v, on in (("int8-large", args.int8_large),
                                         ("int8", args.compare_int8)) if on]  # fmt: skip
        onnx, onnx_notes = with_onnx(
            candidates, os.path.join(workdir, "onnx"), args.threads, onnx_variants, log
        )
        ct2, notes = onnx + ct2, notes + onnx_notes
    variants = [v for v, on in (("int8", args.compare_int8 or args.quantize == "int8"),
                                ("int8-large", args.int8_large or args.quantize == "int8-large"))
                if on]  # fmt: skip
    if variants:
        keep_float = args.compare_int8 or args.int8_large
        candidates = with_int8(candidates, keep_float=keep_float, variants=variants)
    candidates = candidates + ct2

    first = candidates[0].task
    for c in candidates[1:]:
        if len(c.task.source_dictionary) != len(first.source_dictionary):
            raise SpeedError(
                f"{c.label} has a source dictionary of {len(c.task.source_dictionary)} entries, "
                f"{candidates[0].label} of {len(first.source_dictionary)}: they cannot translate "
                "the same sentences"
            )
    if args.data:
        sentences = pick_sentences(first, args.subset, args.num_sentences, args.src_len)
        sentences_from = f"{args.subset} split of {args.data}"
    else:
        sentences = random_sentences(
            first.source_dictionary, args.num_sentences, args.src_len, args.seed
        )
        sentences_from = "random word ids"

    min_len, max_len_a, max_len_b = 1, args.max_len_a, args.max_len_b
    if args.max_len is None and args.min_len is None and any(c.random_weights for c in candidates):
        min_len, max_len_a, max_len_b = args.src_len, 0, args.src_len
    if args.min_len is not None:
        min_len = args.min_len
    if args.max_len is not None:
        max_len_a, max_len_b = 0, args.max_len
    if max_len_a == 0 and min_len > max_len_b:
        raise SpeedError(f"--min-len {min_len} exceeds the maximum length {max_len_b}")
    gen_args = Namespace(
        beam=args.beam, lenpen=args.lenpen, min_len=min_len, max_len_a=max_len_a,
        max_len_b=max_len_b,
    )  # fmt: skip
    if args.fast:
        candidates = with_fast(candidates, gen_args)
    records = measure(
        candidates,
        _samples(sentences, args.timing_batch_size, first.source_dictionary.pad()),
        gen_args, args.runs, args.warmup, args.trim, log,
        sentences=sentences, batch_size=args.timing_batch_size,
    )  # fmt: skip
    if args.memory:
        from lightcompress.measure.memory import measure_peak_rss, write_job

        for i, (c, rec) in enumerate(zip(candidates, records)):
            try:
                mem = measure_peak_rss(write_job(workdir, i, c, sentences, gen_args))
            except (RuntimeError, OSError) as exc:
                raise SpeedError(f"{c.label} [{c.engine} {c.precision}]: {exc}") from None
            rec["peak_rss_kib"] = mem["peak_kib"]
            rec["baseline_rss_kib"] = mem["baseline_kib"]
            if log:
                log(f"memory {c.label} [{c.engine} {c.precision}]: peak {mem['peak_kib']} KiB")
    protocol = {
        "num_sentences": len(sentences),
        "src_len": args.src_len,
        "mean_src_len": sum(s.numel() - 1 for s in sentences) / len(sentences),
        "sentences_from": sentences_from,
        "batch_size": args.timing_batch_size,
        "beam": args.beam,
        "lenpen": args.lenpen,
        "min_len": min_len,
        "max_len_a": max_len_a,
        "max_len_b": max_len_b,
        "threads": args.threads,
        "runs": args.runs,
        "warmup": args.warmup,
        "trim": args.trim,
        "dropped_each_end": trim_count(args.runs, args.trim),
        "tokens": "generated target tokens of the best hypothesis, EOS excluded",
        "order": "interleaved (A B C A B C ...)",
    }
    if args.bleu:
        bleu_args = Namespace(
            beam=args.beam, lenpen=args.lenpen, max_len_a=args.max_len_a,
            max_len_b=args.max_len_b, min_len=1,
        )  # fmt: skip
        # BLEU is not timed: it may use more threads (set after every timed run has finished)
        torch.set_num_threads(args.bleu_threads or args.threads)
        for c, rec in zip(candidates, records):
            res = sacrebleu_of(
                c, args.subset, bleu_args, args.batch_size, args.post_process, args.bleu_tokenize
            )
            rec["bleu"] = res["bleu"]
            rec["bleu_signature"] = res["bleu_signature"]
            rec["bleu_sentences"] = len(res["hypotheses"])
            rec["hypotheses_sample"] = res["hypotheses"][:3]
        protocol["bleu"] = {
            "subset": args.subset,
            "batch_size": args.batch_size,
            "post_process": args.post_process,
            "tokenize": args.bleu_tokenize,
            "threads": args.bleu_threads or args.threads,
            "note": "same beam and lenpen as the timing; forced output lengths not applied",
        }
    protocol["size"] = (
        "fairseq: bytes of torch.save(state_dict()) (shared tensors once); CTranslate2: the "
        "model directory"
    )
    if args.memory:
        protocol["memory"] = (
            "peak resident size (VmHWM) of a fresh process that imports the engine (torch + "
            "fairseq + lightcompress, or ctranslate2 alone), loads the model and translates the "
            "timing sentences once; +Model: peak minus the process's size after the imports"
        )
    return {"protocol": protocol, "environment": _environment(), "models": records,
            "notes": notes}  # fmt: skip


def bleu_lines(records: Sequence[dict], protocol: dict) -> list[str]:
    """What the BLEU column is: one line per distinct sacreBLEU signature (normally one) with
    the text it scored. Empty without BLEU."""
    sigs = sorted({r["bleu_signature"] for r in records if r.get("bleu_signature")})
    if not sigs:
        return []
    b = protocol.get("bleu", {})
    sentences = "/".join(sorted({str(r.get("bleu_sentences")) for r in records if "bleu" in r}))
    post = repr(b["post_process"]) if b.get("post_process") else "none"
    what = (
        f"on the {b.get('subset', '?')} split ({sentences} sentences, post-process {post}, "
        f"beam {protocol['beam']}, lenpen {protocol['lenpen']}, output length not forced)"
    )
    return [f"BLEU: sacreBLEU {sig} {what}" for sig in sigs]


def write_json(path: str, result: dict) -> None:
    """``result`` as JSON into ``path`` (atomically: a complete file or the old one)."""
    from lightcompress.io import atomic_write

    try:
        with atomic_write(path) as f:
            json.dump(result, f, indent=1)
    except OSError as exc:
        raise SpeedError(f"--json {path}: cannot write ({exc.strerror or exc})") from None


def main(argv: Sequence[str] | None = None) -> int:
    """``measure_speed``: the exit status (errors as one line, status 2)."""
    return cli.run(_main, argv, PROG)


def _main(argv: Sequence[str] | None) -> int:
    args = _arg_parser().parse_args(argv)
    result = run(args)
    print(_protocol_line(result["protocol"]))
    env = result["environment"]
    print(f"CPU: {env['cpu']}; torch {env['torch']}, fairseq {env['fairseq']}")
    print(format_results(result["models"], bleu=args.bleu))
    for note in result.get("notes", []):
        print(f"note: {note}")
    for line in bleu_lines(result["models"], result["protocol"]):
        print(line)
    if args.json_out:
        write_json(args.json_out, result)
        print(f"wrote {args.json_out}")
    return 0


cli_main = cli.entry_point(main, quiet=True)


if __name__ == "__main__":
    cli_main()
