#!/usr/bin/env node
// Client-compatibility harness: drives an OpenAI-compatible server with the official `openai`
// npm package and checks what the client sees.
//
//   TANDEM_NODE_MODULES=$(scripts/install-node-deps.sh) \
//     node tests/integration/openai_client.mjs --base-url http://127.0.0.1:8080/v1 \
//       --api-key KEY --model ID
//
// Checks: chat (non-streaming chat completion), stream (streaming chat completion with usage),
// completion (legacy completions), auth (a wrong key gets openai.AuthenticationError, 401),
// models (models.list() holds the model id), retrieve (models.retrieve() of it, NotFoundError for
// another), logprobs (chat with logprobs and top_logprobs), responses (responses.create), 
// responses_stream (responses.stream(): its events and final response), responses_tool (a
// function tool), responses_json (text.format json_schema: the output parses and fits), preflight
// (a browser's OPTIONS from --origin, which the server must allow). Prints one JSON line on stdout; exits 0 when every
// check passed, 1 when one failed (each failure also goes to stderr as one line), 2 on a usage
// error. Every request has a timeout and the run as a whole has a deadline, so it never hangs.
//
// ESM ignores NODE_PATH, so the package is found through createRequire from the node_modules
// folder given by --node-modules or TANDEM_NODE_MODULES (or NODE_PATH's first entry); without
// any of them, a plain `import('openai')` from this file's location.

import { createRequire } from 'node:module';
import { readFileSync } from 'node:fs';
import path from 'node:path';
import process from 'node:process';

const ALL_CHECKS = ['chat', 'stream', 'completion', 'auth', 'models', 'retrieve', 'logprobs', 'responses', 'responses_stream',
  'responses_tool', 'responses_json', 'preflight'];
// The default set; the newer ones need a long context (tools) or a CORS origin (preflight).
const DEFAULT_CHECKS = ['chat', 'stream', 'completion', 'auth', 'models'];
const FINISH_REASONS = ['stop', 'length', 'tool_calls', 'content_filter', 'function_call'];

const USAGE = `usage: node tests/integration/openai_client.mjs --base-url URL --api-key KEY --model ID
         [--node-modules DIR] [--timeout SECONDS] [--checks LIST] [--max-tokens N]

  --base-url URL      the API root the client is given, e.g. http://127.0.0.1:8080/v1
  --api-key KEY       a key the server accepts (or OPENAI_API_KEY)
  --model ID          the model id to request; models.list() must contain it
  --node-modules DIR  the node_modules holding openai (or TANDEM_NODE_MODULES, or NODE_PATH);
                      scripts/install-node-deps.sh prints it
  --timeout SECONDS   per request (default 60); the whole run gets 6x that at most
  --checks LIST       comma-separated subset of ${ALL_CHECKS.join(',')}
                      (default: ${DEFAULT_CHECKS.join(',')})
  --max-tokens N      max_tokens for generations (default 8)
  --origin URL        the Origin of the preflight check (a [server] cors_origins entry)`;

function usageError(message) {
  process.stderr.write(`openai_client: ${message}\n${USAGE}\n`);
  process.exit(2);
}

