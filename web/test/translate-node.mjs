// Run a web export's own module (lightcompress.mjs) under Node, for tests/test_web.py.
//
// stdin: one JSON object {dir: the export, engine: "node" | "web", shortlist: true | false | null,
// jobs: [...]}; stdout: {results: [one per job]} or {error, name} (a WebError: its one line).
// - engine "node": onnxruntime-node's sessions, made as the Python runtime makes its own (native
//   ONNX Runtime, all graph optimizations, one thread): the search is checked token for token;
// - engine "web": the export's engine/ (ONNX Runtime Web's WebAssembly build, one thread) and
//   its sessions made from bytes, as the page makes them.
// A job: {mode: "generate", batches: [{src: [[ids]] (left-padded)}], options} -> per batch the
// n-best lists {tokens, score} of BeamSearch.generate; {mode: "translate", lines, options,
// each: true | false} -> translate's texts (each: translateEach's {text} | {error} per line).
import { readFileSync } from "node:fs";
import { readFile } from "node:fs/promises";
import path from "node:path";
import { pathToFileURL } from "node:url";

const job = JSON.parse(readFileSync(0, "utf-8"));
const dir = path.resolve(job.dir);
const url = (...parts) => pathToFileURL(path.join(dir, ...parts)).href;
const { WebTranslator, BeamSearch, WebError } = await import(url("lightcompress.mjs"));
const read = async (name) => new Uint8Array(await readFile(path.join(dir, name)));
let ort;
let session = null;
if (job.engine === "node") {
  ort = (await import("onnxruntime-node")).default;
  const options = { graphOptimizationLevel: "all", intraOpNumThreads: 1, interOpNumThreads: 1, executionMode: "sequential", logSeverityLevel: 3 };
  session = (name) => ort.InferenceSession.create(path.join(dir, name), options);
} else {
  ort = await import(url("engine", "ort.wasm.min.mjs"));
  ort.env.wasm.numThreads = 1;
  ort.env.wasm.wasmPaths = url("engine") + "/";
}
const web = JSON.parse(await readFile(path.join(dir, "web.json"), "utf-8"));
const SentencePieceProcessor = web.tokenizer ? (await import(url("engine", "sentencepiece.mjs"))).SentencePieceProcessor : null;

async function run(t, j) {
  const options = j.options ?? {};
  const t0 = performance.now();
  let out;
  if (j.mode === "generate") {
    const search = new BeamSearch(t.step, options);
    out = [];
    for (const { src } of j.batches) {
      const flat = Int32Array.from(src.flat());
      out.push(await search.generate(flat, src.length, src[0].length));
    }
  } else if (j.each) {
    out = await t.translateEach(j.lines, options);
  } else {
    out = await t.translate(j.lines, options);
  }
  return { out, ms: performance.now() - t0 };
}

try {
  const t = await WebTranslator.load({ ort, SentencePieceProcessor, read, session, shortlist: job.shortlist ?? null });
  const results = [];
  for (const j of job.jobs) results.push(await run(t, j));
  process.stdout.write(JSON.stringify({ results }));
} catch (e) {
  if (!(e instanceof WebError)) throw e;
  process.stdout.write(JSON.stringify({ error: e.message, name: e.name }));
}
