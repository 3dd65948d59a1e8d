// lightcompress in a web page: an export of `lightcompress-export-web` translated in JavaScript.
//
// The search is fairseq's beam search as runtime/lightcompress_runtime/search.py writes it (the same
// candidate selection, finalization, length penalty, min / max length rules, batch shrinking and
// float32 arithmetic), over the same step as runtime/lightcompress_runtime/onnx_step.py: the encoder once
// per batch, one decoder call per step that reorders its self-attention caches, adds the score
// bias and returns each hypothesis' 2 x beam best next tokens; a shortlist restricts the scored
// tokens. Tokenization: the export's sentencepiece model (@sctg/sentencepiece-js, the C++ library
// in WebAssembly) and fairseq's sentencepiece post-processing; an export without a tokenizer takes
// space-separated subword tokens. tests/test_web.py checks it token for token against the Python
// runtime on the tiny fixtures' models (under Node) and in headless Chromium.
//
// One module, three uses:
// - in a page's module Worker (index.html starts this file as one): it loads the export next
//   to it with ONNX Runtime Web (engine/) and answers {type: "translate", id, lines, options};
// - in a page or Node: `await WebTranslator.load({ort, SentencePieceProcessor, read, session})`
//   with the ONNX Runtime and sentencepiece objects given (tests run it with onnxruntime-node);
// - the pieces on their own: BeamSearch (over any step), OnnxStep, Shortlist, leftPadBatches.

export const FORMAT = "lightcompress-web";
export const VERSION = 1;

/** An input or export the page cannot use: one line for the user. */
export class WebError extends Error {
  constructor(message) {
    super(message);
    this.name = "WebError";
  }
}

const f32 = Math.fround;

// ------------------------------------------------------------------------------------- search

/** The 2 x beam best of each row of `vals` ([rows x width], float32 values): fairseq's topk as
 * search.py takes it, `(-vals).argsort(kind="stable")[:want]`, ties to the lower index. */
function bestOfRow(vals, row, width, want, pick) {
  const base = row * width;
  const idx = pick.subarray(0, width);
  for (let i = 0; i < width; i++) idx[i] = i;
  idx.sort((a, b) => {
    const va = vals[base + a];
    const vb = vals[base + b];
    if (va > vb) return -1;
    if (va < vb) return 1;
    return a - b;
  });
  return idx.subarray(0, want);
}

/** fairseq's beam search over a step (search.py's BeamSearch, see the module notes).
 *
 * step: {vocabSize, pad, eos, unk, maxPositions, start(src, bsz, srcLen, beam) -> Promise<{vocab,
 * at}>, step(tokens, stride, t, order, bias, k, kept) -> Promise<{lp: Float32Array [N x k], ids:
 * Int32Array [N x k]}>}. Options as fairseq's --beam, --lenpen, --min-len, --max-len-a,
 * --max-len-b, --unkpen. */
export class BeamSearch {
  constructor(step, { beam = 5, lenpen = 1.0, minLen = 1, maxLenA = 0.0, maxLenB = 200, unkPenalty = 0.0 } = {}) {
    this.step = step;
    this.pad = step.pad;
    this.eos = step.eos;
    this.unk = step.unk;
    this.vocabSize = step.vocabSize;
    this.maxPositions = step.maxPositions;
    this.beamSize = Math.min(beam, this.vocabSize - 1);
    this.lenpen = lenpen;
    this.unkPenalty = unkPenalty;
    this.minLen = minLen;
    this.maxLenA = maxLenA;
    this.maxLenB = maxLenB;
  }

  /** The bias before min_len, between, and at max_len (search.py's _biases). */
  biases() {
    const V = this.vocabSize;
    const normal = new Float32Array(V);
    normal[this.pad] = -Infinity;
    normal[this.unk] = f32(normal[this.unk] - this.unkPenalty);
    const short = Float32Array.from(normal);
    short[this.eos] = -Infinity;
    const end = new Float32Array(V).fill(-Infinity);
    end[this.eos] = normal[this.eos];
    return [short, normal, end];
  }

