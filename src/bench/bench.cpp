#include "bench/bench.h"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <future>
#include <nlohmann/json.hpp>
#include <optional>
#include <random>
#include <thread>

#include "bench/client.h"

namespace tandem::bench {

using nlohmann::json;
using Clock = std::chrono::steady_clock;

const Figure* BenchResult::find(const std::string& name) const {
  for (const Figure& f : figures) {
    if (f.name == name) return &f;
  }
  return nullptr;
}

namespace {

// tandem's speculative decoding counters on /health; absent on other servers or with it off.
struct Drafts {
  double steps = 0, drafted = 0, accepted = 0;
};
std::optional<Drafts> read_drafts(Client& client) {
  const auto h = client.health();
  if (!h || !h->contains("speculative")) return std::nullopt;
  const nlohmann::json& s = (*h)["speculative"];
  if (s.value("mode", "off") == "off") return std::nullopt;
  return Drafts{s.value("steps", 0.0), s.value("drafted", 0.0), s.value("accepted", 0.0)};
}

// The counters once the last request's steps show: the gateway asks the engine for them every
// second, so they are read until two reads a poll apart agree.
std::optional<Drafts> settled_drafts(Client& client) {
  std::optional<Drafts> last = read_drafts(client);
  for (int i = 0; i < 5 && last; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(1200));
    std::optional<Drafts> now = read_drafts(client);
    if (now && now->steps == last->steps) return now;
    last = now;
  }
  return last;
}

// What speculative decoding did over the figures' requests: the tokens a checking step gave on
// average (spec_acceptance_length), and the drafted and accepted tokens (one sample each).
void speculation_figures(const std::optional<Drafts>& before, const std::optional<Drafts>& after, BenchResult* out) {
  if (!before || !after || after->steps <= before->steps) return;
  const double steps = after->steps - before->steps, accepted = after->accepted - before->accepted;
  out->figures.push_back(summarize("spec_acceptance_length", "tok", {1.0 + accepted / steps}));
  out->figures.push_back(summarize("spec_drafted_tokens", "tok", {after->drafted - before->drafted}));
  out->figures.push_back(summarize("spec_accepted_tokens", "tok", {accepted}));
}

// Decode, TTFT, decode after long prompts, prefill and aggregate figures.
Status standard_figures(Client& client, const BenchOptions& o, std::mt19937& rng, BenchResult* out) {
  BenchResult& result = *out;
  std::vector<double> decode, ttft;
  for (int r = 0; r < o.runs; ++r) {
    auto s = client.stream(prompt_of(o.ttft_tokens, rng), o.gen_tokens);
    if (!s.is_ok()) return s.status();
    if (s->decode_s > 0) decode.push_back((s->completion_tokens - 1) / s->decode_s);
    ttft.push_back(s->ttft_s * 1000);
  }
  result.figures.push_back(summarize("decode_tps", "tok/s", decode));
  result.figures.push_back(summarize("ttft_ms", "ms", ttft));
  // Decode over a long context reads its KV every token: what a long agent prompt leaves.
  for (int n : o.decode_after) {
    std::vector<double> after;
    for (int r = 0; r < o.runs; ++r) {
      auto s = client.stream(prompt_of(n, rng), o.gen_tokens);
      if (!s.is_ok()) return s.status();
      if (s->decode_s > 0) after.push_back((s->completion_tokens - 1) / s->decode_s);
    }
    result.figures.push_back(summarize("decode_tps_after_" + std::to_string(n), "tok/s", after));
  }
  for (int n : o.prefill_tokens) {
    std::vector<double> prefill;
    for (int r = 0; r < o.runs; ++r) {
      auto s = client.stream(prompt_of(n, rng), 2);
      if (!s.is_ok()) return s.status();
      if (s->ttft_s > 0) prefill.push_back(s->prompt_tokens / s->ttft_s);
    }
    result.figures.push_back(summarize("prefill_tps_" + std::to_string(n), "tok/s", prefill));
  }
  for (size_t c = 0; c < o.concurrency.size(); ++c) {
    const int streams_n = o.concurrency[c];
    std::vector<double> aggregate;
    for (int r = 0; r < o.runs; ++r) {
      const auto t0 = Clock::now();
      std::vector<std::future<Result<StreamStats>>> streams;
      std::vector<std::string> prompts;
      for (int i = 0; i < streams_n; ++i) prompts.push_back(prompt_of(o.ttft_tokens, rng));
      for (int i = 0; i < streams_n; ++i) {
        streams.push_back(
            std::async(std::launch::async, [&o, p = prompts[i]] { return Client(o).stream(p, o.gen_tokens); }));
      }
      int tokens = 0;
      Status failed = Status::ok();
      for (auto& f : streams) {  // every stream is waited for, failed or not
        auto s = f.get();
        if (!s.is_ok() && failed.is_ok()) failed = s.status();
        if (s.is_ok()) tokens += s->completion_tokens;
      }
      if (!failed.is_ok()) return failed;
      aggregate.push_back(tokens / std::chrono::duration<double>(Clock::now() - t0).count());
    }
    result.figures.push_back(
        summarize(c == 0 ? "aggregate_tps" : "aggregate_tps_" + std::to_string(streams_n), "tok/s", aggregate));
  }
  return Status::ok();
}

}  // namespace

