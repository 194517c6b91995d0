// The benchmark's HTTP client and helpers, shared by its figures (bench.cpp, conversations.cpp).
// Private to the bench component.
#pragma once

#include <httplib.h>

#include <nlohmann/json.hpp>
#include <optional>
#include <random>
#include <string>
#include <vector>

#include "bench/bench.h"

namespace tandem::bench {

struct StreamStats {
  double ttft_s = 0;          // request sent -> first token
  double decode_s = 0;        // first token -> last token
  int completion_tokens = 0;  // from the usage chunk
  int prompt_tokens = 0;
  int cached_tokens = 0;  // usage.prompt_tokens_details.cached_tokens, where the server reports it
};

class Client {
 public:
  explicit Client(const BenchOptions& o);
  Result<std::string> first_model();
  // One streaming completion of `max_tokens` after `prompt`, timed on the chunks as they arrive.
  Result<StreamStats> stream(const std::string& prompt, int max_tokens);
  // GET /health with the key: tandem's details (nodes, prompt_cache); nullopt when it does not
  // answer 200 or 503 with a JSON object.
  std::optional<nlohmann::json> health();

 private:
  httplib::Headers headers() const;
  const BenchOptions& o_;
  httplib::Client http_;
};

// A prompt of about `tokens` tokens that no earlier request shares a prefix with, so every run
// measures a cold prompt (servers reuse cached prefixes).
std::string prompt_of(int tokens, std::mt19937& rng);

Figure summarize(const std::string& name, const std::string& unit, std::vector<double> samples);

// The figures of BenchOptions::conversations, appended to `out` (conversations.cpp).
Status conversation_figures(Client& client, const BenchOptions& o, std::mt19937& rng, BenchResult* out);

}  // namespace tandem::bench
