#!/usr/bin/env node
// Client-compatibility harness for the Anthropic Messages API: drives a server with the official
// `@anthropic-ai/sdk` npm package, unchanged, and checks what the client sees.
//
//   TANDEM_NODE_MODULES=$(scripts/install-node-deps.sh) \
//     node tests/integration/anthropic_client.mjs --base-url http://127.0.0.1:8080 --api-key KEY --model ID
//
// Checks: create (a text message), stream (messages.stream(): the events and the final message),
// tool (a tool definition with tool_choice any: the answer is the forced tool_use block),
// tool_result (a conversation
// with a tool_use turn and its tool_result), beta (client.beta.messages.create: the
// ?beta=true route and anthropic-beta header Claude Code sends), count (messages.countTokens),
// auth (a wrong key gets Anthropic.AuthenticationError, 401). Prints one JSON line on stdout;
// exits 0 when every check passed, 1 when one failed (each failure also one line on stderr), 2 on
// a usage error. Every request has a timeout and the run a deadline, so it never hangs.

import { createRequire } from 'node:module';
import { readFileSync } from 'node:fs';
import path from 'node:path';
import process from 'node:process';

const ALL_CHECKS = ['create', 'stream', 'tool', 'tool_result', 'beta', 'count', 'auth'];
const STOP_REASONS = ['end_turn', 'max_tokens', 'stop_sequence', 'tool_use'];

function usageError(message) {
  process.stderr.write(`anthropic_client: ${message}\nusage: node anthropic_client.mjs --base-url URL --api-key KEY --model ID ` +
    `[--node-modules DIR] [--timeout S] [--checks ${ALL_CHECKS.join(',')}] [--max-tokens N]\n`);
  process.exit(2);
}

function parseArgs(argv) {
  const o = { timeoutS: 60, checks: ALL_CHECKS, maxTokens: 8, nodeModules: process.env.TANDEM_NODE_MODULES };
  for (let i = 0; i < argv.length; i++) {
    const a = argv[i];
    const v = argv[i + 1];
    if (v === undefined) usageError(`${a} needs a value`);
    i++;
    if (a === '--base-url') o.baseUrl = v;
    else if (a === '--api-key') o.apiKey = v;
    else if (a === '--model') o.model = v;
    else if (a === '--node-modules') o.nodeModules = v;
    else if (a === '--timeout') o.timeoutS = Number(v);
    else if (a === '--max-tokens') o.maxTokens = Number(v);
    else if (a === '--checks') {
      o.checks = v.split(',').filter(Boolean);
      for (const c of o.checks) if (!ALL_CHECKS.includes(c)) usageError(`unknown check '${c}'`);
    } else usageError(`unknown argument: ${a}`);
  }
  if (!o.baseUrl || !o.apiKey || !o.model) usageError('--base-url, --api-key and --model are required');
  if (!o.nodeModules) usageError('--node-modules (or TANDEM_NODE_MODULES) is required: scripts/install-node-deps.sh prints it');
  return o;
}

class CheckFailure extends Error {}
function expect(cond, message) { if (!cond) throw new CheckFailure(message); }
const show = (v) => { const s = JSON.stringify(v); return s === undefined ? String(v) : (s.length > 300 ? `${s.slice(0, 300)}...` : s); };

function checkMessage(m, where, maxTokens) {
  expect(typeof m.id === 'string' && m.id.startsWith('msg_'), `${where}: id ${show(m.id)} does not start with msg_`);
  expect(m.type === 'message' && m.role === 'assistant', `${where}: not an assistant message: ${show(m)}`);
  expect(Array.isArray(m.content) && m.content.length > 0, `${where}: no content blocks: ${show(m.content)}`);
  for (const b of m.content) expect(['text', 'thinking', 'tool_use'].includes(b.type), `${where}: a block of type ${show(b.type)}`);
  expect(STOP_REASONS.includes(m.stop_reason), `${where}: stop_reason ${show(m.stop_reason)}`);
  const u = m.usage;
  expect(u && Number.isInteger(u.input_tokens) && u.input_tokens > 0, `${where}: usage.input_tokens ${show(u)}`);
  expect(Number.isInteger(u.output_tokens) && u.output_tokens <= maxTokens, `${where}: usage.output_tokens ${show(u)} (max ${maxTokens})`);
  if (m.stop_reason === 'max_tokens') expect(u.output_tokens === maxTokens, `${where}: max_tokens but ${u.output_tokens} tokens`);
  return m;
}

