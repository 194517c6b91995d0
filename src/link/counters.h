// Byte and latency counters of the link. Thread-safe: written by splice and heartbeat threads,
// read by anyone.
#pragma once

#include <atomic>
#include <cstdint>
#include <deque>
#include <mutex>

namespace tandem::link {

struct ByteCounters {
  std::atomic<uint64_t> to_peer{0};    // bytes sent towards the remote side (head -> worker on a forwarder)
  std::atomic<uint64_t> from_peer{0};  // bytes received from the remote side
};

struct LatencySnapshot {
  uint64_t samples = 0;
  double last_ms = 0, min_ms = 0, median_ms = 0, max_ms = 0;  // median of the last 255 samples
};

// Round-trip times, e.g. of heartbeats.
class LatencyStats {
 public:
  void record(double ms);
  LatencySnapshot snapshot() const;

 private:
  mutable std::mutex mutex_;
  // guarded by mutex_
  std::deque<double> recent_;
  LatencySnapshot totals_;
};

}  // namespace tandem::link
