#include "link/counters.h"

#include <algorithm>
#include <vector>

namespace tandem::link {

void LatencyStats::record(double ms) {
  std::lock_guard<std::mutex> lock(mutex_);
  recent_.push_back(ms);
  if (recent_.size() > 255) recent_.pop_front();
  totals_.min_ms = totals_.samples == 0 ? ms : std::min(totals_.min_ms, ms);
  totals_.max_ms = std::max(totals_.max_ms, ms);
  totals_.last_ms = ms;
  ++totals_.samples;
}

LatencySnapshot LatencyStats::snapshot() const {
  std::lock_guard<std::mutex> lock(mutex_);
  LatencySnapshot s = totals_;
  if (!recent_.empty()) {
    std::vector<double> v(recent_.begin(), recent_.end());
    std::nth_element(v.begin(), v.begin() + v.size() / 2, v.end());
    s.median_ms = v[v.size() / 2];
  }
  return s;
}

}  // namespace tandem::link
