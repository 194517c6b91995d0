#!/usr/bin/env node
// The status page in a real browser: the machine's Chromium or Chrome (scripts/find-browser.sh),
// headless, driven by playwright-core (scripts/install-playwright.sh). Used by StatusPage.* in status_page_test.cpp, which starts a
// worker, this script, then `tandem serve` whose link to the worker runs through the throttling
// proxy below, so that the model load lasts long enough to be seen.
//
//   node tests/integration/status_page.mjs --node-modules DIR --url http://127.0.0.1:PORT/ --key KEY
//        --proxy-listen PORT --proxy-to HOST:PORT --rate BYTES_PER_S --shots DIR
//        --expect 'head=no layers' --expect 'w0=4 layers (0–3)' [--browser PATH]
//
// --browser: the Chromium or Chrome to drive (default /usr/bin/chromium). A snap's (/snap/...)
// sees neither the real /tmp nor hidden folders of $HOME, so its profile then goes under
// ~/snap/<name>/common/, the folder a snap may write.
//
// Steps, each with a deadline: the page asks for a key (screenshot key-prompt.png); with the key
// it shows the load with its progress (loading.png), the nodes with their layer ranges and the
// plan, then `ready` (ready.png); during a generation the live tok/s turns non-zero
// (generating.png). Exit 0 when every assertion held, 1 otherwise (the reason on stderr), 2 on a
// usage error.

