"""Peak resident memory of translating with one model, in a fresh process per model.

What a user's translation process holds: ``measure_speed`` writes each model (a fairseq model as
its configuration and float32 weights, as a checkpoint holds them, quantized in the child for
int8; a CTranslate2 model or an ONNX export as its directory) and the timing
sentences into a work directory, and starts ``python lab/measure/speed_memory.py JOB.json``
for it (the lab's ``measure_speed --memory``). The child imports only what its engine needs (torch, fairseq and the plugin, or only
ctranslate2, or numpy + onnxruntime through the export's ``translate.py``: it runs as a script,
not through the package),
notes its resident size (``VmRSS``) as the *baseline*, loads the model, translates every
sentence once (batch 1, the timing's generation settings) and prints one JSON line:
``{"baseline_kib", "peak_kib"}``, ``peak_kib`` being the process's peak resident size
(``VmHWM``: model loading and translation included).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from argparse import Namespace

__all__ = ["measure_peak_rss", "write_job"]


def _status_kib(field: str) -> int:
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith(field + ":"):
                return int(line.split()[1])
    raise RuntimeError(f"no {field} in /proc/self/status")


def write_job(workdir: str, index: int, candidate, sentences, gen) -> str:
    """Write what the child needs for ``candidate`` into ``workdir``; returns the job file."""
    import torch

    job = {
        "engine": candidate.engine,
        "threads": torch.get_num_threads(),
        "gen": {
            k: getattr(gen, k) for k in ("beam", "lenpen", "min_len", "max_len_a", "max_len_b")
        },
        "sentences": os.path.join(workdir, "sentences.pt"),
    }
    if not os.path.exists(job["sentences"]):
        torch.save([s.clone() for s in sentences], job["sentences"])
    if candidate.engine == "ctranslate2":
        job["model_dir"] = candidate.runner.model_dir
        job["compute_type"] = candidate.runner.compute_type
        # the child imports nothing but ctranslate2: the inputs go as plain lists
        job["inputs"] = candidate.runner.prepare(sentences, gen)
    elif candidate.engine == "onnxruntime":
        # the child imports numpy and onnxruntime (the export's own translate.py), no torch
        job["model_dir"] = candidate.runner.model_dir
        job["inputs"] = [s.tolist() for s in sentences]
        job["shortlist"] = bool(candidate.shortlist)
    else:
        # what a checkpoint holds: the configuration and float32 weights (int8: quantized in
        # the child, as a user would after loading)
        job["model"] = os.path.join(workdir, f"{index}-model.pt")
        job["precision"] = candidate.precision
        job["shortlist"] = candidate.shortlist
        model = candidate.float_model if candidate.float_model is not None else candidate.model
        torch.save(
            {
                "args": candidate.model_args,
                "model": model.state_dict(),
                "src_dict": candidate.task.source_dictionary,
                "tgt_dict": candidate.task.target_dictionary,
            },
            job["model"],
        )
    path = os.path.join(workdir, f"{index}-job.json")
    with open(path, "w") as f:
        json.dump(job, f)
    return path


def measure_peak_rss(job_path: str, timeout: float = 600) -> dict:
    """Run the child for ``job_path``; returns ``{"baseline_kib", "peak_kib"}``."""
    env = dict(os.environ, PYTHONWARNINGS="ignore")
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    env["PYTHONPATH"] = os.pathsep.join(p for p in (root, env.get("PYTHONPATH", "")) if p)
    proc = subprocess.run(
        [sys.executable, os.path.abspath(__file__), job_path],  # a script: no package import
        capture_output=True,
        text=True,
        env=env,
        timeout=timeout,
        check=False,
    )
    if proc.returncode != 0:
        tail = " ".join(proc.stderr.strip().splitlines()[-1:])
        raise RuntimeError(f"memory measurement failed (exit {proc.returncode}): {tail}")
    return json.loads(proc.stdout.strip().splitlines()[-1])


def _child(job_path: str) -> dict:
    with open(job_path) as f:
        job = json.load(f)
    gen = Namespace(**job["gen"])
    if job["engine"] == "ctranslate2":
        import ctranslate2

        baseline = _status_kib("VmRSS")
        translator = ctranslate2.Translator(
            job["model_dir"],
            device="cpu",
            compute_type=job["compute_type"],
            intra_threads=job["threads"],
            inter_threads=1,
        )
        for tokens, options in job["inputs"]:
            translator.translate_batch(tokens, **options)
    elif job["engine"] == "onnxruntime":
        import importlib.util

        import numpy as np

        baseline = _status_kib("VmRSS")
        path = os.path.join(job["model_dir"], "translate.py")  # the export's runtime
        spec = importlib.util.spec_from_file_location("onnx_export_runtime", path)
        runtime = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(runtime)
        generator = runtime.OnnxGenerator(
            job["model_dir"],
            beam_size=gen.beam,
            len_penalty=gen.lenpen,
            min_len=gen.min_len,
            max_len_a=gen.max_len_a,
            max_len_b=gen.max_len_b,
            threads=job["threads"],
            shortlist=job.get("shortlist", False),
        )
        for s in job["inputs"]:
            generator.generate(np.array([s], dtype=np.int64), np.array([len(s)]))
    else:
        import torch
        from fairseq.sequence_generator import SequenceGenerator

        import lightcompress.plugin  # noqa: F401  (plugin modules for unpickling)

        torch.set_num_threads(job["threads"])
        baseline = _status_kib("VmRSS")

        from lightcompress.build import build_model_without_data
        from lightcompress.deploy.quantize import quantize_model_int8

        saved = torch.load(job["model"], weights_only=False)  # written by this package
        tgt_dict = saved["tgt_dict"]
        model = build_model_without_data(saved["args"], saved["src_dict"], tgt_dict)
        model.load_state_dict(saved["model"])
        del saved
        model.eval()
        if job["precision"] in ("int8", "int8-large"):
            from lightcompress.deploy.quantize import LARGE_MAP_ELEMENTS

            large = LARGE_MAP_ELEMENTS if job["precision"] == "int8-large" else 0
            model = quantize_model_int8(model, inplace=True, min_weight_elements=large)
        settings = {
            "beam_size": gen.beam,
            "len_penalty": gen.lenpen,
            "min_len": gen.min_len,
            "max_len_a": gen.max_len_a,
            "max_len_b": gen.max_len_b,
        }
        if job["engine"] == "lightcompress":
            from lightcompress.deploy.generator import FastGenerator
            from lightcompress.deploy.shortlist import load_shortlist

            if job.get("shortlist"):
                src_dict = model.encoder.dictionary
                settings["shortlist"] = load_shortlist(job["shortlist"], src_dict, tgt_dict)
            fast = FastGenerator(model, tgt_dict, **settings)
        else:
            generator = SequenceGenerator([model], tgt_dict, **settings)
        with torch.inference_mode():
            for s in torch.load(job["sentences"]):
                lengths = torch.tensor([s.numel()])
                if job["engine"] == "lightcompress":
                    fast.generate(s[None], lengths)
                else:
                    sample = {"net_input": {"src_tokens": s[None], "src_lengths": lengths}}
                    generator.generate([model], sample)
    # VmHWM, not getrusage's ru_maxrss: Linux carries ru_maxrss over exec, so a child of a
    # large parent would report the parent's size
    peak = _status_kib("VmHWM")
    return {"baseline_kib": baseline, "peak_kib": peak}


if __name__ == "__main__":
    import logging
    import warnings

    logging.disable(logging.WARNING)
    warnings.filterwarnings("ignore")
    print(json.dumps(_child(sys.argv[1])))
