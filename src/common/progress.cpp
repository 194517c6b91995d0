#include "common/progress.h"

#include "common/log.h"
#include "common/units.h"

namespace tandem {

std::string format_progress(const ProgressSnapshot& p) {
  char buf[160];
  std::string s = format_bytes(p.done) + " of " + format_bytes(p.total);
  std::snprintf(buf, sizeof buf, " (%.0f%%)", 100.0 * p.fraction());
  s += buf;
  if (p.rate > 0) s += ", " + format_bytes(static_cast<uint64_t>(p.rate)) + "/s";
  if (p.eta_s >= 0) {
    const long t = static_cast<long>(p.eta_s + 0.5);
    if (t >= 60)
      std::snprintf(buf, sizeof buf, ", %ld min %02ld s left", t / 60, t % 60);
    else
      std::snprintf(buf, sizeof buf, ", %ld s left", t);
    s += buf;
  }
  return s;
}

ProgressMeter::ProgressMeter(std::string label, std::FILE* out, bool tty, std::chrono::seconds log_every)
    : label_(std::move(label)), out_(out), tty_(tty), log_every_(log_every) {}

void ProgressMeter::update(uint64_t done, uint64_t total, Clock::time_point now) {
  if (!started_) {
    started_ = true;
    start_ = last_sample_ = now;
    last_print_ = now - log_every_;  // the first update prints at once
  }
  const double dt = std::chrono::duration<double>(now - last_sample_).count();
  if (dt >= 0.5 && done >= last_done_) {
    // Exponential smoothing: loads stall and burst (network, disk), the ETA should not jump.
    const double instant = static_cast<double>(done - last_done_) / dt;
    snap_.rate = snap_.rate == 0 ? instant : 0.7 * snap_.rate + 0.3 * instant;
    last_sample_ = now;
    last_done_ = done;
  }
  snap_.done = done;
  snap_.total = total;
  snap_.eta_s = (snap_.rate > 0 && total >= done) ? static_cast<double>(total - done) / snap_.rate : -1;
  const auto every =
      tty_ ? std::chrono::milliseconds(200) : std::chrono::duration_cast<std::chrono::milliseconds>(log_every_);
  if (now - last_print_ < every) return;
  last_print_ = now;
  if (tty_) {
    constexpr int kWidth = 30;
    const int filled = static_cast<int>(snap_.fraction() * kWidth);
    std::string bar(static_cast<size_t>(filled), '#');
    bar.resize(kWidth, '.');
    std::fprintf(out_, "\r\033[K%s [%s] %s", label_.c_str(), bar.c_str(), format_progress(snap_).c_str());
  } else if (out_ == stderr) {
    log::info("progress", label_ + ": " + format_progress(snap_));
    return;
  } else {
    std::fprintf(out_, "%s: %s\n", label_.c_str(), format_progress(snap_).c_str());
  }
  std::fflush(out_);
}

void ProgressMeter::finish(Clock::time_point now) {
  const double s = started_ ? std::chrono::duration<double>(now - start_).count() : 0;
  if (!tty_ && out_ == stderr) {
    char secs[32];
    std::snprintf(secs, sizeof secs, "%.1f", s);
    log::info("progress", label_ + ": " + format_bytes(snap_.total) + " done in " + secs + " s");
    return;
  }
  std::fprintf(out_, "%s%s: %s done in %.1f s\n", tty_ ? "\r\033[K" : "", label_.c_str(),
               format_bytes(snap_.total).c_str(), s);
  std::fflush(out_);
}

}  // namespace tandem