const text = (m) => m.content.filter((b) => b.type === 'text').map((b) => b.text).join('');
const USER = [{ role: 'user', content: [{ type: 'text', text: 'Say hello in one word.' }] }];
const WEATHER = {
  name: 'get_weather', description: 'The weather in a city',
  input_schema: { type: 'object', properties: { city: { type: 'string', enum: ['Paris', 'Oslo'] } }, required: ['city'] },
};

const CHECKS = {
  async create(ctx) {
    const m = await ctx.client.messages.create({
      model: ctx.o.model, max_tokens: ctx.o.maxTokens, temperature: 0,
      system: [{ type: 'text', text: 'You are terse.', cache_control: { type: 'ephemeral' } }], messages: USER,
    }, ctx.req());
    checkMessage(m, 'message', ctx.o.maxTokens);
    return { stop_reason: m.stop_reason, text: text(m), usage: m.usage };
  },
  async stream(ctx) {
    const seen = [];
    let deltas = '';
    const stream = ctx.client.messages.stream({ model: ctx.o.model, max_tokens: ctx.o.maxTokens, temperature: 0, messages: USER }, ctx.req());
    stream.on('streamEvent', (e) => seen.push(e.type));
    stream.on('text', (t) => { deltas += t; });
    const m = await stream.finalMessage();
    checkMessage(m, 'final message', ctx.o.maxTokens);
    expect(seen[0] === 'message_start', `the first event is ${show(seen[0])}`);
    expect(seen.at(-1) === 'message_stop', `the last event is ${show(seen.at(-1))}`);
    for (const t of ['content_block_start', 'content_block_delta', 'content_block_stop', 'message_delta']) {
      expect(seen.includes(t), `no ${t} event in ${show(seen)}`);
    }
    expect(deltas === text(m), `the text deltas ${show(deltas)} are not the final text ${show(text(m))}`);
    return { events: seen.length, stop_reason: m.stop_reason, usage: m.usage };
  },
  async tool(ctx) {
    const m = await ctx.client.messages.create({
      model: ctx.o.model, max_tokens: 64, temperature: 0, tools: [WEATHER], tool_choice: { type: 'any' },
      messages: [{ role: 'user', content: 'What is the weather in Paris?' }],
    }, ctx.req());
    checkMessage(m, 'message', 64);
    // tool_choice any forces a call: the answer is a tool_use block, ended by tool_use, or by
    // max_tokens where a random-weight model's arguments run on past 64 tokens.
    const use = m.content.find((b) => b.type === 'tool_use');
    expect(use !== undefined && ['tool_use', 'max_tokens'].includes(m.stop_reason),
      `stop_reason ${show(m.stop_reason)} with blocks ${show(m.content)}`);
    expect(!m.content.some((b) => b.type === 'text' && b.text.length > 0), `text before the forced call: ${show(m.content)}`);
    if (use) {
      expect(use.name === 'get_weather', `tool_use names ${show(use.name)}`);
      expect(typeof use.id === 'string' && use.id.length > 0, `tool_use without an id: ${show(use)}`);
      expect(use.input && typeof use.input === 'object', `tool_use input is not an object: ${show(use.input)}`);
    }
    return { tool_use: use, usage: m.usage };
  },
  async tool_result(ctx) {
    const m = await ctx.client.messages.create({
      model: ctx.o.model, max_tokens: ctx.o.maxTokens, temperature: 0, tools: [WEATHER],
      messages: [
        { role: 'user', content: 'What is the weather in Paris?' },
        { role: 'assistant', content: [{ type: 'text', text: 'Let me check.' },
          { type: 'tool_use', id: 'toolu_01', name: 'get_weather', input: { city: 'Paris' } }] },
        { role: 'user', content: [{ type: 'tool_result', tool_use_id: 'toolu_01', content: [{ type: 'text', text: 'Sunny, 21 C' }] }] },
      ],
    }, ctx.req());
    checkMessage(m, 'message', ctx.o.maxTokens);
    return { stop_reason: m.stop_reason, content: m.content.map((b) => b.type), usage: m.usage };
  },
  async beta(ctx) {
    const m = await ctx.client.beta.messages.create({
      model: ctx.o.model, max_tokens: ctx.o.maxTokens, messages: USER, betas: ['interleaved-thinking-2025-05-14'],
      thinking: { type: 'enabled', budget_tokens: 1024 }, metadata: { user_id: 'tester' },
    }, ctx.req());
    checkMessage(m, 'beta message', ctx.o.maxTokens);
    return { stop_reason: m.stop_reason, usage: m.usage };
  },
  async count(ctx) {
    const short = await ctx.client.messages.countTokens({ model: ctx.o.model, messages: USER }, ctx.req());
    expect(Number.isInteger(short.input_tokens) && short.input_tokens > 0, `input_tokens ${show(short)}`);
    const long = await ctx.client.messages.countTokens({
      model: ctx.o.model, tools: [WEATHER], system: 'You are a helpful assistant with a long system prompt.',
      messages: [...USER, { role: 'assistant', content: 'Hello.' }, { role: 'user', content: 'And again, please.' }],
    }, ctx.req());
    expect(long.input_tokens > short.input_tokens, `a longer conversation counts ${long.input_tokens} <= ${short.input_tokens}`);
    // Anthropic's usage splits the prompt: the tokens evaluated afresh, those read from the cache
    // and those written to it add up to what countTokens counts.
    const made = await ctx.client.messages.create({ model: ctx.o.model, max_tokens: 1, messages: USER }, ctx.req());
    const u = made.usage;
    const prompt = u.input_tokens + (u.cache_read_input_tokens ?? 0) + (u.cache_creation_input_tokens ?? 0);
    expect(prompt === short.input_tokens, `countTokens says ${short.input_tokens}, the same request's usage says ${show(u)}`);
    return { short: short.input_tokens, long: long.input_tokens };
  },
  async auth(ctx) {
    const bad = new ctx.Anthropic({ ...ctx.clientOptions, apiKey: `${ctx.o.apiKey}-wrong` });
    try {
      await bad.messages.create({ model: ctx.o.model, max_tokens: 1, messages: USER }, ctx.req());
    } catch (e) {
      expect(e instanceof ctx.AuthenticationError, `a wrong key got ${e?.constructor?.name}: ${e?.message}`);
      expect(e.status === 401, `status ${e.status}`);
      expect(e.error?.type === 'error' && e.error?.error?.type === 'authentication_error', `error body ${show(e.error)}`);
      return { status: e.status, message: e.message };
    }
    throw new CheckFailure('a wrong key was accepted');
  },
};