  /** Translate a batch: src [bsz x srcLen] (Int32Array, left-padded). Returns per sentence the
   * beam finished hypotheses, best first: {tokens: number[] (ending with EOS), score}. */
  async generate(src, bsz, srcLen) {
    const beam = this.beamSize;
    const { eos, pad } = this;
    // (float64 as Python's int(max_len_a * src_len + max_len_b))
    const maxLen = Math.min(Math.trunc(this.maxLenA * srcLen + this.maxLenB), this.maxPositions - 1);
    if (this.minLen > maxLen) throw new WebError(`min_len ${this.minLen} is larger than max_len ${maxLen}`);
    let n = bsz * beam;
    const { vocab, at } = await this.step.start(src, bsz, srcLen, beam);
    const [short, normal, end] = this.biases().map((b) => (at ? Float32Array.from(at, (i) => b[i]) : b));
    const stride = maxLen + 2;
    let tokens = new Int32Array(n * stride).fill(pad);
    for (let i = 0; i < n; i++) tokens[i * stride] = eos;
    let candsToIgnore = new Uint8Array(bsz * beam);
    let ignoring = false;
    let cum = new Float32Array(n);
    const finalized = Array.from({ length: bsz }, () => []);
    const finished = new Array(bsz).fill(false);
    let numRemaining = bsz;
    const candSize = 2 * beam;
    let order = Int32Array.from({ length: n }, (_, i) => i);
    let batchIdxs = null;
    const k = Math.min(candSize, vocab);
    const pick = new Int32Array(beam * k);

    for (let step = 0; step <= maxLen; step++) {
      if (step > 0 && batchIdxs !== null) {
        // finished sentences left the batch: the caches' rows move up
        const moved = new Int32Array(order.length);
        for (let i = 0; i < order.length; i++) {
          const s = Math.floor(i / beam);
          moved[i] = order[i] + (batchIdxs[s] - s) * beam;
        }
        order = moved;
      }
      const bias = step >= maxLen ? end : step < this.minLen ? short : normal;
      const kept = step > 0 ? batchIdxs : null;
      const { lp, ids: topIds } = await this.step.step(tokens, stride, step + 1, order, bias, k, kept);

      // the sentence's 2 x beam best of beam x k (step 0: of its first hypothesis' k)
      const width = step === 0 ? k : beam * k;
      const vals = new Float32Array(bsz * width);
      const valIds = new Int32Array(bsz * width);
      for (let s = 0; s < bsz; s++) {
        if (step === 0) {
          for (let j = 0; j < k; j++) {
            vals[s * width + j] = lp[s * beam * k + j];
            valIds[s * width + j] = topIds[s * beam * k + j];
          }
        } else {
          for (let h = 0; h < beam; h++) {
            const row = s * beam + h;
            for (let j = 0; j < k; j++) {
              vals[s * width + h * k + j] = f32(lp[row * k + j] + cum[row]);
              valIds[s * width + h * k + j] = topIds[row * k + j];
            }
          }
        }
      }
      const want = Math.min(candSize, (step > 0 ? beam : 1) * vocab - 1);
      let candScores = new Float32Array(bsz * want);
      let candIndices = new Int32Array(bsz * want);
      let candBbsz = new Int32Array(bsz * want);
      let anyEos = false;
      for (let s = 0; s < bsz; s++) {
        const best = bestOfRow(vals, s, width, want, pick);
        for (let j = 0; j < want; j++) {
          const p = best[j];
          candScores[s * want + j] = vals[s * width + p];
          candIndices[s * want + j] = valIds[s * width + p];
          candBbsz[s * want + j] = Math.floor(p / k) + s * beam;
          if (valIds[s * width + p] === eos) anyEos = true;
        }
      }

      let activeBbsz, prev;
      if (!ignoring && !anyEos) {
        // the common step: the active hypotheses are the beam best candidates
        batchIdxs = null;
        activeBbsz = new Int32Array(bsz * beam);
        prev = new Int32Array(bsz * beam);
        cum = new Float32Array(bsz * beam);
        for (let s = 0; s < bsz; s++) {
          for (let j = 0; j < beam; j++) {
            activeBbsz[s * beam + j] = candBbsz[s * want + j];
            prev[s * beam + j] = candIndices[s * want + j];
            cum[s * beam + j] = candScores[s * want + j];
          }
        }
      } else {
        let eosMask = new Uint8Array(bsz * want);
        for (let s = 0; s < bsz; s++) {
          for (let j = 0; j < want; j++) {
            const i = s * want + j;
            let m = candIndices[i] === eos && candScores[i] !== -Infinity;
            if (j < beam && candsToIgnore[s * beam + j]) m = false;
            eosMask[i] = m ? 1 : 0;
          }
        }
        let finalizedSents = [];
        const eosBbsz = [];
        const eosScores = [];
        for (let s = 0; s < bsz; s++) {
          for (let j = 0; j < beam; j++) {
            if (eosMask[s * want + j]) {
              eosBbsz.push(candBbsz[s * want + j]);
              eosScores.push(candScores[s * want + j]);
            }
          }
        }
        if (eosBbsz.length) {
          finalizedSents = this.finalize(step, eosBbsz, eosScores, tokens, stride, finalized, finished, beam, maxLen);
          numRemaining -= finalizedSents.length;
        }
        if (numRemaining === 0) break;
        if (finalizedSents.length) {
          const gone = new Set(finalizedSents);
          const keep = [];
          for (let s = 0; s < bsz; s++) if (!gone.has(s)) keep.push(s);
          batchIdxs = Int32Array.from(keep);
          const newBsz = keep.length;
          const rows = (a, width) => {
            const out = new a.constructor(newBsz * width);
            keep.forEach((s, r) => out.set(a.subarray(s * width, (s + 1) * width), r * width));
            return out;
          };
          eosMask = rows(eosMask, want);
          candBbsz = rows(candBbsz, want);
          keep.forEach((s, r) => {
            for (let j = 0; j < want; j++) candBbsz[r * want + j] += (r - s) * beam;
          });
          candScores = rows(candScores, want);
          candIndices = rows(candIndices, want);
          candsToIgnore = rows(candsToIgnore, beam);
          tokens = rows(tokens, beam * stride);
          bsz = newBsz;
        } else {
          batchIdxs = null;
        }
        // the beam best candidates that do not end, in order (fairseq's active hypotheses)
        activeBbsz = new Int32Array(bsz * beam);
        prev = new Int32Array(bsz * beam);
        cum = new Float32Array(bsz * beam);
        const ignore = new Uint8Array(bsz * beam);
        ignoring = false;
        for (let s = 0; s < bsz; s++) {
          const keys = [];
          for (let j = 0; j < want; j++) {
            let m = eosMask[s * want + j];
            if (j < beam && candsToIgnore[s * beam + j]) m = 1;
            keys.push(m * candSize + j);
          }
          const active = keys.map((_, j) => j).sort((a, b) => keys[a] - keys[b]).slice(0, beam);
          active.forEach((j, h) => {
            const i = s * beam + h;
            ignore[i] = keys[j] >= candSize ? 1 : 0;
            if (ignore[i]) ignoring = true;
            activeBbsz[i] = candBbsz[s * want + j];
            prev[i] = candIndices[s * want + j];
            cum[i] = candScores[s * want + j];
          });
        }
        candsToIgnore = ignore;
      }
      // the hypotheses' tokens follow them; the new token after the prefix
      n = bsz * beam;
      const next = new Int32Array(n * stride);
      for (let i = 0; i < n; i++) {
        next.set(tokens.subarray(activeBbsz[i] * stride, (activeBbsz[i] + 1) * stride), i * stride);
        next[i * stride + step + 1] = prev[i];
      }
      tokens = next;
      order = activeBbsz;
    }
    for (const hyps of finalized) {
      hyps.sort((a, b) => (a.score > b.score ? -1 : a.score < b.score ? 1 : 0)); // (stable)
    }
    return finalized;
  }

