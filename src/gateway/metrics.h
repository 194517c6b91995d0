// Counters and histograms of the HTTP front end, rendered in Prometheus' text format.
#pragma once

#include <array>
#include <cstdint>
#include <map>
#include <mutex>
#include <string>

#include "gateway/prometheus.h"
#include "gateway/serve_state.h"

namespace tandem::gateway {

// Thread-safe.
class Metrics {
 public:
  // One request ended with `http_status` after `seconds`; `ttft_seconds` < 0 when no token came.
  // A stream cut by an error after its 200 counts with the error's status.
  void request_finished(const std::string& endpoint, int http_status, double seconds, double ttft_seconds = -1);
  void tokens(uint64_t prompt, uint64_t completion);
  void set_in_flight(int n);
  // The front end's metric families in Prometheus text exposition format (version 0.0.4), with
  // `state` (the one /health answers) as tandem_state.
  std::string render(ServeState state);

 private:
  static constexpr std::array<double, 10> kLatency = {0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 120};
  static constexpr std::array<double, 10> kTtft = {0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 60};
  using Histogram = prometheus::Histogram<10>;
  std::mutex mutex_;
  std::map<std::pair<std::string, int>, uint64_t> requests_;  // guarded by mutex_
  std::map<std::string, Histogram> latency_, ttft_;           // by endpoint; guarded by mutex_
  uint64_t prompt_tokens_ = 0, completion_tokens_ = 0;        // guarded by mutex_
  int in_flight_ = 0;                                         // guarded by mutex_
};

}  // namespace tandem::gateway
