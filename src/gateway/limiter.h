// Per-key admission: requests per minute (sliding window) and requests in flight.
#pragma once

#include <chrono>
#include <deque>
#include <map>
#include <mutex>
#include <string>

#include "gateway/keys.h"

namespace tandem::gateway {

// The outcome of asking to start one request.
struct Admission {
  bool admitted = false;
  int retry_after_s = 0;  // when refused: seconds until a retry can succeed
  std::string reason;     // when refused: which limit, in words
};

// Thread-safe. Time is injected so tests are deterministic.
class Limiter {
 public:
  using Clock = std::chrono::steady_clock;

  // Admits one request of `key_id` under `limits` at `now`; on success the caller must call
  // release() when the request ends.
  Admission acquire(const std::string& key_id, const KeyLimits& limits, Clock::time_point now = Clock::now());
  void release(const std::string& key_id);
  int in_flight(const std::string& key_id);

 private:
  struct State {
    std::deque<Clock::time_point> recent;  // admissions within the last minute
    int in_flight = 0;
  };
  std::mutex mutex_;
  std::map<std::string, State> keys_;  // guarded by mutex_
};

}  // namespace tandem::gateway