  /** fairseq's finalize_hypos (search.py's _finalize): store the hypotheses that end in EOS;
   * returns the batch positions of the sentences now finished. */
  finalize(step, bbszIdx, eosScores, tokens, stride, finalized, finished, beam, maxLen) {
    const divisor = f32(Math.pow(step + 1, this.lenpen));
    const cumUnfin = [];
    let prev = 0;
    for (const f of finished) {
      if (f) prev += 1;
      else cumUnfin.push(prev);
    }
    const seen = new Map(); // (sentence, batch position) in order
    for (let i = 0; i < bbszIdx.length; i++) {
      const unfin = Math.floor(bbszIdx[i] / beam);
      const sent = unfin + cumUnfin[unfin];
      if (finalized[sent].length < beam) {
        const row = bbszIdx[i] * stride;
        const hyp = Array.from(tokens.subarray(row + 1, row + step + 2));
        hyp[step] = this.eos;
        finalized[sent].push({ tokens: hyp, score: f32(eosScores[i] / divisor) });
      }
      seen.set(sent * 2 ** 20 + unfin, [sent, unfin]);
    }
    const newly = [];
    for (const key of [...seen.keys()].sort((a, b) => a - b)) {
      const [sent, unfin] = seen.get(key);
      if (!finished[sent] && (finalized[sent].length === beam || step === maxLen)) {
        finished[sent] = true;
        newly.push(unfin);
      }
    }
    return newly;
  }
}

