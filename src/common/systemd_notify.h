// The daemon's side of systemd's Type=notify protocol (sd_notify through libsystemd). Every call is
// a no-op when the process was not started by systemd (no NOTIFY_SOCKET), so callers need not check.
#pragma once

#include <atomic>
#include <chrono>
#include <functional>
#include <string>
#include <thread>

namespace tandem::systemd {

void notify_ready(const std::string& status);   // READY=1 and STATUS=
void notify_status(const std::string& status);  // STATUS=
void notify_stopping();                         // STOPPING=1

// The watchdog interval of the unit (WatchdogSec=, read from WATCHDOG_USEC), or 0 when none.
std::chrono::microseconds watchdog_interval();

// Sends WATCHDOG=1 at half the unit's watchdog interval from its own thread, but only while
// `healthy()` says so: a daemon whose main loop is stuck stops pinging and systemd restarts it.
// Does nothing without a watchdog. Thread-safety: start and stop from one thread.
class WatchdogPinger {
 public:
  ~WatchdogPinger() { stop(); }
  void start(std::function<bool()> healthy);
  void stop();

 private:
  std::atomic<bool> stop_{false};
  std::thread thread_;
};

}  // namespace tandem::systemd
