#include "engine/llama_log.h"

#include <atomic>
#include <cstdio>
#include <mutex>

#include "common/log.h"
#include "llama.h"

namespace tandem::engine {
namespace {

std::atomic<int> verbosity{0};
std::mutex error_mutex;
std::string last_error;  // guarded by error_mutex

void on_log(ggml_log_level level, const char* text, void*) {
  if (level == GGML_LOG_LEVEL_ERROR) {
    std::string line(text);
    while (!line.empty() && (line.back() == '\n' || line.back() == ' ')) line.pop_back();
    std::lock_guard<std::mutex> lock(error_mutex);
    if (!line.empty()) last_error = line;
  }
  const int v = verbosity.load();
  const bool show = level == GGML_LOG_LEVEL_ERROR || (v >= 1 && level == GGML_LOG_LEVEL_WARN) || v >= 2;
  if (!show) return;
  if (log::format() == log::Format::text) {
    std::fputs(text, stderr);
    return;
  }
  // JSON: one record per line; libllama sends lines in pieces (GGML_LOG_LEVEL_CONT), so collect them.
  static std::mutex pending_mutex;
  static std::string pending;
  std::lock_guard<std::mutex> lock(pending_mutex);
  pending += text;
  for (size_t nl; (nl = pending.find('\n')) != std::string::npos;) {
    const std::string line = pending.substr(0, nl);
    pending.erase(0, nl + 1);
    if (line.empty()) continue;
    const log::Level l = level == GGML_LOG_LEVEL_ERROR  ? log::Level::error
                         : level == GGML_LOG_LEVEL_WARN ? log::Level::warn
                                                        : log::Level::debug;
    log::write(l, "llama", line);
  }
}

}  // namespace

void set_llama_verbosity(int level) {
  verbosity = level;
  llama_log_set(on_log, nullptr);
}

std::string take_last_llama_error() {
  std::lock_guard<std::mutex> lock(error_mutex);
  std::string e;
  e.swap(last_error);
  return e;
}

std::string with_llama_reason(const std::string& what) {
  const std::string reason = take_last_llama_error();
  return reason.empty() ? what : what + ": " + reason;
}

}  // namespace tandem::engine
