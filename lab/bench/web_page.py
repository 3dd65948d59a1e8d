#!/usr/bin/env python
"""Measure a page of ``lightcompress-export-web`` in headless Chromium against the Python runtime
on the same machine and sentences (issue 57 item 5; docs/deployment.md, "In the browser").

    python lab/bench/web_page.py WEB_DIR --onnx ONNX_DIR --src test.de --ref test.en \\
        [--sentences 200] [--repeat 1] [--json out.json]

- sizes: the page's model files (everything but the engine) and the engine's files, from its
  ``web.json``, next to the anchors (Bergamot's de-en tiny: 23 MB of model files;
  transformers.js' opus-mt de-en in 8 bits: about 106 MB);
- speed: the first ``--sentences`` source lines translated one at a time (batch 1), one thread,
  beam 5 and beam 1, in the page (Chromium, ONNX Runtime Web in its Worker) and by the Python
  runtime (``OnnxTranslator``, ONNX Runtime's CPU build): sentences/s and ms per sentence, the
  best of ``--repeat`` runs after a warm-up;
- quality: every line of ``--src`` translated by the page (its API, batches of 32, beam 5) and by
  the Python runtime; BLEU and chrF of both against ``--ref`` (sacreBLEU) and the share of
  identical lines.

The page is served by Python's static server on 127.0.0.1; Chromium is Debian's
(``/usr/bin/chromium``, or ``LIGHTCOMPRESS_CHROMIUM``), driven by ``web/test/browser.mjs``
(``make web`` first). Prints a Markdown block with the date, machine and commit. Bad input: one
line on stderr, exit status 2.
"""

from __future__ import annotations

import argparse
import datetime
import functools
import http.server
import json
import os
import platform
import subprocess
import sys
import threading
import time

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, REPO)

#: the anchors of issue 57: model files in MB (everything but the engine)
ANCHORS = {
    "Bergamot de-en tiny (Firefox Translations)": 23.0,
    "opus-mt de-en in 8 bits (transformers.js)": 106.0,
}


class BenchError(ValueError):
    pass


class _Quiet(http.server.SimpleHTTPRequestHandler):
    def log_message(self, *args):
        pass


def _serve(folder: str):
    handler = functools.partial(_Quiet, directory=folder)
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server


def _browser(job: dict) -> dict:
    driver = os.path.join(REPO, "web", "test", "browser.mjs")
    if not os.path.isdir(os.path.join(REPO, "web", "node_modules", "playwright-core")):
        raise BenchError("web/node_modules lacks playwright-core: run make web")
    job = {"chromium": os.environ.get("LIGHTCOMPRESS_CHROMIUM", "/usr/bin/chromium"), **job}
    proc = subprocess.run(
        ["node", driver],
        input=json.dumps(job),
        capture_output=True,
        text=True,
        cwd=os.path.join(REPO, "web"),
        check=False,
    )
    if proc.returncode != 0:
        raise BenchError(f"the Chromium driver failed: {proc.stderr.strip()[-300:]}")
    out = json.loads(proc.stdout)
    if out.get("error"):
        raise BenchError(f"the page failed in Chromium: {out['error']}")
    return out


def _machine() -> str:
    cpu = platform.processor() or platform.machine()
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as f:
            cpu = next(line.split(":", 1)[1].strip() for line in f if line.startswith("model name"))
    except (OSError, StopIteration):
        pass
    return f"{cpu}, {os.cpu_count()} cores"


def _commit() -> str:
    proc = subprocess.run(
        ["git", "rev-parse", "--short", "HEAD"],
        capture_output=True,
        text=True,
        cwd=REPO,
        check=False,
    )
    return proc.stdout.strip() or "unknown"


def _chromium_version() -> str:
    exe = os.environ.get("LIGHTCOMPRESS_CHROMIUM", "/usr/bin/chromium")
    proc = subprocess.run([exe, "--version"], capture_output=True, text=True, check=False)
    return proc.stdout.strip() or "unknown"


