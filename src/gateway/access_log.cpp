#include "gateway/access_log.h"

#include <httplib.h>

#include <cstdio>

#include "common/log.h"

namespace tandem::gateway::access_log {
namespace {

thread_local Note current;

std::string millis(double seconds) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.1f", seconds * 1e3);
  return buf;
}

}  // namespace

void begin() { current = Note(); }

Note& note() { return current; }

void write(const httplib::Request& req, const httplib::Response& res) {
  if (req.method == "GET" && (req.path == "/health" || req.path == "/metrics")) return;
  const Note& n = current;
  const int status = n.status != 0 ? n.status : res.status;
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - n.started).count();
  log::Fields fields = {{"key", n.key}, {"route", req.path}, {"status", std::to_string(status)}};
  if (!n.model.empty()) fields.emplace_back("model", n.model);
  if (n.prompt_tokens || n.completion_tokens) {
    fields.emplace_back("prompt_tokens", std::to_string(n.prompt_tokens));
    fields.emplace_back("completion_tokens", std::to_string(n.completion_tokens));
    fields.emplace_back("cached_tokens", std::to_string(n.cached_tokens));
  }
  if (n.ttft_s >= 0) fields.emplace_back("ttft_ms", millis(n.ttft_s));
  fields.emplace_back("duration_ms", millis(seconds));
  log::info("access", req.method + " " + req.path + " " + std::to_string(status), fields);
}

}  // namespace tandem::gateway::access_log
