#include "faults/fault_cases.h"

#include <httplib.h>
#include <signal.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <future>
#include <mutex>
#include <thread>

namespace tandem::testing {
namespace {

using nlohmann::json;
using Clock = std::chrono::steady_clock;

// Beyond this after the fault became detectable, a request still running counts as hung.
constexpr double kErrorBudgetS = 5.0;
constexpr int kRecoveryTimeoutMs = 90000;

double since(Clock::time_point t) { return std::chrono::duration<double>(Clock::now() - t).count(); }

// What one client saw of one request.
struct Outcome {
  int status = 0;            // HTTP status, 0 when the connection failed
  bool done = false;         // [DONE] arrived (a stream that looks complete)
  bool error_event = false;  // a data: {"error": ...} event arrived
  std::string body;
  std::string retry_after;
  Clock::time_point first_token{}, ended{};
};

class Request {
 public:
  Request(int port, const std::string& key, json body) {
    future_ = std::async(std::launch::async, [this, port, key, body] { run(port, key, body); });
  }
  bool has_token() const { return got_token_; }
  // Waits for the end; a request still running after `timeout_s` is reported as hung (status -1).
  Outcome wait(double timeout_s) {
    if (future_.wait_for(std::chrono::duration<double>(timeout_s)) != std::future_status::ready) {
      Outcome o;
      o.status = -1;
      return o;
    }
    return out_;
  }
  ~Request() { future_.wait(); }  // the client's read timeout bounds this

 private:
  void run(int port, const std::string& key, const json& body) {
    httplib::Client c("127.0.0.1", port);
    c.set_read_timeout(60, 0);
    httplib::Request req;
    req.method = "POST";
    req.path = body.contains("messages") ? "/v1/chat/completions" : "/v1/completions";
    req.headers = {{"Authorization", "Bearer " + key}};
    req.body = body.dump();
    req.set_header("Content-Type", "application/json");
    req.content_receiver = [this](const char* data, size_t n, uint64_t, uint64_t) {
      std::lock_guard<std::mutex> lock(mutex_);
      out_.body.append(data, n);
      if (!got_token_ && out_.body.find("\"text\":\"") != std::string::npos) {
        out_.first_token = Clock::now();
        got_token_ = true;
      }
      return true;
    };
    httplib::Response res;
    httplib::Error err;
    const bool ok = c.send(req, res, err);
    std::lock_guard<std::mutex> lock(mutex_);
    out_.ended = Clock::now();
    out_.status = ok ? res.status : 0;
    out_.retry_after = res.get_header_value("Retry-After");
    out_.done = out_.body.find("data: [DONE]") != std::string::npos;
    out_.error_event = out_.body.find("data: {\"error\"") != std::string::npos;
  }