def measure(
    web_dir: str,
    onnx_dir: str,
    src: list[str],
    ref: list[str] | None,
    sentences: int = 200,
    repeat: int = 1,
    shortlist: bool | None = None,
) -> dict:
    """The measurements of the module notes, as a dict."""
    import sacrebleu

    from lightcompress_runtime import OnnxTranslator

    with open(os.path.join(web_dir, "web.json"), encoding="utf-8") as f:
        web = json.load(f)
    if shortlist is None:
        shortlist = bool(web.get("shortlist"))
    sample = [line for line in src if line.strip()][:sentences]
    server = _serve(web_dir)
    url = f"http://127.0.0.1:{server.server_port}/"
    try:
        page = _browser(
            {
                "url": url,
                "bench": {"lines": sample, "beams": [5, 1], "repeat": repeat},
                "translate": {"lines": src, "options": {"beam": 5}},
            }
        )
    finally:
        server.shutdown()
        server.server_close()
    speed = []
    for row in page["bench"]:
        beam = row["beam"]
        runtime = OnnxTranslator(onnx_dir, beam=beam, batch_size=1, threads=1, shortlist=shortlist)
        runtime.translate(sample[:4])  # (warm-up)
        best = float("inf")
        for _ in range(repeat):
            t0 = time.perf_counter()
            runtime.translate(sample)
            best = min(best, time.perf_counter() - t0)
        page_s = min(row["runs"]) / 1000
        speed.append(
            {
                "beam": beam,
                "sentences": len(sample),
                "page_sent_per_s": len(sample) / page_s,
                "page_ms_per_sent": 1000 * page_s / len(sample),
                "python_sent_per_s": len(sample) / best,
                "python_ms_per_sent": 1000 * best / len(sample),
            }
        )
    python_out = OnnxTranslator(onnx_dir, beam=5, threads=1, shortlist=shortlist).translate(src)
    page_out = page["translate"]["texts"]
    if any(t is None for t in page_out):
        bad = next(i for i, t in enumerate(page_out) if t is None)
        raise BenchError(f"the page refused line {bad + 1}: {page['translate']['errors'][bad]}")
    quality = {
        "sentences": len(src),
        "identical": sum(a == b for a, b in zip(page_out, python_out)),
    }
    if ref is not None:
        bleu, chrf = sacrebleu.BLEU(), sacrebleu.CHRF()
        for name, out in (("page", page_out), ("python", python_out)):
            quality[name] = {
                "bleu": round(bleu.corpus_score(out, [ref]).score, 2),
                "chrf": round(chrf.corpus_score(out, [ref]).score, 2),
            }
        quality["bleu_signature"] = str(bleu.get_signature())
        quality["chrf_signature"] = str(chrf.get_signature())
    return {
        "date": datetime.date.today().isoformat(),
        "machine": _machine(),
        "commit": _commit(),
        "chromium": _chromium_version(),
        "engine": web["engine"],
        "shortlist": shortlist,
        "sizes": web["sizes"],
        "load_ms": page["ready"]["ms"],
        "speed": speed,
        "quality": quality,
    }


def markdown(m: dict) -> str:
    """The measurements as docs/deployment.md's block."""
    mb = lambda n: f"{n / 1e6:.2f} MB"
    lines = [
        f"Measured {m['date']} on {m['machine']}, commit {m['commit']}, {m['chromium']}, "
        f"onnxruntime-web {m['engine']['onnxruntime-web']} (WebAssembly, one thread)"
        + (", shortlist on" if m["shortlist"] else "")
        + ".",
        "",
        "| files | size |",
        "| --- | ---: |",
        f"| the page's model files (everything but the engine) | {mb(m['sizes']['model'])} |",
        *(f"| {name}: model files | {size:.0f} MB |" for name, size in ANCHORS.items()),
        (
            f"| the engine (ONNX Runtime Web, sentencepiece), the same for every model | "
            f"{mb(m['sizes']['engine'])} |"
        ),
        "",
        f"The page loads in {m['load_ms'] / 1000:.1f} s from a local server.",
        "",
        (
            "| beam | page: sentences/s | page: ms/sentence | Python runtime: sentences/s | "
            "Python runtime: ms/sentence |"
        ),
        "| ---: | ---: | ---: | ---: | ---: |",
    ]
    for s in m["speed"]:
        lines.append(
            f"| {s['beam']} | {s['page_sent_per_s']:.1f} | {s['page_ms_per_sent']:.1f} | "
            f"{s['python_sent_per_s']:.1f} | {s['python_ms_per_sent']:.1f} |"
        )
    q = m["quality"]
    lines += ["", f"({m['speed'][0]['sentences']} test sentences, one at a time.)", ""]
    text = f"Of {q['sentences']} test sentences (beam 5), the page's translation is the Python runtime's for {q['identical']}"
    if "page" in q:
        text += (
            f"; BLEU {q['page']['bleu']} (page) and {q['python']['bleu']} (Python runtime), "
            f"chrF {q['page']['chrf']} and {q['python']['chrf']} ({q['bleu_signature']})"
        )
    lines.append(text + ".")
    return "\n".join(lines)


def _lines(path: str) -> list[str]:
    try:
        with open(path, encoding="utf-8") as f:
            return [line.rstrip("\n") for line in f]
    except (OSError, UnicodeDecodeError) as exc:
        raise BenchError(f"cannot read {path}: {exc}") from None


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("web_dir", help="a page of lightcompress-export-web")
    p.add_argument("--onnx", required=True, help="the ONNX export it was made from")
    p.add_argument("--src", required=True, help="test source lines (raw text)")
    p.add_argument("--ref", help="their references (BLEU / chrF)")
    p.add_argument("--sentences", type=int, default=200, help="sentences timed (default 200)")
    p.add_argument("--repeat", type=int, default=1, help="timed runs, the best kept (default 1)")
    p.add_argument("--json", help="also write the measurements as JSON here")
    args = p.parse_args(argv)
    try:
        for path in (args.web_dir, args.onnx):
            if not os.path.isdir(path):
                raise BenchError(f"not a folder: {path}")
        if args.sentences < 1 or args.repeat < 1:
            raise BenchError("--sentences and --repeat must be >= 1")
        src = _lines(args.src)
        ref = _lines(args.ref) if args.ref else None
        if ref is not None and len(ref) != len(src):
            raise BenchError(f"--ref has {len(ref)} lines, --src {len(src)}")
        m = measure(args.web_dir, args.onnx, src, ref, args.sentences, args.repeat)
    except BenchError as exc:
        print(f"web_page.py: error: {exc}", file=sys.stderr)
        return 2
    if args.json:
        with open(args.json, "w", encoding="utf-8") as f:
            json.dump(m, f, indent=1)
    print(markdown(m))
    return 0


if __name__ == "__main__":
    sys.exit(main())