// -------------------------------------------------------------------------------- shortlist

export const SHORTLIST_MAGIC = "LCSL0001";

/** The export's shortlist (shortlist.bin: the runtime's Shortlist, packed for the page by
 * web_export.py: "LCSL0001", uint32 source and target vocabulary sizes, number of ids always
 * included, number of listed ids, id width (0: uint16, 1: uint32); uint32 list lengths per
 * source id; uint32 ids always included; the lists, each sorted and stored as differences; all
 * little-endian, gzip-compressed). candidates() is the runtime's. */
export class Shortlist {
  static async fromBytes(bytes, srcSize, tgtSize, specials) {
    if (bytes[0] === 0x1f && bytes[1] === 0x8b) {
      const stream = new Blob([bytes]).stream().pipeThrough(new DecompressionStream("gzip"));
      bytes = new Uint8Array(await new Response(stream).arrayBuffer());
    }
    return new Shortlist(bytes, srcSize, tgtSize, specials);
  }

  constructor(bytes, srcSize, tgtSize, specials) {
    const view = new DataView(bytes.buffer, bytes.byteOffset, bytes.byteLength);
    if (bytes.byteLength < 28 || textOf(bytes.subarray(0, 8)) !== SHORTLIST_MAGIC) {
      throw new WebError("shortlist.bin is not a lightcompress web shortlist: export again");
    }
    const [nSrc, nTgt, nListed, nIds, wide] = [8, 12, 16, 20, 24].map((o) => view.getUint32(o, true));
    if (nSrc !== srcSize || nTgt !== tgtSize) {
      throw new WebError(`shortlist.bin was built for vocabularies of ${nSrc} and ${nTgt} types, the model has ${srcSize} and ${tgtSize}`);
    }
    if (bytes.byteLength !== 28 + 4 * (nSrc + nListed) + (wide ? 4 : 2) * nIds) {
      throw new WebError("shortlist.bin is truncated or damaged: export again");
    }
    let at = 28;
    const u32 = (count) => {
      const out = new Uint32Array(count);
      for (let i = 0; i < count; i++, at += 4) out[i] = view.getUint32(at, true);
      return out;
    };
    const counts = u32(nSrc);
    const listed = u32(nListed);
    const ids = new Uint32Array(nIds);
    for (let i = 0; i < nIds; i++) {
      ids[i] = wide ? view.getUint32(at, true) : view.getUint16(at, true);
      at += wide ? 4 : 2;
    }
    this.offsets = new Uint32Array(nSrc + 1);
    for (let i = 0; i < nSrc; i++) this.offsets[i + 1] = this.offsets[i] + counts[i];
    for (let i = 0; i < nSrc; i++) {
      for (let j = this.offsets[i] + 1; j < this.offsets[i + 1]; j++) ids[j] += ids[j - 1];
    }
    if (ids.some((i) => i >= nTgt) || listed.some((i) => i >= nTgt)) {
      throw new WebError("shortlist.bin has ids outside the target vocabulary: export again");
    }
    this.targets = ids;
    this.fixed = Math.max(-1, ...specials) + 1; // (the ids kept as they are)
    this.always = new Uint8Array(nTgt);
    for (let i = 0; i < this.fixed; i++) this.always[i] = 1;
    for (const i of listed) this.always[i] = 1;
  }

  /** The sorted target ids a batch scores: its source tokens' lists, the ids always included,
   * at least `minimum` besides the special ids (the lowest others added). */
  candidates(srcIds, minimum = 0) {
    const mask = Uint8Array.from(this.always);
    const n = this.offsets.length - 1;
    for (const i of new Set(srcIds)) {
      if (i >= 0 && i < n) for (let j = this.offsets[i]; j < this.offsets[i + 1]; j++) mask[this.targets[j]] = 1;
    }
    let count = 0;
    for (let i = this.fixed; i < mask.length; i++) count += mask[i];
    let missing = minimum - count;
    for (let i = this.fixed; i < mask.length && missing > 0; i++) {
      if (!mask[i]) {
        mask[i] = 1;
        missing--;
      }
    }
    const out = [];
    mask.forEach((m, i) => m && out.push(i));
    return out;
  }
}

// ------------------------------------------------------------------------------------- step