function parseArgs(argv) {
  const opts = {
    baseUrl: undefined,
    apiKey: process.env.OPENAI_API_KEY,
    model: undefined,
    nodeModules: process.env.TANDEM_NODE_MODULES ||
      (process.env.NODE_PATH ? process.env.NODE_PATH.split(path.delimiter)[0] : undefined),
    timeoutS: 60,
    checks: DEFAULT_CHECKS,
    maxTokens: 8,
    origin: 'https://chat.example.org',
  };
  const takes = {
    '--base-url': (v) => { opts.baseUrl = v; },
    '--api-key': (v) => { opts.apiKey = v; },
    '--model': (v) => { opts.model = v; },
    '--node-modules': (v) => { opts.nodeModules = v; },
    '--timeout': (v) => {
      opts.timeoutS = Number(v);
      if (!(opts.timeoutS > 0)) usageError(`--timeout: not a positive number: ${v}`);
    },
    '--checks': (v) => {
      opts.checks = v.split(',').map((s) => s.trim()).filter(Boolean);
      for (const c of opts.checks) {
        if (!ALL_CHECKS.includes(c)) usageError(`--checks: unknown check '${c}'`);
      }
    },
    '--origin': (v) => { opts.origin = v; },
    '--max-tokens': (v) => {
      opts.maxTokens = Number(v);
      if (!Number.isInteger(opts.maxTokens) || opts.maxTokens < 1) {
        usageError(`--max-tokens: not a positive integer: ${v}`);
      }
    },
  };
  for (let i = 0; i < argv.length; i++) {
    let arg = argv[i];
    if (arg === '-h' || arg === '--help') {
      process.stdout.write(`${USAGE}\n`);
      process.exit(0);
    }
    let value;
    const eq = arg.indexOf('=');
    if (arg.startsWith('--') && eq > 0) {
      value = arg.slice(eq + 1);
      arg = arg.slice(0, eq);
    }
    const take = takes[arg];
    if (!take) usageError(`unknown argument: ${arg}`);
    if (value === undefined) {
      if (i + 1 >= argv.length) usageError(`${arg} needs a value`);
      value = argv[++i];
    }
    take(value);
  }
  if (!opts.baseUrl) usageError('--base-url is required');
  if (!opts.apiKey) usageError('--api-key is required');
  if (!opts.model) usageError('--model is required');
  return opts;
}

// Loads the openai package: returns { OpenAI, AuthenticationError, version, from }.
async function loadOpenAI(nodeModules) {
  let mod;
  let from;
  let pkgFile;
  if (nodeModules) {
    const dir = path.resolve(nodeModules);
    // A require() rooted at a (non-existent) file inside DIR looks in DIR itself for packages.
    const require = createRequire(path.join(dir, 'tandem-resolve.js'));
    let entry;
    try {
      entry = require.resolve('openai');
    } catch (e) {
      throw new Error(`the openai package is not in ${dir} (scripts/install-node-deps.sh installs it ` +
        `and prints the folder): ${e.message.split('\n')[0]}`);
    }
    mod = require(entry);
    from = entry;
    pkgFile = path.join(dir, 'openai', 'package.json');
  } else {
    try {
      mod = await import('openai');
    } catch (e) {
      throw new Error('cannot find the openai package: pass --node-modules DIR or set ' +
        `TANDEM_NODE_MODULES (scripts/install-node-deps.sh prints DIR): ${e.message.split('\n')[0]}`);
    }
    from = 'import("openai")';
  }
  const OpenAI = mod.OpenAI ?? mod.default?.OpenAI ?? mod.default ?? mod;
  const AuthenticationError = mod.AuthenticationError ?? OpenAI.AuthenticationError;
  if (typeof OpenAI !== 'function' || typeof AuthenticationError !== 'function') {
    throw new Error(`${from} does not look like the openai package (no OpenAI / AuthenticationError)`);
  }
  let version = 'unknown';
  try {
    if (pkgFile) version = JSON.parse(readFileSync(pkgFile, 'utf8')).version;
  } catch {
    // the version is for the report only
  }
  return { OpenAI, AuthenticationError, version, from };
}

class CheckFailure extends Error {}

function expect(cond, message) {
  if (!cond) throw new CheckFailure(message);
}

const show = (v) => {
  const s = JSON.stringify(v);
  return s === undefined ? String(v) : (s.length > 200 ? `${s.slice(0, 200)}...` : s);
};

const isNonEmptyString = (v) => typeof v === 'string' && v.length > 0;
const isCount = (v) => Number.isInteger(v) && v >= 0;

function checkUsage(usage, where, maxTokens) {
  expect(usage && typeof usage === 'object', `${where}: no usage object (got ${show(usage)})`);
  const { prompt_tokens: p, completion_tokens: c, total_tokens: t } = usage;
  expect(isCount(p) && p > 0, `${where}: usage.prompt_tokens is not a positive integer: ${show(p)}`);
  expect(isCount(c), `${where}: usage.completion_tokens is not a non-negative integer: ${show(c)}`);
  expect(isCount(t), `${where}: usage.total_tokens is not a non-negative integer: ${show(t)}`);
  expect(t === p + c, `${where}: usage.total_tokens ${t} != prompt_tokens ${p} + completion_tokens ${c}`);
  expect(c <= maxTokens, `${where}: usage.completion_tokens ${c} exceeds max_tokens ${maxTokens}`);
  return { prompt_tokens: p, completion_tokens: c, total_tokens: t };
}

