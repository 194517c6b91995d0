#include "engine/llama_log.h"

#include <atomic>
#include <cstdio>
#include <mutex>

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
  if (show) std::fputs(text, stderr);
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