/** fairseq's sinusoidal embedding rows of positions (files.py's sinusoid: float32 angles,
 * float64 sin / cos rounded to float32). */
export function sinusoid(positions, dim, freq) {
  const half = dim >> 1;
  if (!freq) {
    const scale = f32(-Math.log(10000) / (half - 1));
    freq = Array.from({ length: half }, (_, j) => Math.exp(f32(j * scale)));
  }
  const fr = Float32Array.from(freq);
  const out = new Float32Array(positions.length * dim);
  positions.forEach((p, r) => {
    for (let j = 0; j < half; j++) {
      const angle = f32(f32(p) * fr[j]);
      out[r * dim + j] = Math.sin(angle);
      out[r * dim + half + j] = Math.cos(angle);
    }
  });
  return out;
}

function gatherRows(ort, tensor, idx) {
  const [rows, ...rest] = tensor.dims;
  const size = tensor.data.length / rows;
  const out = new tensor.data.constructor(idx.length * size);
  idx.forEach((r, i) => out.set(tensor.data.subarray(r * size, (r + 1) * size), i * size));
  return new ort.Tensor(tensor.type, out, [idx.length, ...rest]);
}

const int64 = (ort, values, dims) => new ort.Tensor("int64", BigInt64Array.from(values, (v) => BigInt(v)), dims);

/** An export's encoder and decoder step (onnx_step.py's OnnxStep): sessions made by
 * `session(name)`; `shortlist`: score only the shortlist's candidates. */
export class OnnxStep {
  static async create({ ort, config, session, shortlist = null }) {
    const step = new OnnxStep();
    Object.assign(step, { ort, config, shortlist });
    step.pad = config.pad;
    step.eos = config.eos;
    step.unk = config.unk;
    step.vocabSize = config.vocab_size;
    step.maxPositions = config.max_decoder_positions;
    step.offset = config.position_offset;
    step.layers = config.layers;
    step.encoder = await session("encoder.onnx");
    step.decoder = await session("decoder.onnx");
    step.rows = config.shortlist_rows ? await session(config.shortlist_rows) : null;
    step.decInputs = step.decoder.inputNames;
    step.decOutputs = step.decoder.outputNames;
    step.encOutputs = step.encoder.outputNames;
    step.posInput = ["pos_emb", "pos"].find((name) => step.decInputs.includes(name)) ?? null;
    if (step.encoder.inputNames.join() !== "src_tokens" || !["prev", "order", "bias", "k"].every((x) => step.decInputs.includes(x))) {
      throw new WebError("the graphs are not a lightcompress export's encoder and decoder step: export again");
    }
    return step;
  }

  positionFeed(step) {
    if (this.posInput === "pos_emb") {
      const dim = this.config.position_dim;
      return new this.ort.Tensor("float32", sinusoid([this.offset + 1 + step], dim, this.config.position_freq), [1, dim]);
    }
    return int64(this.ort, [this.offset + 1 + step], [1]);
  }

  async vocabulary(src, beam) {
    if (this.shortlist === null && !this.decInputs.includes("cands")) return { vocab: this.vocabSize, feed: {}, at: null };
    const cands = this.shortlist === null ? Array.from({ length: this.vocabSize }, (_, i) => i) : this.shortlist.candidates(src, 2 * beam);
    const feed = { cands: int64(this.ort, cands, [cands.length]) };
    if (this.rows === null) return { vocab: cands.length, feed, at: null };
    const names = this.config.shortlist_rows_outputs;
    const out = await this.rows.run({ cands: feed.cands });
    for (const name of names) feed[name] = out[name];
    return { vocab: cands.length, feed, at: cands };
  }

  async start(src, bsz, srcLen, beam) {
    const enc = await this.encoder.run({ src_tokens: int64(this.ort, src, [bsz, srcLen]) });
    this.perSentence = this.config.cross_layout === "sentence";
    const repeat = Int32Array.from({ length: bsz * beam }, (_, i) => Math.floor(i / beam));
    this.cross = {};
    for (const name of this.encOutputs) this.cross[name] = this.perSentence ? enc[name] : gatherRows(this.ort, enc[name], repeat);
    const n = bsz * beam;
    const past = {};
    this.layers.forEach((spec, i) => {
      for (const c of ["k", "v"]) {
        const [heads, width] = spec[`${c}_cache`] ?? [spec.heads, spec.head_dim];
        past[`past_${c}${i}`] = new this.ort.Tensor("float32", new Float32Array(0), [n, heads, 0, width]);
      }
    });
    this.pastNames = Object.keys(past);
    const { vocab, feed, at } = await this.vocabulary(src, beam);
    this.feed = { ...this.cross, ...past, ...feed };
    this.k = null;
    return { vocab, at };
  }