function checkFinishReason(reason, where) {
  expect(FINISH_REASONS.includes(reason),
    `${where}: finish_reason is not one of ${FINISH_REASONS.join('/')}: ${show(reason)}`);
}

const MESSAGES = [{ role: 'user', content: 'Say hello in one word.' }];

async function checkChat(ctx) {
  const { client, opts } = ctx;
  const r = await client.chat.completions.create({
    model: opts.model, messages: MESSAGES, max_tokens: opts.maxTokens, temperature: 0,
  }, ctx.requestOptions());
  expect(isNonEmptyString(r.id), `id is not a non-empty string: ${show(r.id)}`);
  expect(r.object === 'chat.completion', `object is not 'chat.completion': ${show(r.object)}`);
  expect(Number.isInteger(r.created), `created is not an integer: ${show(r.created)}`);
  expect(typeof r.model === 'string', `model is not a string: ${show(r.model)}`);
  expect(Array.isArray(r.choices) && r.choices.length === 1,
    `choices is not an array of one choice: ${show(r.choices)}`);
  const choice = r.choices[0];
  expect(choice.index === 0, `choices[0].index is not 0: ${show(choice.index)}`);
  expect(choice.message && choice.message.role === 'assistant',
    `choices[0].message.role is not 'assistant': ${show(choice.message)}`);
  expect(typeof choice.message.content === 'string',
    `choices[0].message.content is not a string: ${show(choice.message.content)}`);
  checkFinishReason(choice.finish_reason, 'choices[0]');
  const usage = checkUsage(r.usage, 'response', opts.maxTokens);
  if (choice.finish_reason === 'length') {
    expect(usage.completion_tokens === opts.maxTokens,
      `finish_reason 'length' but completion_tokens ${usage.completion_tokens} != max_tokens ${opts.maxTokens}`);
  }
  return { id: r.id, model: r.model, finish_reason: choice.finish_reason,
    content: choice.message.content, usage };
}

async function checkStream(ctx) {
  const { client, opts, notes } = ctx;
  const reqOpts = ctx.requestOptions();
  const stream = await client.chat.completions.create({
    model: opts.model, messages: MESSAGES, max_tokens: opts.maxTokens, temperature: 0,
    stream: true, stream_options: { include_usage: true },
  }, reqOpts);
  const chunks = [];
  let text = '';
  let finishReason = null;
  let firstRole = null;
  for await (const chunk of stream) {
    const n = chunks.length;
    chunks.push(chunk);
    expect(chunk.object === 'chat.completion.chunk',
      `chunk ${n}: object is not 'chat.completion.chunk': ${show(chunk.object)}`);
    expect(isNonEmptyString(chunk.id), `chunk ${n}: id is not a non-empty string: ${show(chunk.id)}`);
    expect(Array.isArray(chunk.choices), `chunk ${n}: choices is not an array: ${show(chunk.choices)}`);
    for (const choice of chunk.choices) {
      expect(choice.index === 0, `chunk ${n}: choice index is not 0: ${show(choice.index)}`);
      const delta = choice.delta;
      expect(delta && typeof delta === 'object', `chunk ${n}: choice has no delta: ${show(choice)}`);
      if (delta.role !== undefined && delta.role !== null) {
        expect(delta.role === 'assistant', `chunk ${n}: delta.role is not 'assistant': ${show(delta.role)}`);
        firstRole ??= n;
      }
      if (delta.content !== undefined && delta.content !== null) {
        expect(typeof delta.content === 'string',
          `chunk ${n}: delta.content is not a string: ${show(delta.content)}`);
        text += delta.content;
      }
      if (choice.finish_reason !== undefined && choice.finish_reason !== null) {
        expect(finishReason === null, `chunk ${n}: a second finish_reason ${show(choice.finish_reason)}`);
        checkFinishReason(choice.finish_reason, `chunk ${n}`);
        finishReason = choice.finish_reason;
      }
    }
  }
  // The client ends the iteration quietly when the signal aborts it: a stalled stream.
  expect(!reqOpts.signal.aborted,
    `the stream stalled: no end within ${opts.timeoutS} s, after ${chunks.length} chunks (text so far ${show(text)})`);
  expect(chunks.length > 0, 'the stream had no chunks');
  expect(text.length > 0, `no text arrived in ${chunks.length} chunks`);
  expect(finishReason !== null, `no finish_reason arrived in ${chunks.length} chunks`);
  const last = chunks[chunks.length - 1];
  const usage = checkUsage(last.usage, `last chunk (${chunks.length - 1})`, opts.maxTokens);
  for (let i = 0; i < chunks.length - 1; i++) {
    expect(chunks[i].usage === undefined || chunks[i].usage === null,
      `chunk ${i} carries usage before the last chunk: ${show(chunks[i].usage)}`);
  }
  // Held loosely: the OpenAI API does these, and not every compatible server does.
  if (last.choices.length !== 0) notes.push('stream: the usage chunk has non-empty choices (OpenAI sends choices: [])');
  if (firstRole !== 0) notes.push(`stream: delta.role 'assistant' ${firstRole === null ? 'never arrives' : `first arrives in chunk ${firstRole}`}, not in chunk 0`);
  const ids = new Set(chunks.map((c) => c.id));
  if (ids.size !== 1) notes.push(`stream: chunks carry ${ids.size} different ids (OpenAI uses one per stream)`);
  return { chunks: chunks.length, text, finish_reason: finishReason, usage };
}

