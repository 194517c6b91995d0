// One-shot generation through libllama: load a model, run one prompt, report tokens and timings.
// The first slice of the engine, used by `tandem engine --prompt`, the demo and the tests.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "common/status.h"
#include "datapath/head_session.h"
#include "engine/model_loader.h"

namespace tandem::engine {

struct GenerateOptions {
  std::string model;  // GGUF path (first split of a split model)
  std::string prompt;
  int n_predict = 32;  // tokens to generate at most (stops early at end-of-generation)
  int n_ctx = 512;
  int threads = 0;     // 0: all cores
  bool greedy = true;  // false: sample with `temperature` and `seed`
  float temperature = 0.8f;
  uint32_t seed = 42;
  bool ignore_eos = false;  // keep generating past end-of-generation tokens (benchmarks)
  int chunk_tokens = 0;     // > 0: also time each run of this many generated tokens (soaks: a stall shows)
  Placement placement;      // where the layers go (default: all on the local GPUs, else CPU)
};

struct GenerateResult {
  std::string text;             // the generated text, without the prompt
  std::vector<int32_t> tokens;  // the generated token ids
  int n_prompt_tokens = 0;
  double load_s = 0, prefill_s = 0, decode_s = 0;
  double prefill_tps = 0, decode_tps = 0;                  // tokens per second; decode excludes the first token
  std::vector<double> chunk_tps;                           // decode speed of each chunk_tokens-token run
  datapath::SplitProfile prefill_profile, decode_profile;  // where the scheduler's time went in each phase
  datapath::HeadStats datapath;                            // what the data path did, load to last token
  bool embedding_on_worker = false;  // the token embedding moved to a worker (datapath/worker_embedding.h)
};

// Loads the model, generates, frees everything. Errors say which step failed (load, context,
// tokenize, decode) with libllama's own reason where it gave one.
Result<GenerateResult> generate(const GenerateOptions& options);

// `result` as `tandem engine --prompt --json` prints it (docs/cli.md): text, tokens, timings, the
// split profiles, and what the data path did (inputs reused, slotted, staged, relayed, sent as runs;
// worker results made on the head; the embedding moved).
std::string generate_result_json(const GenerateResult& result);

}  // namespace tandem::engine