  async step(tokens, stride, t, order, bias, k, kept) {
    const ort = this.ort;
    const feed = this.feed;
    const step = t - 1;
    const n = order.length;
    if (kept !== null) {
      for (const name of Object.keys(this.cross)) {
        this.cross[name] = gatherRows(ort, this.cross[name], this.perSentence ? kept : order);
        feed[name] = this.cross[name];
      }
    }
    if (this.k !== k) {
      feed.k = int64(ort, [k], [1]);
      this.k = k;
    }
    if (this.posInput !== null) feed[this.posInput] = this.positionFeed(step);
    feed.prev = int64(ort, Array.from({ length: n }, (_, i) => tokens[i * stride + step]), [n]);
    feed.order = int64(ort, order, [n]);
    feed.bias = new ort.Tensor("float32", bias, [bias.length]);
    const inputs = {};
    for (const name of this.decInputs) {
      if (!(name in feed)) throw new WebError(`the decoder step takes '${name}', which this page does not know: export it again with the lightcompress that wrote it`);
      inputs[name] = feed[name];
    }
    const out = await this.decoder.run(inputs);
    this.pastNames.forEach((name, i) => (feed[name] = out[this.decOutputs[2 + i]]));
    const lp = out[this.decOutputs[0]].data;
    const ids = Int32Array.from(out[this.decOutputs[1]].data, Number);
    return { lp, ids };
  }
}

// ------------------------------------------------------------------------------------ text

// Python's str.isspace characters (str.split() and str.strip() use them)
const PY_SPACE = "\t\n\u000b\u000c\r\u001c\u001d\u001e\u001f \u0085\u00a0\u1680\u2000\u2001\u2002\u2003\u2004\u2005\u2006\u2007\u2008\u2009\u200a\u2028\u2029\u202f\u205f\u3000";
const SPACE_RUN = new RegExp(`[${PY_SPACE}]+`, "u");
const STRIP = new RegExp(`^[${PY_SPACE}]+|[${PY_SPACE}]+$`, "gu");
export const pyStrip = (s) => s.replace(STRIP, "");
export const pySplit = (s) => pyStrip(s).split(SPACE_RUN).filter((x) => x.length);

/** One item per input line, as the runtime reads text (split at \n, a trailing \r removed,
 * nothing after a final \n). */
export function splitLines(text) {
  if (!text) return [];
  const lines = text.split("\n");
  if (lines[lines.length - 1] === "") lines.pop();
  return lines.map((l) => (l.endsWith("\r") ? l.slice(0, -1) : l));
}

/** Batches of at most batchSize sentences of similar length, longest first, left-padded
 * (translator.py's left_pad_batches): {idx, src (Int32Array [B x S]), bsz, srcLen}. */
export function* leftPadBatches(sentences, batchSize, pad) {
  const order = sentences.map((_, i) => i).sort((a, b) => sentences[b].length - sentences[a].length || a - b);
  for (let start = 0; start < order.length; start += batchSize) {
    const idx = order.slice(start, start + batchSize);
    const srcLen = Math.max(...idx.map((i) => sentences[i].length));
    const src = new Int32Array(idx.length * srcLen).fill(pad);
    idx.forEach((i, row) => src.set(sentences[i], row * srcLen + srcLen - sentences[i].length));
    yield { idx, src, bsz: idx.length, srcLen };
  }
}

const textOf = (bytes) => new TextDecoder("utf-8").decode(bytes);
const symbolsOf = (bytes) => {
  const lines = textOf(bytes).split("\n");
  if (lines[lines.length - 1] === "") lines.pop();
  return lines;
};

async function sha256(bytes) {
  const digest = await globalThis.crypto.subtle.digest("SHA-256", bytes);
  return Array.from(new Uint8Array(digest), (b) => b.toString(16).padStart(2, "0")).join("");
}

/** An export of lightcompress-export-web, text in and text out (translator.py's OnnxTranslator).
 *
 * WebTranslator.load({ort, SentencePieceProcessor, read, session, shortlist}):
 * - ort: ONNX Runtime's JavaScript API (onnxruntime-web, or onnxruntime-node);
 * - SentencePieceProcessor: @sctg/sentencepiece-js's class (an export with spm.model);
 * - read(name): the bytes of the export's file `name` (a Uint8Array);
 * - session(name, read): an ONNX Runtime session of the graph `name` (default: from its bytes,
 *   weights.bin given as external data: the page's way);
 * - shortlist: score only the shortlist's candidates (default: when the export ships one). */