async function checkCompletion(ctx) {
  const { client, opts } = ctx;
  const r = await client.completions.create({
    model: opts.model, prompt: 'Once upon a time', max_tokens: opts.maxTokens, temperature: 0,
  }, ctx.requestOptions());
  expect(isNonEmptyString(r.id), `id is not a non-empty string: ${show(r.id)}`);
  expect(r.object === 'text_completion', `object is not 'text_completion': ${show(r.object)}`);
  expect(Number.isInteger(r.created), `created is not an integer: ${show(r.created)}`);
  expect(Array.isArray(r.choices) && r.choices.length === 1,
    `choices is not an array of one choice: ${show(r.choices)}`);
  const choice = r.choices[0];
  expect(choice.index === 0, `choices[0].index is not 0: ${show(choice.index)}`);
  expect(typeof choice.text === 'string', `choices[0].text is not a string: ${show(choice.text)}`);
  checkFinishReason(choice.finish_reason, 'choices[0]');
  const usage = checkUsage(r.usage, 'response', opts.maxTokens);
  return { id: r.id, finish_reason: choice.finish_reason, text: choice.text, usage };
}

async function checkAuth(ctx) {
  const { OpenAI, AuthenticationError, opts, clientOptions } = ctx;
  const wrongKey = `${opts.apiKey}-wrong`;
  const bad = new OpenAI({ ...clientOptions, apiKey: wrongKey });
  let err;
  try {
    const r = await bad.chat.completions.create({
      model: opts.model, messages: MESSAGES, max_tokens: 1, temperature: 0,
    }, ctx.requestOptions());
    throw new CheckFailure(`a wrong key was accepted: got a response ${show(r)}`);
  } catch (e) {
    if (e instanceof CheckFailure) throw e;
    err = e;
  }
  expect(err instanceof AuthenticationError,
    `a wrong key got ${describeError(err, opts.timeoutS)}, not AuthenticationError`);
  expect(err.status === 401, `AuthenticationError with status ${show(err.status)}, not 401`);
  expect(typeof err.message === 'string' && err.message.length > 0, 'AuthenticationError without a message');
  return { status: err.status, message: err.message, type: err.type ?? null, code: err.code ?? null };
}

