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
  // When not empty, sent instead of `words` (deltas with reasoning, tool calls, logprobs), then a
  // done event with `finish_reason`.
  std::vector<GenerationEvent> script;
  std::string finish_reason = "length";
  uint64_t cached_tokens = 0;  // of the 7 prompt tokens every request has

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

  // Tokens are the body's bytes: one token per byte, its id the byte's value.
  Result<std::vector<Token>> tokenize(const std::string& text, bool add_special) override {
    if (!refuse.is_ok()) return refuse;
    std::vector<Token> out;
    if (add_special) out.push_back({1000, "<s>"});
    for (char c : text) out.push_back({static_cast<unsigned char>(c), std::string(1, c)});
    return out;
  }
  Result<std::string> detokenize(const std::vector<int32_t>& tokens) override {
    std::string out;
    for (int32_t t : tokens) {
      if (t < 0 || t > 255)
        return Status::invalid_argument("token " + std::to_string(t) + " is not in the fake vocabulary");
      out.push_back(static_cast<char>(t));
    }
    return out;
  }
  // The bytes of the body's messages (or prompt) as JSON: depends on everything the body holds.
  // The prompt is that JSON text.
  Result<Rendered> render(Endpoint endpoint, const nlohmann::json& body) override {
    if (!refuse.is_ok()) return refuse;
    std::lock_guard<std::mutex> lock(mutex_);
    last_count_body = body;
    const char* key = endpoint == Endpoint::chat ? "messages" : "prompt";
    const std::string text = body.value(key, nlohmann::json()).dump() + body.value("tools", nlohmann::json()).dump();
    return Rendered{text, static_cast<int>(text.size())};
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
  nlohmann::json last_body;         // guarded by mutex_
  nlohmann::json last_count_body;   // guarded by mutex_
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
    GenerationEvent started;
    started.type = GenerationEvent::Type::started;
    started.prompt_tokens = 7;
    started.cached_tokens = cached_tokens;
    sink(started);
    uint64_t n = 0;
    if (!script.empty()) {
      for (const GenerationEvent& e : script) {
        std::this_thread::sleep_for(delay);
        sink(e);
        ++n;
      }
      GenerationEvent done;
      done.type = GenerationEvent::Type::done;
      done.finish_reason = finish_reason;
      done.prompt_tokens = 7;
      done.cached_tokens = cached_tokens;
      done.completion_tokens = n;
      sink(done);
      return;
    }
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
    done.cached_tokens = cached_tokens;
    done.completion_tokens = n;
    sink(done);
  }
  std::vector<std::thread> threads_;
};

}  // namespace tandem::gateway::testing