export class WebTranslator {
  static async load({ ort, SentencePieceProcessor = null, read, session = null, shortlist = null, verify = true }) {
    const t = new WebTranslator();
    const web = JSON.parse(textOf(await read("web.json")));
    if (web.format !== FORMAT) throw new WebError("web.json is not a lightcompress web export");
    if (web.version !== VERSION) {
      throw new WebError(`this export is of web format version ${web.version}, this page reads version ${VERSION}: export it again`);
    }
    const files = new Map();
    const get = async (name) => {
      if (!files.has(name)) {
        const bytes = await read(name);
        if (verify && globalThis.crypto?.subtle && web.sha256[name] !== undefined) {
          if ((await sha256(bytes)) !== web.sha256[name]) {
            throw new WebError(`${name} differs from the file the export wrote (its sha256): an incomplete download or an edited export`);
          }
        }
        files.set(name, bytes);
      }
      return files.get(name);
    };
    const config = JSON.parse(textOf(await get("config.json")));
    t.config = config;
    t.web = web;
    if (session === null) {
      const options = { executionProviders: ["wasm"], graphOptimizationLevel: "all" };
      const weights = config.weights ?? "weights.bin";
      session = async (name) => {
        const extra = web.files.includes(weights) ? { externalData: [{ path: weights, data: await get(weights) }] } : {};
        return ort.InferenceSession.create(await get(name), { ...options, ...extra });
      };
    }
    t.srcSymbols = symbolsOf(await get("dict.src.txt"));
    t.tgtSymbols = symbolsOf(await get("dict.tgt.txt"));
    if (t.srcSymbols.length !== config.src_vocab_size || t.tgtSymbols.length !== config.vocab_size) {
      throw new WebError("the dictionaries do not fit config.json: export again");
    }
    t.srcIndex = new Map(t.srcSymbols.map((s, i) => [s, i]));
    t.spm = null;
    if (config.spm) {
      if (!SentencePieceProcessor) throw new WebError("this export has a sentencepiece model: give SentencePieceProcessor");
      t.spm = new SentencePieceProcessor();
      await t.spm._loadModel(await get(config.spm));
    }
    t.tokenized = t.spm === null;
    let sl = null;
    const useShortlist = shortlist ?? Boolean(web.shortlist);
    if (useShortlist) {
      if (!web.shortlist) throw new WebError("this export has no shortlist: export it with one (lightcompress-export-onnx --shortlist)");
      sl = await Shortlist.fromBytes(await get(web.shortlist), config.src_vocab_size, config.vocab_size, [config.pad, config.eos, config.unk]);
    }
    t.shortlist = useShortlist;
    t.step = await OnnxStep.create({ ort, config, session, shortlist: sl });
    return t;
  }

  /** Source ids (ending with EOS) of one line: its sentencepiece pieces (tokenized: its
   * space-separated tokens), unknown pieces as <unk>. */
  encode(line) {
    const pieces = this.spm ? this.spm.encodePieces(line) : pySplit(line);
    const ids = pieces.map((p) => this.srcIndex.get(p) ?? this.config.src_unk);
    ids.push(this.config.src_eos);
    return Int32Array.from(ids);
  }

  /** Text of target ids (EOS excluded): fairseq's sentencepiece post-processing. */
  decode(ids) {
    const text = ids.map((i) => this.tgtSymbols[i]).join(" ");
    if (!this.spm) return text;
    return pyStrip(text.replaceAll(" ", "").replaceAll("\u2581", " "));
  }

  /** The reason a line cannot be translated (more source tokens than the model's positions),
   * or null. */
  lineError(src, number) {
    const limit = this.config.max_source_positions;
    if (limit && src.length > limit) {
      return `input line ${number} has ${src.length} tokens, more than the model's ${limit} source positions: split it`;
    }
    return null;
  }