async function checkModels(ctx) {
  const { client, opts } = ctx;
  const ids = [];
  for await (const m of client.models.list(ctx.requestOptions())) {
    expect(m && isNonEmptyString(m.id), `a model entry without an id: ${show(m)}`);
    expect(m.object === 'model', `model ${show(m.id)}: object is not 'model': ${show(m.object)}`);
    ids.push(m.id);
    if (ids.length > 10000) break;
  }
  expect(ids.includes(opts.model), `models.list() does not contain ${show(opts.model)}: ${show(ids)}`);
  return { ids };
}

async function checkRetrieve(ctx) {
  const { client, opts, OpenAI } = ctx;
  const m = await client.models.retrieve(opts.model, ctx.requestOptions());
  expect(m.id === opts.model && m.object === 'model', `models.retrieve(${show(opts.model)}) gave ${show(m)}`);
  try {
    await client.models.retrieve(`${opts.model}-nope`, ctx.requestOptions());
  } catch (e) {
    expect(e instanceof OpenAI.NotFoundError, `another model id got ${describeError(e, opts.timeoutS)}, not NotFoundError`);
    return { id: m.id, other: e.status };
  }
  throw new CheckFailure('models.retrieve of an unknown id succeeded');
}

async function checkLogprobs(ctx) {
  const { client, opts } = ctx;
  const r = await client.chat.completions.create({
    model: opts.model, messages: MESSAGES, max_tokens: opts.maxTokens, temperature: 0, logprobs: true, top_logprobs: 2,
  }, ctx.requestOptions());
  const content = r.choices[0].logprobs?.content;
  expect(Array.isArray(content), `choices[0].logprobs.content is not an array: ${show(r.choices[0].logprobs)}`);
  expect(content.length > 0 && content.length <= r.usage.completion_tokens,
    `${content.length} logprobs for ${r.usage.completion_tokens} tokens`);
  for (const t of content) {
    expect(typeof t.token === 'string' && Array.isArray(t.bytes), `a logprob entry without token/bytes: ${show(t)}`);
    expect(typeof t.logprob === 'number' && t.logprob <= 0, `logprob ${show(t.logprob)} is not <= 0`);
    expect(t.top_logprobs.length === 2, `top_logprobs has ${t.top_logprobs.length} entries, not 2`);
    expect(t.top_logprobs[0].logprob >= t.top_logprobs[1].logprob, `top_logprobs not most likely first: ${show(t.top_logprobs)}`);
    expect(t.logprob <= t.top_logprobs[0].logprob + 1e-4, `the token is likelier than the most likely: ${show(t)}`);
  }
  return { tokens: content.length };
}

function checkResponse(r, where) {
  expect(isNonEmptyString(r.id) && r.id.startsWith('resp_'), `${where}: id ${show(r.id)}`);
  expect(r.object === 'response', `${where}: object ${show(r.object)}`);
  expect(['completed', 'incomplete'].includes(r.status), `${where}: status ${show(r.status)}`);
  expect(Array.isArray(r.output) && r.output.length > 0, `${where}: no output items`);
  const u = r.usage;
  expect(u && u.input_tokens > 0 && isCount(u.output_tokens) && u.total_tokens === u.input_tokens + u.output_tokens,
    `${where}: usage ${show(u)}`);
  expect(typeof r.output_text === 'string', `${where}: output_text ${show(r.output_text)}`);
}

async function checkResponses(ctx) {
  const { client, opts } = ctx;
  const r = await client.responses.create({
    model: opts.model, instructions: 'Be terse.', input: [{ role: 'developer', content: 'No markdown.' },
      { role: 'user', content: [{ type: 'input_text', text: 'Say hello.' }] }],
    max_output_tokens: opts.maxTokens, temperature: 0, store: false, reasoning: { summary: 'auto' },
    include: ['reasoning.encrypted_content'], prompt_cache_key: 'tandem-test',
  }, ctx.requestOptions());
  checkResponse(r, 'response');
  const message = r.output.find((i) => i.type === 'message');
  expect(message && message.content[0].type === 'output_text', `no message item with output_text: ${show(r.output)}`);
  return { status: r.status, output_text: r.output_text, usage: r.usage };
}

