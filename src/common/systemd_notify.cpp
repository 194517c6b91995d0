#include "common/systemd_notify.h"

#include <systemd/sd-daemon.h>

namespace tandem::systemd {

void notify_ready(const std::string& status) { sd_notifyf(0, "READY=1\nSTATUS=%s", status.c_str()); }
void notify_status(const std::string& status) { sd_notifyf(0, "STATUS=%s", status.c_str()); }
void notify_stopping() { sd_notify(0, "STOPPING=1"); }

std::chrono::microseconds watchdog_interval() {
  uint64_t usec = 0;
  if (sd_watchdog_enabled(0, &usec) <= 0) return std::chrono::microseconds(0);
  return std::chrono::microseconds(usec);
}

void WatchdogPinger::start(std::function<bool()> healthy) {
  const auto interval = watchdog_interval();
  if (interval.count() == 0 || thread_.joinable()) return;
  stop_ = false;
  thread_ = std::thread([this, interval, healthy = std::move(healthy)] {
    const auto half = interval / 2;
    auto next = std::chrono::steady_clock::now();
    while (!stop_) {
      if (std::chrono::steady_clock::now() >= next) {
        if (!healthy || healthy()) sd_notify(0, "WATCHDOG=1");
        next += half;
      }
      // Short sleeps so that stop() returns at once.
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
    }
  });
}

void WatchdogPinger::stop() {
  stop_ = true;
  if (thread_.joinable()) thread_.join();
}

}  // namespace tandem::systemd
