// `tandem bench --url`: decode and prefill speed, time to first token and aggregate decode speed
// of any OpenAI-compatible server (tandem, llama.cpp's llama-server), measured by one client
// through the same HTTP API, so the figures of different servers compare (BENCH.md).
#pragma once

#include <string>
#include <vector>

#include "common/status.h"

namespace tandem::bench {

struct BenchOptions {
  std::string url = "http://127.0.0.1:8080";      // base URL, without /v1
  std::string key;                                // API key; "" sends none
  std::string model;                              // "" = the first of /v1/models
  int runs = 5;                                   // repetitions per figure; the median is reported
  int gen_tokens = 128;                           // generated tokens for decode figures
  std::vector<int> prefill_tokens = {512, 4096};  // prompt sizes for prefill figures
  int ttft_tokens = 512;                          // prompt size for decode and time to first token
  std::vector<int> decode_after;                  // further prompt sizes after which decode is measured
  std::vector<int> concurrency = {4};             // streams of the aggregate figures, the first's is aggregate_tps
  int timeout_s = 600;                            // per request
  // The prompt cache's figures (0: none): this many conversations of `conversation_tokens` each
  // take turns, `turns` times round-robin, each turn adding `turn_tokens`; on a server with one
  // slot, every turn after a conversation's first comes back to a slot another one took.
  int conversations = 0;
  int conversation_tokens = 8192;
  int turn_tokens = 200;
  int turns = 3;
  bool only_conversations = false;  // skip the other figures
};

// A figure over the runs: median and spread.
struct Figure {
  // e.g. "decode_tps", "decode_tps_after_16384", "prefill_tps_512", "ttft_ms", "aggregate_tps", "aggregate_tps_16"
  std::string name;
  std::string unit;  // "tok/s" or "ms"
  double median = 0, min = 0, max = 0;
  std::vector<double> samples;
};

struct BenchResult {
  std::string model;
  std::vector<Figure> figures;
  const Figure* find(const std::string& name) const;
};

// The conversations' figures (BenchOptions::conversations), medians over every turn of their kind:
// cold_ttft_ms (a conversation's first turn), returning_ttft_ms (a turn that comes back after the
// others took the slot), continuing_ttft_ms (a turn right after the same conversation's last, which
// restores nothing). Against a tandem server (its /health with the key): returning_link_bytes and
// continuing_link_bytes (what crossed the link during such turns), link_bytes_per_restore (a
// returning turn's link bytes less the continuing ones' median, at least 0), link_bytes_per_save (what crossed while a
// state was saved after its turn), state_kv_bytes and state_worker_kv_bytes (a saved state's size,
// and the workers' part of it).
// Against a tandem server with speculative decoding on: spec_acceptance_length (1 + accepted ÷
// checking steps over the figures' requests), spec_drafted_tokens and spec_accepted_tokens.
// Runs every figure against the server. An error names the request that failed and the server's
// answer (e.g. 401 with its message, a connection refused).
Result<BenchResult> run_bench(const BenchOptions& options);

std::string format_result(const BenchResult& result);
std::string result_to_json(const BenchResult& result, int indent = 2);

}  // namespace tandem::bench