async function checkResponsesStream(ctx) {
  const { client, opts } = ctx;
  const types = [];
  let deltas = '';
  const stream = client.responses.stream({ model: opts.model, input: 'Say hello.', max_output_tokens: opts.maxTokens, temperature: 0 },
    ctx.requestOptions());
  for await (const e of stream) {
    types.push(e.type);
    if (e.type === 'response.output_text.delta') deltas += e.delta;
  }
  const r = await stream.finalResponse();
  checkResponse(r, 'final response');
  expect(types[0] === 'response.created', `first event ${show(types[0])}`);
  expect(['response.completed', 'response.incomplete'].includes(types.at(-1)), `last event ${show(types.at(-1))}`);
  for (const t of ['response.output_item.added', 'response.content_part.added', 'response.output_text.delta',
    'response.output_text.done', 'response.output_item.done']) {
    expect(types.includes(t), `no ${t} in ${show(types)}`);
  }
  expect(deltas === r.output_text, `deltas ${show(deltas)} are not output_text ${show(r.output_text)}`);
  return { events: types.length, status: r.status };
}

async function checkResponsesTool(ctx) {
  const { client, opts } = ctx;
  const tools = [{ type: 'function', name: 'get_weather', description: 'The weather in a city', strict: false,
    parameters: { type: 'object', properties: { city: { type: 'string' } }, required: ['city'] } },
  { type: 'web_search' }];
  const r = await client.responses.create({
    model: opts.model, input: [
      { role: 'user', content: 'Weather in Paris?' },
      { type: 'function_call', call_id: 'call_1', name: 'get_weather', arguments: '{"city":"Paris"}' },
      { type: 'function_call_output', call_id: 'call_1', output: 'Sunny' }],
    tools, tool_choice: 'auto', parallel_tool_calls: false, max_output_tokens: opts.maxTokens, temperature: 0,
  }, ctx.requestOptions());
  checkResponse(r, 'response');
  for (const item of r.output.filter((i) => i.type === 'function_call')) {
    expect(isNonEmptyString(item.call_id) && item.name === 'get_weather', `a function_call item ${show(item)}`);
  }
  return { status: r.status, items: r.output.map((i) => i.type) };
}

async function checkResponsesJson(ctx) {
  const { client, opts } = ctx;
  const schema = { type: 'object', properties: { ok: { type: 'boolean' } }, required: ['ok'], additionalProperties: false };
  const r = await client.responses.create({
    model: opts.model, input: 'Answer in JSON.', max_output_tokens: 64, temperature: 0,
    text: { format: { type: 'json_schema', name: 'answer', schema, strict: true } },
  }, ctx.requestOptions());
  checkResponse(r, 'response');
  expect(r.status === 'completed', `the JSON answer did not finish in 64 tokens: ${show(r.output_text)}`);
  let parsed;
  try {
    parsed = JSON.parse(r.output_text);
  } catch (e) {
    throw new CheckFailure(`output_text is not JSON: ${show(r.output_text)}`);
  }
  expect(typeof parsed.ok === 'boolean' && Object.keys(parsed).length === 1, `the JSON does not fit the schema: ${show(parsed)}`);
  return { output_text: r.output_text };
}

// What a browser does before a cross-origin POST with a key: fetch gives every header back, so
// the allow headers are checked by hand.
async function checkPreflight(ctx) {
  const { opts } = ctx;
  const url = `${opts.baseUrl.replace(/\/$/, '')}/chat/completions`;
  const r = await fetch(url, { method: 'OPTIONS', signal: AbortSignal.timeout(opts.timeoutS * 1000), headers: {
    Origin: opts.origin, 'Access-Control-Request-Method': 'POST', 'Access-Control-Request-Headers': 'authorization, content-type' } });
  expect(r.status === 204 || r.status === 200, `the preflight got ${r.status}`);
  expect(r.headers.get('access-control-allow-origin') === opts.origin,
    `Access-Control-Allow-Origin is ${show(r.headers.get('access-control-allow-origin'))}, not ${opts.origin}`);
  const allowed = (r.headers.get('access-control-allow-headers') ?? '').toLowerCase();
  for (const h of ['authorization', 'content-type', 'x-api-key']) expect(allowed.includes(h), `${h} not in ${show(allowed)}`);
  const other = await fetch(url, { method: 'OPTIONS', headers: { Origin: 'https://not-allowed.example', 'Access-Control-Request-Method': 'POST' } });
  expect(other.headers.get('access-control-allow-origin') === null, 'another origin was allowed');
  return { status: r.status };
}

