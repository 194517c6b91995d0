#include "bench/bench.h"

#include <httplib.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <future>
#include <nlohmann/json.hpp>
#include <random>

namespace tandem::bench {
namespace {

using nlohmann::json;
using Clock = std::chrono::steady_clock;

struct StreamStats {
  double ttft_s = 0;          // request sent -> first token
  double decode_s = 0;        // first token -> last token
  int completion_tokens = 0;  // from the usage chunk
  int prompt_tokens = 0;
};

class Client {
 public:
  explicit Client(const BenchOptions& o) : o_(o), http_(o.url) {
    http_.set_connection_timeout(10, 0);
    http_.set_read_timeout(o.timeout_s, 0);
  }

  Result<std::string> first_model() {
    auto r = http_.Get("/v1/models", headers());
    if (!r) return Status::unavailable(o_.url + "/v1/models: " + httplib::to_string(r.error()));
    if (r->status != 200)
      return Status::unavailable(o_.url + "/v1/models: HTTP " + std::to_string(r->status) + ": " + r->body);
    auto j = json::parse(r->body, nullptr, false);
    if (!j.is_object() || !j.contains("data") || j["data"].empty())
      return Status::invalid_argument(o_.url + "/v1/models lists no model");
    return j["data"][0].value("id", std::string());
  }

  // One streaming completion of `max_tokens` after `prompt`, timed on the chunks as they arrive.
  Result<StreamStats> stream(const std::string& prompt, int max_tokens) {
    json body = {{"model", o_.model},
                 {"prompt", prompt},
                 {"max_tokens", max_tokens},
                 {"temperature", 0},
                 {"stream", true},
                 {"ignore_eos", true},
                 {"stream_options", {{"include_usage", true}}}};
    StreamStats s;
    std::string buffer;
    Clock::time_point first{}, last{};
    const auto sent = Clock::now();
    bool seen = false;
    httplib::Request req;
    req.method = "POST";
    req.path = "/v1/completions";
    req.headers = headers();
    req.set_header("Content-Type", "application/json");
    req.body = body.dump();
    req.content_receiver = [&](const char* data, size_t n, uint64_t, uint64_t) {
      buffer.append(data, n);
      for (size_t end; (end = buffer.find("\n\n")) != std::string::npos; buffer.erase(0, end + 2)) {
        const std::string event = buffer.substr(0, end);
        if (event.rfind("data: ", 0) != 0 || event == "data: [DONE]") continue;
        auto j = json::parse(event.substr(6), nullptr, false);
        if (!j.is_object()) continue;
        if (j.contains("usage") && j["usage"].is_object()) {
          s.completion_tokens = j["usage"].value("completion_tokens", 0);
          s.prompt_tokens = j["usage"].value("prompt_tokens", 0);
        }
        if (j.contains("choices") && !j["choices"].empty() && !j["choices"][0].value("text", std::string()).empty()) {
          last = Clock::now();
          if (!seen) first = last;
          seen = true;
        }
      }
      return true;
    };
    auto r = http_.send(req);
    if (!r) return Status::unavailable(o_.url + "/v1/completions: " + httplib::to_string(r.error()));
    if (r->status != 200)
      return Status::unavailable(o_.url + "/v1/completions: HTTP " + std::to_string(r->status) + ": " + r->body);
    if (!seen) return Status::internal(o_.url + "/v1/completions: the stream carried no token");
    if (s.completion_tokens == 0)
      return Status::internal(o_.url + ": the stream carried no usage (stream_options.include_usage)");
    s.ttft_s = std::chrono::duration<double>(first - sent).count();
    s.decode_s = std::chrono::duration<double>(last - first).count();
    return s;
  }

 private:
  httplib::Headers headers() const {
    if (o_.key.empty()) return {};
    return {{"Authorization", "Bearer " + o_.key}};
  }
  const BenchOptions& o_;
  httplib::Client http_;
};

// A prompt of about `tokens` tokens that no earlier request shares a prefix with, so every run
// measures a cold prompt (servers reuse cached prefixes).
std::string prompt_of(int tokens, std::mt19937& rng) {
  std::string p = "Run " + std::to_string(rng()) + ":";
  for (int i = 1; i < tokens; ++i) p += " the";
  return p;
}

Figure summarize(const std::string& name, const std::string& unit, std::vector<double> samples) {
  Figure f;
  f.name = name;
  f.unit = unit;
  f.samples = samples;
  std::sort(samples.begin(), samples.end());
  if (!samples.empty()) {
    const size_t n = samples.size();
    f.median = n % 2 ? samples[n / 2] : (samples[n / 2 - 1] + samples[n / 2]) / 2;
    f.min = samples.front();
    f.max = samples.back();
  }
  return f;
}

}  // namespace

const Figure* BenchResult::find(const std::string& name) const {
  for (const Figure& f : figures) {
    if (f.name == name) return &f;
  }
  return nullptr;
}

Result<BenchResult> run_bench(const BenchOptions& in) {
  if (in.runs < 1 || in.gen_tokens < 2 || in.concurrency.empty()) {
    return Status::invalid_argument("runs and concurrency must be at least 1, generated tokens at least 2");
  }
  for (int n : in.concurrency) {
    if (n < 1) return Status::invalid_argument("concurrency must be at least 1, got " + std::to_string(n));
  }
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
