// Progress of a long operation (a model load can take 20 minutes) as people see it: a live bar
// on a terminal, a plain log line every few seconds otherwise, so it never looks like a hang.
#pragma once

#include <chrono>
#include <cstdint>
#include <cstdio>
#include <string>

namespace tandem {

struct ProgressSnapshot {
  uint64_t done = 0, total = 0;  // bytes
  double rate = 0;               // bytes per second, smoothed
  double eta_s = -1;             // seconds left; -1 when unknown
  double fraction() const { return total ? static_cast<double>(done) / static_cast<double>(total) : 0.0; }
};

// "12.3 GiB of 30.1 GiB (41%), 1.20 GiB/s, 15 s left"
std::string format_progress(const ProgressSnapshot& p);

// Tracks rate and ETA; not thread-safe (one owner updates and prints).
class ProgressMeter {
 public:
  using Clock = std::chrono::steady_clock;
  // `label` starts every line; `out` is where lines go; `tty` chooses the bar over log lines.
  ProgressMeter(std::string label, std::FILE* out, bool tty, std::chrono::seconds log_every = std::chrono::seconds(5));

  // Records that `done` of `total` bytes are through at `now`, printing when it is time to.
  void update(uint64_t done, uint64_t total, Clock::time_point now = Clock::now());
  // Prints the final line ("... done in 12.4 s").
  void finish(Clock::time_point now = Clock::now());
  const ProgressSnapshot& snapshot() const { return snap_; }

 private:
  std::string label_;
  std::FILE* out_;
  bool tty_;
  std::chrono::seconds log_every_;
  Clock::time_point start_{}, last_sample_{}, last_print_{};
  uint64_t last_done_ = 0;
  bool started_ = false;
  ProgressSnapshot snap_;
};

}  // namespace tandem