const CHECKS = {
  chat: checkChat, stream: checkStream, completion: checkCompletion, auth: checkAuth, models: checkModels,
  retrieve: checkRetrieve, logprobs: checkLogprobs, responses: checkResponses, responses_stream: checkResponsesStream,
  responses_tool: checkResponsesTool, responses_json: checkResponsesJson, preflight: checkPreflight,
};

function describeError(e, timeoutS) {
  if (e instanceof CheckFailure) return e.message;
  if (e?.constructor?.name === 'APIUserAbortError' || e?.name === 'TimeoutError') {
    return `no complete answer within ${timeoutS} s (the request was aborted)`;
  }
  const name = e?.constructor?.name ?? 'Error';
  const status = e?.status !== undefined ? ` (status ${e.status})` : '';
  // fetch's errors nest: Connection error. <- fetch failed <- connect ECONNREFUSED 127.0.0.1:8080
  let text = `${name}${status}: ${e?.message ?? String(e)}`;
  for (let c = e?.cause, depth = 0; c && depth < 4; c = c.cause, depth++) {
    if (c.message) text += ` <- ${c.message}`;
  }
  return text;
}

async function main() {
  const opts = parseArgs(process.argv.slice(2));
  const report = {
    ok: false, base_url: opts.baseUrl, model: opts.model, openai: null, checks: {}, failed: [], notes: [],
  };
  const finish = (code) => {
    process.stdout.write(`${JSON.stringify(report)}\n`);
    process.exitCode = code;
  };

  // The whole run's deadline: requests have their own timeouts, this catches anything else.
  const deadlineMs = opts.timeoutS * 1000 * (ALL_CHECKS.length + 1);
  const watchdog = setTimeout(() => {
    report.failed.push('deadline');
    report.checks.deadline = { ok: false, error: `the run did not finish within ${deadlineMs / 1000} s` };
    process.stderr.write(`openai_client: FAIL deadline: the run did not finish within ${deadlineMs / 1000} s\n`);
    process.stdout.write(`${JSON.stringify(report)}\n`);
    process.exit(1);
  }, deadlineMs);
  watchdog.unref();

  let lib;
  try {
    lib = await loadOpenAI(opts.nodeModules);
  } catch (e) {
    report.failed.push('load');
    report.checks.load = { ok: false, error: e.message };
    process.stderr.write(`openai_client: FAIL load: ${e.message}\n`);
    return finish(1);
  }
  report.openai = lib.version;
  const clientOptions = {
    baseURL: opts.baseUrl,
    timeout: opts.timeoutS * 1000,
    maxRetries: 0, // a retry would hide a failed first attempt, and multiply the time
  };
  const ctx = {
    ...lib, opts, notes: report.notes, clientOptions,
    client: new lib.OpenAI({ ...clientOptions, apiKey: opts.apiKey }),
    // `timeout` covers a request until its headers; the signal covers a streamed body as well.
    requestOptions: () => ({ signal: AbortSignal.timeout(opts.timeoutS * 1000) }),
  };
  for (const name of opts.checks) {
    const t0 = performance.now();
    try {
      const detail = await CHECKS[name](ctx);
      report.checks[name] = { ok: true, ms: Math.round(performance.now() - t0), ...detail };
    } catch (e) {
      const error = describeError(e, opts.timeoutS);
      report.checks[name] = { ok: false, ms: Math.round(performance.now() - t0), error };
      report.failed.push(name);
      process.stderr.write(`openai_client: FAIL ${name}: ${error}\n`);
    }
  }
  clearTimeout(watchdog);
  report.ok = report.failed.length === 0;
  return finish(report.ok ? 0 : 1);
}

main().catch((e) => {
  process.stderr.write(`openai_client: internal error: ${e?.stack ?? e}\n`);
  process.exit(1);
});
