// The canary: a one-token generation through the whole split, the only proof that the cluster
// serves (every process can look alive while generation is dead).
#include "gateway/supervisor.h"

#include <future>

namespace tandem::gateway {

bool Supervisor::canary_due() {
  std::lock_guard<std::mutex> lock(mutex_);
  const auto since = Clock::now() - last_canary_;
  // A freshly loaded engine is tried at once; a failing one every few seconds; a healthy one
  // when idle, every canary_interval, because generation can die while every process looks alive.
  bool due;
  if (!engine_verified_ || state_ != ServeState::ready) {
    due = last_canary_ < engine_started_ || since >= std::chrono::seconds(5);
  } else {
    due = (!in_flight_ || in_flight_() == 0) && since >= options_.canary_interval;
  }
  if (!due) return false;
  canary_running_ = true;
  last_canary_ = Clock::now();
  return true;
}

void Supervisor::run_canary() {
  // The previous canary has finished (canary_running_ was false); joined without the lock, which
  // its last steps take.
  if (canary_thread_.joinable()) canary_thread_.join();
  canary_thread_ = std::thread([this] { start_canary(); });
}

void Supervisor::start_canary() {
  auto client = backend_.client();
  Clock::time_point engine;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    engine = engine_started_;
  }
  auto done = std::make_shared<std::promise<std::string>>();
  auto future = done->get_future();
  std::string id;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    id = "canary-" + std::to_string(++canary_seq_);
  }
  const nlohmann::json body = {
      {"model", options_.model_id}, {"prompt", "Hello"}, {"max_tokens", 1}, {"temperature", 0}};
  Status s = client ? client->submit(id, engine::RequestKind::completion, body.dump(),
                                     [done](const engine::EngineEvent& e) {
                                       if (e.type == engine::EngineEvent::Type::done) done->set_value("");
                                       if (e.type == engine::EngineEvent::Type::error)
                                         done->set_value(e.message.empty() ? "error" : e.message);
                                     })
                    : Status::unavailable("the engine is not connected");
  std::string failure;
  if (!s.is_ok()) {
    failure = s.message();
  } else if (future.wait_for(options_.canary_timeout) != std::future_status::ready) {
    failure = "no token within " + std::to_string(options_.canary_timeout.count()) + " s";
    client->cancel(id);
  } else {
    failure = future.get();
  }
  client.reset();
  bool stale;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    stale = engine != engine_started_;  // the engine was replaced meanwhile: this result is not its
    if (!stale && failure.empty()) {
      engine_verified_ = true;
      backoff_ = std::chrono::seconds(1);
      last_error_.clear();
    } else if (!stale) {
      last_error_ = "canary generation failed: " + failure;
      // No token at all within the deadline: the engine (or a link under it) hangs; restart it.
      if (failure.rfind("no token within", 0) == 0) kill_requested_ = true;
    }
  }
  if (!stale) {
    if (failure.empty())
      set_state(ServeState::ready, "a one-token generation went through the whole split");
    else
      set_state(ServeState::degraded, "canary generation failed: " + failure);
  }
  std::lock_guard<std::mutex> lock(mutex_);
  canary_running_ = false;
}

}  // namespace tandem::gateway
