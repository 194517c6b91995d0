#include "bench/client.h"

#include <algorithm>
#include <chrono>

namespace tandem::bench {

using nlohmann::json;
using Clock = std::chrono::steady_clock;

Client::Client(const BenchOptions& o) : o_(o), http_(o.url) {
  http_.set_connection_timeout(10, 0);
  http_.set_read_timeout(o.timeout_s, 0);
}

Result<std::string> Client::first_model() {
  auto r = http_.Get("/v1/models", headers());
  if (!r) return Status::unavailable(o_.url + "/v1/models: " + httplib::to_string(r.error()));
  if (r->status != 200)
    return Status::unavailable(o_.url + "/v1/models: HTTP " + std::to_string(r->status) + ": " + r->body);
  auto j = json::parse(r->body, nullptr, false);
  if (!j.is_object() || !j.contains("data") || j["data"].empty())
    return Status::invalid_argument(o_.url + "/v1/models lists no model");
  return j["data"][0].value("id", std::string());
}

Result<StreamStats> Client::stream(const std::string& prompt, int max_tokens) {
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
        const json& u = j["usage"];
        s.completion_tokens = u.value("completion_tokens", 0);
        s.prompt_tokens = u.value("prompt_tokens", 0);
        const json details = u.value("prompt_tokens_details", json::object());
        if (details.is_object()) s.cached_tokens = details.value("cached_tokens", 0);
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

std::optional<json> Client::health() {
  auto r = http_.Get("/health", headers());
  if (!r || (r->status != 200 && r->status != 503)) return std::nullopt;
  auto j = json::parse(r->body, nullptr, false);
  if (!j.is_object()) return std::nullopt;
  return j;
}

httplib::Headers Client::headers() const {
  if (o_.key.empty()) return {};
  return {{"Authorization", "Bearer " + o_.key}};
}

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

}  // namespace tandem::bench
