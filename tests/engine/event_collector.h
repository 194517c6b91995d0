// Collects the events of one request (from the scheduler or the engine client) and waits for the
// terminal one with a deadline, so a test can never hang.
#pragma once

#include <chrono>
#include <condition_variable>
#include <mutex>
#include <string>
#include <vector>

#include "engine/protocol.h"

namespace tandem::engine::testing {

class EventCollector {
 public:
  void operator()(const EngineEvent& e) {
    std::lock_guard<std::mutex> lock(mutex_);
    events_.push_back(e);
    if (e.type == EngineEvent::Type::started) {
      started_ = e;
    } else if (e.type == EngineEvent::Type::delta) {
      text_ += e.text;
      reasoning_ += e.reasoning;
      ++deltas_;
    } else {
      final_ = e;
      finished_ = true;
    }
    cv_.notify_all();
  }

  // Waits for done or error; false after `timeout_ms`.
  bool wait(int timeout_ms = 180000) {
    std::unique_lock<std::mutex> lock(mutex_);
    return cv_.wait_for(lock, std::chrono::milliseconds(timeout_ms), [&] { return finished_; });
  }
  // Waits for the first delta; false after `timeout_ms`.
  bool wait_first_delta(int timeout_ms = 60000) {
    std::unique_lock<std::mutex> lock(mutex_);
    return cv_.wait_for(lock, std::chrono::milliseconds(timeout_ms), [&] { return deltas_ > 0 || finished_; });
  }

  std::string text() {
    std::lock_guard<std::mutex> l(mutex_);
    return text_;
  }
  std::string reasoning() {
    std::lock_guard<std::mutex> l(mutex_);
    return reasoning_;
  }
  EngineEvent final_event() {
    std::lock_guard<std::mutex> l(mutex_);
    return final_;
  }
  // The started event (type delta, empty, while none came).
  EngineEvent started_event() {
    std::lock_guard<std::mutex> l(mutex_);
    return started_;
  }
  std::vector<EngineEvent> events() {
    std::lock_guard<std::mutex> l(mutex_);
    return events_;
  }

 private:
  std::mutex mutex_;
  std::condition_variable cv_;
  std::vector<EngineEvent> events_;
  std::string text_, reasoning_;
  int deltas_ = 0;
  bool finished_ = false;
  EngineEvent final_;
  EngineEvent started_;
};

}  // namespace tandem::engine::testing
