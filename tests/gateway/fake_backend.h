// A Backend that answers every request with a scripted stream of words, for front-end tests.
#pragma once

#include <atomic>
#include <chrono>
#include <map>
#include <mutex>
#include <set>
#include <thread>
#include <vector>

#include "gateway/backend.h"

namespace tandem::gateway::testing {

class FakeBackend : public Backend {
 public:
  std::vector<std::string> words = {"Hello", ",", " world", "!"};
  std::chrono::milliseconds delay{5};  // between words
  Status refuse;                       // when not ok, submit() fails with it
  Status fail_midway;                  // when not ok, sent as an error event after the first word
  Status fail_first;                   // when not ok, sent as the only event (a rejected request)

  ~FakeBackend() override {
    for (auto& t : threads_) t.join();
  }

  Status submit(const GenerationRequest& request, EventSink sink) override {
    if (!refuse.is_ok()) return refuse;
    {
      std::lock_guard<std::mutex> lock(mutex_);
      last_body = request.body;
      ++submitted;
    }
    threads_.emplace_back([this, id = request.id, sink] { run(id, sink); });
    return Status::ok();
  }

  void cancel(const std::string& id) override {
    std::lock_guard<std::mutex> lock(mutex_);
    cancelled.insert(id);
  }

  bool was_cancelled(const std::string& id) {
    std::lock_guard<std::mutex> lock(mutex_);
    return cancelled.count(id) > 0;
  }
  size_t cancel_count() {
    std::lock_guard<std::mutex> lock(mutex_);
    return cancelled.size();
  }

  std::mutex mutex_;
  nlohmann::json last_body;     // guarded by mutex_
  std::set<std::string> cancelled;  // guarded by mutex_
  std::atomic<int> submitted{0};

 private:
  void run(const std::string& id, EventSink sink) {
    if (!fail_first.is_ok()) {
      GenerationEvent err;
      err.type = GenerationEvent::Type::error;
      err.error = fail_first;
      sink(err);
      return;
    }
    uint64_t n = 0;
    for (const std::string& w : words) {
      std::this_thread::sleep_for(delay);
      if (was_cancelled(id)) break;
      GenerationEvent e;
      e.text = w;
      sink(e);
      ++n;
      if (!fail_midway.is_ok()) {
        GenerationEvent err;
        err.type = GenerationEvent::Type::error;
        err.error = fail_midway;
        sink(err);
        return;
      }
    }
    GenerationEvent done;
    done.type = GenerationEvent::Type::done;
    done.finish_reason = was_cancelled(id) ? "stop" : "length";
    done.prompt_tokens = 7;
    done.completion_tokens = n;
    sink(done);
  }
  std::vector<std::thread> threads_;
};

}  // namespace tandem::gateway::testing
