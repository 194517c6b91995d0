#include "gateway/limiter.h"

#include <algorithm>

namespace tandem::gateway {

Admission Limiter::acquire(const std::string& key_id, const KeyLimits& limits, Clock::time_point now) {
  std::lock_guard<std::mutex> lock(mutex_);
  State& s = keys_[key_id];
  const auto window = std::chrono::minutes(1);
  while (!s.recent.empty() && now - s.recent.front() >= window) s.recent.pop_front();
  if (limits.concurrency > 0 && s.in_flight >= limits.concurrency) {
    return {false, 1,
            "this key already has " + std::to_string(s.in_flight) + " requests in flight (limit " +
                std::to_string(limits.concurrency) + ")"};
  }
  if (limits.rpm > 0 && static_cast<int>(s.recent.size()) >= limits.rpm) {
    const auto wait = std::chrono::duration_cast<std::chrono::seconds>(s.recent.front() + window - now).count() + 1;
    return {false, static_cast<int>(std::max<int64_t>(1, wait)),
            "this key made " + std::to_string(s.recent.size()) + " requests in the last minute (limit " +
                std::to_string(limits.rpm) + " per minute)"};
  }
  s.recent.push_back(now);
  ++s.in_flight;
  return {true, 0, ""};
}

void Limiter::release(const std::string& key_id) {
  std::lock_guard<std::mutex> lock(mutex_);
  auto it = keys_.find(key_id);
  if (it != keys_.end() && it->second.in_flight > 0) --it->second.in_flight;
}

int Limiter::in_flight(const std::string& key_id) {
  std::lock_guard<std::mutex> lock(mutex_);
  auto it = keys_.find(key_id);
  return it == keys_.end() ? 0 : it->second.in_flight;
}

}  // namespace tandem::gateway