  /** Best hypotheses (ids, no EOS) of source id arrays; onBatch(done, total) after each batch. */
  async translateIds(sentences, { beam = 5, lenpen = 1.0, maxLenA = 0, maxLenB = 200, minLen = 1, unkPenalty = 0, batchSize = 32, onBatch = null } = {}) {
    for (const [name, value] of [["beam", beam], ["batchSize", batchSize], ["minLen", minLen], ["maxLenB", maxLenB]]) {
      if (!Number.isInteger(value) || value < 1) throw new WebError(`${name} must be an integer >= 1, got ${value}`);
    }
    if (!Number.isFinite(lenpen) || !Number.isFinite(maxLenA) || maxLenA < 0) throw new WebError("lenpen and maxLenA must be finite numbers (maxLenA >= 0)");
    const search = new BeamSearch(this.step, { beam, lenpen, minLen, maxLenA, maxLenB, unkPenalty });
    const out = sentences.map(() => []);
    let done = 0;
    for (const { idx, src, bsz, srcLen } of leftPadBatches(sentences, batchSize, this.config.src_pad)) {
      const hyps = await search.generate(src, bsz, srcLen);
      idx.forEach((i, r) => (out[i] = hyps[r][0].tokens.filter((t) => t !== this.config.eos)));
      done += bsz;
      if (onBatch) await onBatch(done, sentences.length);
    }
    return out;
  }

  /** Translations of lines in order (translator.py's translate_lines): a blank line gives "";
   * a line over the model's source positions is refused (WebError) as the runtime refuses it. */
  async translate(lines, options = {}) {
    lines.forEach((line, i) => {
      const error = pyStrip(line) ? this.lineError(this.encode(line), i + 1) : null;
      if (error) throw new WebError(error);
    });
    return (await this.translateEach(lines, options)).map((r) => r.text);
  }

  /** Lines in, lines out: {text} per line, or {error} for a line that cannot be translated
   * (the others are translated all the same). */
  async translateEach(lines, options = {}) {
    const results = lines.map(() => ({ text: "" }));
    const todo = [];
    const encoded = [];
    lines.forEach((line, i) => {
      if (!pyStrip(line)) return;
      const src = this.encode(line);
      const error = this.lineError(src, i + 1);
      if (error) results[i] = { error };
      else {
        todo.push(i);
        encoded.push(src);
      }
    });
    const hyps = await this.translateIds(encoded, options);
    todo.forEach((i, j) => (results[i] = { text: this.decode(hyps[j]) }));
    return results;
  }
}

// -------------------------------------------------------------------------- the page's worker

async function pageTranslator(base) {
  const ort = await import(new URL("engine/ort.wasm.min.mjs", base).href);
  const read = async (name) => {
    const response = await fetch(new URL(name, base));
    if (!response.ok) throw new WebError(`cannot load ${name} (HTTP ${response.status}): serve the whole folder`);
    return new Uint8Array(await response.arrayBuffer());
  };
  const web = JSON.parse(textOf(await read("web.json")));
  ort.env.wasm.wasmPaths = new URL("engine/", base).href;
  // one thread unless the page is cross-origin isolated (SharedArrayBuffer)
  ort.env.wasm.numThreads = globalThis.crossOriginIsolated ? Math.min(web.threads ?? 1, navigator.hardwareConcurrency || 1) : 1;
  let SentencePieceProcessor = null;
  if (web.tokenizer === "sentencepiece") ({ SentencePieceProcessor } = await import(new URL("engine/sentencepiece.mjs", base).href));
  return WebTranslator.load({ ort, SentencePieceProcessor, read });
}

if (typeof WorkerGlobalScope !== "undefined" && globalThis instanceof WorkerGlobalScope) {
  const base = new URL("./", import.meta.url);
  const started = performance.now();
  const ready = pageTranslator(base);
  ready.then(
    (t) => postMessage({ type: "ready", ms: performance.now() - started, web: t.web, tokenized: t.tokenized, shortlist: t.shortlist }),
    (e) => postMessage({ type: "failed", message: e instanceof WebError ? e.message : `the model did not load: ${e.message ?? e}` }),
  );
  let queue = Promise.resolve();
  onmessage = ({ data }) => {
    queue = queue.then(async () => {
      const { id, lines, options } = data;
      try {
        const t = await ready;
        const t0 = performance.now();
        const onBatch = (done, total) => postMessage({ type: "progress", id, done, total });
        const results = await t.translateEach(lines, { ...options, onBatch });
        postMessage({ type: "result", id, results, ms: performance.now() - t0 });
      } catch (e) {
        postMessage({ type: "error", id, message: e instanceof WebError ? e.message : `translation failed: ${e.message ?? e}` });
      }
    });
  };
}