  std::mutex mutex_;
  Outcome out_;
  std::atomic<bool> got_token_{false};
  std::future<void> future_;
};

json stream_body(int prompt_words, int max_tokens) {
  std::string prompt = "Go";
  for (int i = 0; i < prompt_words; ++i) prompt += " word" + std::to_string(i % 97);
  return {{"model", "tiny"}, {"prompt", prompt}, {"max_tokens", max_tokens}, {"stream", true}, {"ignore_eos", true}};
}

json small_chat() {
  return {{"model", "tiny"},
          {"messages", {{{"role", "user"}, {"content", "Hello"}}}},
          {"max_tokens", 4},
          {"temperature", 0}};
}

// A request that ended as a fault demands: an error, not a complete answer, not a hang.
std::string check_error(const Outcome& o, bool stream) {
  if (o.status == -1) return "hung";
  if (o.status == 200 && stream) {
    if (o.done) return "the stream completed as if nothing happened";
    if (!o.error_event) return "the stream ended without an error event";
    return "";
  }
  if (o.status == 503 || o.status == 500) return "";
  return "ended with status " + std::to_string(o.status) + ": " + o.body.substr(0, 400);
}

void inject(FaultCluster& cluster, Fault f) {
  switch (f) {
    case Fault::worker_kill:
      cluster.signal_worker(SIGKILL);
      break;
    case Fault::worker_stop:
      cluster.signal_worker_group(SIGSTOP);
      break;
    case Fault::engine_kill:
      ::kill(cluster.engine_pid(), SIGKILL);
      break;
    case Fault::link_cut:
      cluster.link().cut();
      break;
  }
}

void remove(FaultCluster& cluster, Fault f) {
  switch (f) {
    case Fault::worker_kill:
      cluster.wait_worker_exit();
      cluster.start_worker();
      break;
    case Fault::worker_stop:
      cluster.signal_worker_group(SIGCONT);
      break;
    case Fault::engine_kill:
      break;
    case Fault::link_cut:
      cluster.link().restore();
      break;
  }
}

// Waits until the engine is loading weights (the first bytes have crossed the link).
bool wait_loading(FaultCluster& cluster, int timeout_ms) {
  const auto end = Clock::now() + std::chrono::milliseconds(timeout_ms);
  while (Clock::now() < end) {
    json h = cluster.health();
    if (h.is_object() && h["engine"].value("state", "") == "loading" && h["load"].value("bytes", uint64_t{0}) > 0)
      return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  return false;
}

// Waits until the gateway has admitted at least `n` requests (/health's requests_in_flight: counted
// when a request is let in, before the engine sees it).
bool wait_in_flight(FaultCluster& cluster, int n, int timeout_ms) {
  const auto end = Clock::now() + std::chrono::milliseconds(timeout_ms);
  while (Clock::now() < end) {
    json h = cluster.health();
    if (h.is_object() && h.value("requests_in_flight", 0) >= n) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  return false;
}

// Waits until /health no longer says ready.
bool wait_not_ready(FaultCluster& cluster, int timeout_ms) {
  const auto end = Clock::now() + std::chrono::milliseconds(std::max(timeout_ms, 100));
  while (Clock::now() < end) {
    json h = cluster.health();
    if (h.is_object() && h.value("state", "") != "ready") return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  return false;
}

// After recovery: the gateway and the worker hold what they held before, nothing more.
std::string check_leaks(FaultCluster& cluster, const Baseline& b) {
  const int gw = cluster.gateway().pid();
  // The engine's slot counts in /health are polled once a second: a slot of the request just
  // served may still show; a leaked one stays.
  json h;
  for (int i = 0; i < 50; ++i) {
    h = cluster.health();
    if (h.is_object() && h.value("requests_in_flight", -1) == 0 && h["engine"].value("slots_busy", -1) == 0) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  if (!h.is_object()) return "/health does not answer";
  if (h.value("requests_in_flight", -1) != 0)
    return "requests_in_flight is " + h["requests_in_flight"].dump() + " 5 s after the last request";
  if (h["engine"].value("slots_busy", -1) != 0)
    return "slots_busy is " + h["engine"]["slots_busy"].dump() + " 5 s after the last request";
  const auto kids = child_pids(gw);
  if (kids.size() != 1)
    return "the gateway has " + std::to_string(kids.size()) + " child processes, not 1 (the engine)";
  auto ports = listening_ports(gw);
  std::sort(ports.begin(), ports.end());
  if (ports != b.gateway_ports)
    return "the gateway listens on " + std::to_string(ports.size()) + " ports, before " +
           std::to_string(b.gateway_ports.size());
  const auto worker_kids = child_pids(cluster.worker_pid());
  if (worker_kids.size() != 1)
    return "the worker has " + std::to_string(worker_kids.size()) + " child processes, not 1 (its RPC server)";
  const int fds = open_fds(gw);
  // A few keep-alive connections of our own clients may still be open.
  if (fds > b.gateway_fds + 6)
    return "the gateway holds " + std::to_string(fds) + " descriptors, before " + std::to_string(b.gateway_fds);
  return "";
}

}  // namespace

std::vector<FaultCase> fault_cases() {
  return {
      {"worker kill -9 during load", Fault::worker_kill, Phase::load, 0},
      {"worker kill -9 during prefill", Fault::worker_kill, Phase::prefill, 0},
      {"worker kill -9 during streaming", Fault::worker_kill, Phase::stream, 0},
      {"worker SIGSTOP during load", Fault::worker_stop, Phase::load, 5},
      {"worker SIGSTOP during prefill", Fault::worker_stop, Phase::prefill, 5},
      {"worker SIGSTOP during streaming", Fault::worker_stop, Phase::stream, 5},
      {"engine kill -9 during streaming", Fault::engine_kill, Phase::stream, 0},
      {"link cut during streaming", Fault::link_cut, Phase::stream, 5},
      {"link cut during load", Fault::link_cut, Phase::load, 5},
  };
}

FaultClusterOptions cluster_options(const FaultCase& c) {
  FaultClusterOptions o;
  // ~5 MB of the worker's weights at 8 Mbit/s: a load of about five seconds, like a real first load.
  if (c.phase == Phase::load) o.throttle = "8mbit";
  return o;
}

Baseline take_baseline(FaultCluster& cluster) {
  Baseline b;
  b.gateway_ports = listening_ports(cluster.gateway().pid());
  std::sort(b.gateway_ports.begin(), b.gateway_ports.end());
  b.gateway_fds = open_fds(cluster.gateway().pid());
  return b;
}

RunResult run_fault(FaultCluster& cluster, const FaultCase& c, const Baseline& baseline, bool strict_timing) {
  RunResult r;
  auto fail = [&](const std::string& why) {
    r.failure = why;
    return r;
  };
  std::vector<std::unique_ptr<Request>> requests;
  std::vector<bool> streaming;
  if (c.phase == Phase::load) {
    // The next load: the previous run's recovery already loaded, so restart the engine.
    if (cluster.wait_state("ready", 1000)) ::kill(cluster.engine_pid(), SIGKILL);
    if (!wait_loading(cluster, 30000)) return fail("the engine never started loading");
  } else {
    if (!cluster.wait_state("ready", kRecoveryTimeoutMs)) return fail("not ready before the fault");
    // Two streams fill the two slots; one plain request, sent once they run, waits behind them.
    const bool prefill = c.phase == Phase::prefill;
    for (int i = 0; i < 2; ++i) {
      requests.push_back(
          std::make_unique<Request>(cluster.port(), cluster.key(), stream_body(prefill ? 900 : 8, 1500)));
      streaming.push_back(true);
    }
    if (prefill) {
      // Both prompts are with the engine (the gateway forwards at once what it admits); whether a
      // token came out before the fault is noted below.
      if (!wait_in_flight(cluster, 2, 20000)) return fail("the two streams were never admitted");
    } else {
      const auto end = Clock::now() + std::chrono::seconds(20);
      while (Clock::now() < end && !(requests[0]->has_token() && requests[1]->has_token())) {
        std::this_thread::sleep_for(std::chrono::milliseconds(20));
      }
    }
    json plain = stream_body(8, 1000);
    plain["stream"] = false;
    requests.push_back(std::make_unique<Request>(cluster.port(), cluster.key(), plain));
    streaming.push_back(false);
    // The plain request is admitted and waits behind the two streams.
    if (!wait_in_flight(cluster, 3, 20000)) return fail("the queued request was never admitted");
  }
  const bool token_before = c.phase == Phase::prefill && (requests[0]->has_token() || requests[1]->has_token());
  const auto fault = Clock::now();
  inject(cluster, c.fault);
  const double budget = c.detectable_s + (strict_timing ? kErrorBudgetS : 60.0);

  std::string problem;
  if (c.phase == Phase::load) {
    if (!cluster.wait_state("degraded", static_cast<int>(budget * 1000) + 200) && c.fault != Fault::engine_kill) {
      problem = "state not degraded within " + std::to_string(budget) + " s";
    }
    r.time_to_error_s = since(fault);
    // A request now is refused at once, with a Retry-After.
    Request probe(cluster.port(), cluster.key(), small_chat());
    Outcome o = probe.wait(5);
    if (problem.empty() && (o.status != 503 || o.retry_after.empty())) {
      problem = "a request during the fault got " + std::to_string(o.status) +
                (o.retry_after.empty() ? " without Retry-After" : "");
    }
  } else {
    double last = 0;
    for (size_t i = 0; i < requests.size() && problem.empty(); ++i) {
      Outcome o = requests[i]->wait(std::max(0.5, budget - since(fault) + 0.5));
      if (std::string why = check_error(o, streaming[i]); !why.empty())
        problem = "request " + std::to_string(i) + ": " + why;
      else
        last = std::max(last, std::chrono::duration<double>(o.ended - fault).count());
    }
    r.time_to_error_s = last;
    if (problem.empty() && last > budget) problem = "an error came " + std::to_string(last) + " s after the fault";
    // /health reports the fault too (requests may learn of it a tick before the supervisor does).
    if (problem.empty() && !wait_not_ready(cluster, static_cast<int>((budget - since(fault)) * 1000) + 500)) {
      problem = "/health still says ready " + std::to_string(since(fault)) + " s after the fault";
    }
  }
  if (!cluster.gateway().running()) return fail("the gateway died");

  const auto removed = Clock::now();
  remove(cluster, c.fault);
  requests.clear();  // every client has returned (the hung ones by their read timeout)
  if (!problem.empty()) {
    cluster.wait_state("ready", kRecoveryTimeoutMs);  // leave the cluster usable for the next run
    return fail(problem);
  }
  if (!cluster.wait_state("ready", kRecoveryTimeoutMs)) return fail("not ready again within 90 s of the fault's end");
  Request after(cluster.port(), cluster.key(), small_chat());
  Outcome o = after.wait(30);
  if (o.status != 200)
    return fail("a request after recovery got " + std::to_string(o.status) + ": " + o.body.substr(0, 200));
  r.time_to_recovery_s = since(removed);
  if (c.fault == Fault::engine_kill) r.time_to_recovery_s = since(fault);
  if (std::string leak = check_leaks(cluster, baseline); !leak.empty()) return fail("leak: " + leak);
  if (token_before) r.note = "a token had arrived before the fault: this run tested streaming, not prefill";
  r.passed = true;
  return r;
}

}  // namespace tandem::testing
