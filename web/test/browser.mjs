// Drive a served web export in headless Chromium (Debian's, through playwright-core: nothing
// downloads a browser), for tests/test_web.py and the measurements in docs/deployment.md.
//
// stdin: {url, chromium (default /usr/bin/chromium), inputs: [text typed into the page, one
// translation each], screenshot: PNG path or null, bench: {lines, beams: [5, 1], repeat} or null,
// probe: {lines} (while a long input translates, the page answers a script at once),
// translate: {lines, options} (the page's API on many lines, for BLEU)}.
// stdout: {ready: {ms, ...}, outputs: [{target, status, messages}], bench: [{beam, runs: [ms],
// texts}], probe: {...}, translate: {texts, errors, ms}, error (if any), console: [...]}.
import { mkdtempSync, readFileSync, rmSync } from "node:fs";
import os from "node:os";
import path from "node:path";
import { chromium } from "playwright-core";

const job = JSON.parse(readFileSync(0, "utf-8"));
const profile = mkdtempSync(path.join(os.tmpdir(), "lc-chromium-"));
// (a fresh profile: playwright passes it as --user-data-dir)
const browser = await chromium.launchPersistentContext(profile, {
  executablePath: job.chromium ?? "/usr/bin/chromium",
  headless: true,
  viewport: { width: 1100, height: 500 },
  args: ["--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking", "--disable-component-update",
    "--disable-sync", "--no-first-run"],
});
const result = { console: [] };
try {
  const page = await browser.newPage();
  page.on("console", (m) => result.console.push(`${m.type()}: ${m.text()}`));
  page.on("pageerror", (e) => result.console.push(`pageerror: ${e.message}`));
  // offline: every request that leaves the static server fails
  const origin = new URL(job.url).origin;
  if (origin.startsWith("http")) await page.route("**/*", (route) => (route.request().url().startsWith(origin) ? route.continue() : route.abort()));
  await page.goto(job.url);
  result.ready = await page.evaluate(() => window.lightcompress.ready.then((r) => ({ ms: r.ms, tokenized: r.tokenized, shortlist: r.shortlist }), (e) => ({ error: e.message })));
  if (result.ready.error) throw new Error(result.ready.error);
  result.outputs = [];
  for (const text of job.inputs ?? []) {
    await page.locator("#source").fill("");
    await page.locator("#source").pressSequentially(text.slice(0, 200)); // (typed, as a person)
    if (text.length > 200) await page.locator("#source").fill(text); // (the rest pasted)
    await page.click("#translate");
    await page.waitForFunction(() => !document.querySelector("#translate").disabled && !/^Translating/.test(document.querySelector("#status").textContent), null, { timeout: 120000 });
    result.outputs.push(await page.evaluate(() => ({
      target: document.querySelector("#target").value,
      status: document.querySelector("#status").textContent,
      messages: [...document.querySelectorAll("#messages li")].map((li) => li.textContent),
    })));
  }
  if (job.probe) {
    // a long input: while the worker translates it, the page still answers at once
    const lines = job.probe.lines;
    await page.locator("#source").fill(lines.join("\n"));
    await page.click("#translate");
    const t0 = Date.now();
    const answers = [];
    while (await page.evaluate(() => document.querySelector("#translate").disabled)) {
      const s = Date.now();
      await page.evaluate(() => document.querySelector("#status").textContent);
      answers.push(Date.now() - s);
      await new Promise((r) => setTimeout(r, 50));
      if (Date.now() - t0 > 300000) break;
    }
    result.probe = { ms: Date.now() - t0, answers: answers.length, slowest: Math.max(0, ...answers),
      lines: (await page.evaluate(() => document.querySelector("#target").value)).split("\n").length,
      status: await page.evaluate(() => document.querySelector("#status").textContent),
      messages: await page.evaluate(() => [...document.querySelectorAll("#messages li")].map((li) => li.textContent)) };
  }
  if (job.screenshot) {
    await page.locator("#source").fill(job.screenshotText ?? (job.inputs ?? []).join("\n"));
    await page.click("#translate");
    await page.waitForFunction(() => !document.querySelector("#translate").disabled, null, { timeout: 120000 });
    await page.screenshot({ path: job.screenshot });
  }
  if (job.translate) {
    // the page's API (window.lightcompress.translate: the Worker's translateEach) on many lines
    result.translate = await page.evaluate(async ({ lines, options }) => {
      const { results, ms } = await window.lightcompress.translate(lines, options);
      return { texts: results.map((r) => r.text ?? null), errors: results.map((r) => r.error ?? null), ms };
    }, job.translate);
  }
  if (job.bench) {
    result.bench = [];
    for (const beam of job.bench.beams ?? [5, 1]) {
      const runs = await page.evaluate(async ({ lines, beam, repeat }) => {
        const out = [];
        await window.lightcompress.translate(lines.slice(0, 4), { beam }); // (warm-up)
        for (let i = 0; i < repeat; i++) {
          const t0 = performance.now();
          const { results } = await window.lightcompress.translate(lines, { beam, batchSize: 1 });
          out.push({ ms: performance.now() - t0, texts: results.map((r) => r.text) });
        }
        return out;
      }, { lines: job.bench.lines, beam, repeat: job.bench.repeat ?? 1 });
      result.bench.push({ beam, runs: runs.map((r) => r.ms), texts: runs[0].texts });
    }
  }
} catch (e) {
  result.error = e.message;
} finally {
  await browser.close();
  rmSync(profile, { recursive: true, force: true });
}
process.stdout.write(JSON.stringify(result));
