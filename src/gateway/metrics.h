// Counters and histograms of the HTTP front end, rendered in Prometheus' text format.
#pragma once

#include <array>
#include <cstdint>
#include <map>
#include <mutex>
#include <string>

namespace tandem::gateway {

// Thread-safe.
class Metrics {
 public:
  void request_finished(const std::string& endpoint, int http_status, double seconds);
  void tokens(uint64_t prompt, uint64_t completion);
  void set_in_flight(int n);
  // The metrics in Prometheus text exposition format (version 0.0.4).
  std::string render();

 private:
  static constexpr std::array<double, 10> kBuckets = {0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 120};
  struct Histogram {
    std::array<uint64_t, kBuckets.size()> counts{};
    uint64_t count = 0;
    double sum = 0;
  };
  std::mutex mutex_;
  std::map<std::pair<std::string, int>, uint64_t> requests_;  // guarded by mutex_
  std::map<std::string, Histogram> latency_;                   // guarded by mutex_
  uint64_t prompt_tokens_ = 0, completion_tokens_ = 0;         // guarded by mutex_
  int in_flight_ = 0;                                          // guarded by mutex_
};

}  // namespace tandem::gateway