import { createRequire } from 'node:module';
import net from 'node:net';
import { mkdirSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import process from 'node:process';

function parseArgs(argv) {
  const a = { expect: [] };
  for (let i = 2; i < argv.length; i += 2) {
    const k = argv[i].replace(/^--/, ''), v = argv[i + 1];
    if (v === undefined) usage(`${argv[i]} needs a value`);
    if (k === 'expect') a.expect.push(v); else a[k.replace(/-/g, '_')] = v;
  }
  for (const k of ['node_modules', 'url', 'key', 'proxy_listen', 'proxy_to', 'rate', 'shots']) {
    if (!a[k]) usage(`--${k.replace(/_/g, '-')} is required`);
  }
  return a;
}
function usage(msg) {
  process.stderr.write(`status_page: ${msg}\n`);
  process.exit(2);
}
function fail(msg) {
  process.stderr.write(`status_page: FAIL ${msg}\n`);
  process.exit(1);
}
const log = (msg) => process.stderr.write(`status_page: ${msg}\n`);

// A TCP proxy that lets at most `rate` bytes per second through from the head to the worker (the
// direction the weights take); the other direction is not slowed.
function startProxy(listenPort, to, rate) {
  const [host, port] = [to.slice(0, to.lastIndexOf(':')), Number(to.slice(to.lastIndexOf(':') + 1))];
  const server = net.createServer((client) => {
    const up = net.connect(port, host);
    client.on('data', (chunk) => {
      up.write(chunk);
      client.pause();
      setTimeout(() => client.resume(), (1000 * chunk.length) / rate);
    });
    up.on('data', (chunk) => client.write(chunk));
    const close = () => { client.destroy(); up.destroy(); };
    client.on('close', close); up.on('close', close);
    client.on('error', close); up.on('error', close);
  });
  server.listen(listenPort, '127.0.0.1');
  return server;
}

const args = parseArgs(process.argv);
const require = createRequire(path.join(args.node_modules, 'noop.js'));
const { chromium } = require('playwright-core');
mkdirSync(args.shots, { recursive: true });
const proxy = startProxy(Number(args.proxy_listen), args.proxy_to, Number(args.rate));
const overall = setTimeout(() => fail('the whole run took longer than 240 s'), 240000);

async function until(what, fn, ms) {
  const end = Date.now() + ms;
  let last;
  while (Date.now() < end) {
    try {
      last = await fn();
      if (last) return last;
    } catch (e) {
      last = e.message;
    }
    await new Promise((r) => setTimeout(r, 100));
  }
  fail(`${what} within ${ms / 1000} s (last seen: ${JSON.stringify(last)})`);
}

const executablePath = args.browser || '/usr/bin/chromium';
const snap = executablePath.match(/^\/snap\/bin\/([^./]+)/);
if (snap) {
  // playwright-core makes the browser's profile under os.tmpdir(), which follows TMPDIR.
  const dir = path.join(os.homedir(), 'snap', snap[1], 'common', 'tandem-playwright');
  mkdirSync(dir, { recursive: true });
  process.env.TMPDIR = dir;
}
log(`browser: ${executablePath}`);
const browser = await chromium.launch({ executablePath, args: ['--no-sandbox'] });
try {
  const page = await browser.newPage({ viewport: { width: 1200, height: 900 } });
  const external = [];
  page.on('request', (r) => { if (!r.url().startsWith(new URL(args.url).origin)) external.push(r.url()); });
  const url = args.url + '?interval=200';
  await until('the page is served', async () => (await page.goto(url)).ok(), 60000);

  // No key stored: the page asks for one and shows no figures.
  await until('the key prompt appears', () => page.isVisible('#key-prompt'), 10000);
  const prompt = await page.textContent('#key-prompt');
  if (!/API key/.test(prompt)) fail(`the key prompt says: ${prompt}`);
  if ((await page.textContent('#state')) !== 'key needed') fail(`state without a key: ${await page.textContent('#state')}`);
  await page.screenshot({ path: path.join(args.shots, 'key-prompt.png'), fullPage: true });
  log('key prompt shown');

  await page.fill('#key', args.key);
  await page.click('#key-form button');
  await until('the key prompt goes away', async () => !(await page.isVisible('#key-prompt')), 10000);

  // The load: state, progress with an ETA, the nodes and the plan.
  const loadText = async () => {
    const st = await page.textContent('#state');
    const text = (await page.isVisible('#load-section')) ? await page.textContent('#load-text') : '';
    return /^loading/.test(st) && /^\d+% · .* of /.test(text) ? text : false;
  };
  let seen = await until('state "loading" with progress', loadText, 120000);
  await page.screenshot({ path: path.join(args.shots, 'loading.png'), fullPage: true });
  // Better still, a moment with the load under way (a rate and the time left): libllama reports
  // progress per tensor, so on a small model it may jump from 0 % to 100 %.
  const midway = /^[1-9][0-9]?% · .*\/s · about .* left/;
  for (let t; !midway.test(seen) && (t = await loadText());) {
    if (midway.test(t)) {
      await page.screenshot({ path: path.join(args.shots, 'loading.png'), fullPage: true });
    }
    seen = t;
  }
  log(`during the load: ${seen}${midway.test(seen) ? '' : ' (no intermediate progress seen)'}`);
  for (const e of args.expect) {
    const [name, layers] = e.split('=');
    const card = page.locator(`.node[data-node="${name}"]`);
    const got = await until(`node ${name} shows "${layers}"`, async () => (await card.count()) && await card.locator('.node-layers').textContent(), 10000);
    if (!got.startsWith(layers)) fail(`node ${name}: "${got}", expected "${layers}"`);
  }
  const planText = await page.textContent('#plan-text');
  if (!/^4 layers — /.test(planText)) fail(`plan: ${planText}`);

  await until('state "ready"', async () => (await page.textContent('#state')) === 'ready', 180000);
  const w = args.expect.map((e) => e.split('=')[0]).filter((n) => n !== 'head');
  for (const name of w) {
    const st = await page.locator(`.node[data-node="${name}"] .node-state`).textContent();
    if (st !== 'up') fail(`node ${name} state when ready: ${st}`);
  }
  await page.screenshot({ path: path.join(args.shots, 'ready.png'), fullPage: true });
  log('ready shown');

  // Live figures: a generation makes tok/s non-zero while the page polls (it was frozen before).
  const api = new URL('v1/completions', args.url).toString();
  const gen = fetch(api, {
    method: 'POST',
    headers: { 'Content-Type': 'application/json', Authorization: `Bearer ${args.key}` },
    body: JSON.stringify({ model: 'tiny', prompt: 'Once upon a time', max_tokens: 200, temperature: 0 }),
  });
  const tps = await until('tok/s above zero during a generation', async () => {
    const t = Number(await page.textContent('#tps'));
    return t > 0 ? t : false;
  }, 60000);
  await page.screenshot({ path: path.join(args.shots, 'generating.png'), fullPage: true });
  const r = await gen;
  if (!r.ok) fail(`the generation answered ${r.status}: ${await r.text()}`);
  log(`live tok/s seen: ${tps}`);
  if (external.length) fail(`the page fetched from elsewhere: ${external.join(', ')}`);
} finally {
  clearTimeout(overall);
  await browser.close();
  proxy.close();
}
log('ok');
process.exit(0);