function describe(e) {
  if (e instanceof CheckFailure) return e.message;
  let s = `${e?.constructor?.name ?? 'Error'}${e?.status ? ` (status ${e.status})` : ''}: ${e?.message ?? e}`;
  for (let c = e?.cause, d = 0; c && d < 4; c = c.cause, d++) s += ` <- ${c.message}`;
  return s;
}

async function main() {
  const o = parseArgs(process.argv.slice(2));
  const report = { ok: false, base_url: o.baseUrl, model: o.model, sdk: null, checks: {}, failed: [] };
  const deadline = setTimeout(() => {
    report.failed.push('deadline');
    process.stdout.write(`${JSON.stringify(report)}\n`);
    process.exit(1);
  }, o.timeoutS * 1000 * (ALL_CHECKS.length + 1));
  deadline.unref();
  let mod;
  try {
    const require = createRequire(path.join(path.resolve(o.nodeModules), 'tandem-resolve.js'));
    mod = require(require.resolve('@anthropic-ai/sdk'));
    report.sdk = JSON.parse(readFileSync(path.join(path.resolve(o.nodeModules), '@anthropic-ai/sdk/package.json'), 'utf8')).version;
  } catch (e) {
    report.failed.push('load');
    process.stderr.write(`anthropic_client: FAIL load: @anthropic-ai/sdk is not in ${o.nodeModules}: ${e.message.split('\n')[0]}\n`);
    process.stdout.write(`${JSON.stringify(report)}\n`);
    process.exitCode = 1;
    return;
  }
  const Anthropic = mod.Anthropic ?? mod.default;
  // maxRetries 0: a retry would hide a failed first attempt.
  const clientOptions = { baseURL: o.baseUrl, timeout: o.timeoutS * 1000, maxRetries: 0 };
  const ctx = {
    o, Anthropic, AuthenticationError: mod.AuthenticationError, clientOptions,
    client: new Anthropic({ ...clientOptions, apiKey: o.apiKey }),
    req: () => ({ signal: AbortSignal.timeout(o.timeoutS * 1000) }),
  };
  for (const name of o.checks) {
    const t0 = performance.now();
    try {
      report.checks[name] = { ok: true, ...(await CHECKS[name](ctx)), ms: Math.round(performance.now() - t0) };
    } catch (e) {
      report.checks[name] = { ok: false, error: describe(e) };
      report.failed.push(name);
      process.stderr.write(`anthropic_client: FAIL ${name}: ${describe(e)}\n`);
    }
  }
  clearTimeout(deadline);
  report.ok = report.failed.length === 0;
  process.stdout.write(`${JSON.stringify(report)}\n`);
  process.exitCode = report.ok ? 0 : 1;
}

main().catch((e) => {
  process.stderr.write(`anthropic_client: internal error: ${e?.stack ?? e}\n`);
  process.exit(1);
});