Result<BenchResult> run_bench(const BenchOptions& in) {
  if (in.runs < 1 || in.gen_tokens < 2 || in.concurrency.empty()) {
    return Status::invalid_argument("runs and concurrency must be at least 1, generated tokens at least 2");
  }
  for (int n : in.concurrency) {
    if (n < 1) return Status::invalid_argument("concurrency must be at least 1, got " + std::to_string(n));
  }
  if (in.conversations < 0 ||
      (in.conversations > 0 && (in.conversation_tokens < 2 || in.turn_tokens < 1 || in.turns < 1)))
    return Status::invalid_argument("conversations need at least 2 tokens each, turns of at least 1 token, and 1 turn");
  if (in.only_conversations && in.conversations == 0)
    return Status::invalid_argument("--only-conversations needs --conversations N");
  for (int n : in.decode_after) {
    if (n < 1)
      return Status::invalid_argument("--decode-after prompt sizes must be positive, got " + std::to_string(n));
  }
  BenchOptions o = in;
  Client client(o);
  if (o.model.empty()) {
    auto m = client.first_model();
    if (!m.is_ok()) return m.status();
    o.model = m.value();
  }
  std::mt19937 rng(12345);
  BenchResult result;
  result.model = o.model;
  if (!o.only_conversations) {
    const auto before = settled_drafts(client);
    Status s = standard_figures(client, o, rng, &result);
    if (!s.is_ok()) return s;
    speculation_figures(before, before ? settled_drafts(client) : std::nullopt, &result);
  }
  if (o.conversations > 0) {
    Status s = conversation_figures(client, o, rng, &result);
    if (!s.is_ok()) return s;
  }
  return result;
}

std::string format_result(const BenchResult& r) {
  std::string out = "model " + r.model + "\n";
  char line[160];
  std::snprintf(line, sizeof line, "%-24s %12s %12s %12s  %s\n", "figure", "median", "min", "max", "unit");
  out += line;
  for (const Figure& f : r.figures) {
    std::snprintf(line, sizeof line, "%-24s %12.1f %12.1f %12.1f  %s\n", f.name.c_str(), f.median, f.min, f.max,
                  f.unit.c_str());
    out += line;
  }
  return out;
}

std::string result_to_json(const BenchResult& r, int indent) {
  json j = {{"model", r.model}, {"figures", json::object()}};
  for (const Figure& f : r.figures) {
    j["figures"][f.name] = {
        {"median", f.median}, {"min", f.min}, {"max", f.max}, {"unit", f.unit}, {"samples", f.samples}};
  }
  return j.dump(indent);
}

}  // namespace tandem::bench
