// A real cluster on loopback for integration tests: the tiny model, N `tandem worker` processes,
// `tandem serve` with an API key, torn down with the fixture.
#pragma once

#include <atomic>
#include <chrono>
#include <future>
#include <memory>
#include <mutex>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "support/process.h"
#include "test_util.h"

namespace tandem::testing {

// The value of the Prometheus sample `name` (with its labels) in a /metrics page, or -1.
inline double sample(const std::string& metrics, const std::string& name) {
  const size_t at = metrics.find("\n" + name + " ");
  return at == std::string::npos ? -1 : std::stod(metrics.substr(at + name.size() + 2));
}

// A folder beside the test's scratch folder, for drafts that outlive one cluster (a second
// ScratchDir of the same test is the same folder, emptied).
class DraftDir {
 public:
  DraftDir()
      : path_(std::filesystem::path(TANDEM_TEST_TMP) /
              (std::string(::testing::UnitTest::GetInstance()->current_test_info()->name()) + ".drafts")) {
    std::filesystem::remove_all(path_);
    std::filesystem::create_directories(path_);
  }
  ~DraftDir() { std::filesystem::remove_all(path_); }
  std::string file(const std::string& name) const { return (path_ / name).string(); }
  std::string path() const { return path_.string(); }

 private:
  std::filesystem::path path_;
};

class LocalCluster {
 public:
  // Writes the model, secret and key, starts `workers` workers and the gateway (with
  // `extra_serve_args`; a context of 512 tokens and 2 slots unless they give --context or --parallel). wait_ready() waits
  // until /health says ready (false when it did not within `timeout_ms`; see log()).
  // `extra_worker_args` go to every worker (a worker's {i} in them becomes its index). A hand split
  // gives each node its layers unless `extra_serve_args` choose a --parallelism or --layers. `synth_args`: more
  // `tandem synth` flags for the tiny model.
  explicit LocalCluster(const ScratchDir& dir, int workers = 2, const std::vector<std::string>& extra_serve_args = {},
                        const std::vector<std::string>& extra_worker_args = {}, const std::string& synth_args = "");
  bool wait_ready(int timeout_ms = 60000);
  // /health's "state", or "" when it does not answer.
  std::string state();
  // Polls state() until it is `want`; the last state seen (== want unless `timeout_ms` passed).
  std::string wait_state(const std::string& want, int timeout_ms = 5000);

  // Polls /health (with the key) until the gateway has admitted at least `n` requests (its
  // requests_in_flight, counted when a request is let in); false when it did not in `timeout_ms`.
  bool wait_in_flight(int n, int timeout_ms = 10000);

  void kill_worker(int i, int signal);
  void restart_worker(int i);
  ChildProcess& gateway() { return *gateway_; }

  int port() const { return port_; }
  int worker_port(int i) const { return worker_ports_[i]; }
  const std::string& secret_file() const { return secret_; }
  const std::string& model() const { return model_; }
  const std::string& key() const { return key_; }
  std::string log() const;  // the gateway's log, for failure messages

 private:
  void start_worker(int i);
  const ScratchDir& dir_;
  std::vector<std::string> worker_args_;
  std::string secret_, model_, key_;
  int port_ = 0;
  std::vector<int> worker_ports_;
  std::vector<std::unique_ptr<ChildProcess>> workers_;
  std::unique_ptr<ChildProcess> gateway_;
};

// /health's `speculative` once it shows a checking step and two reads a refresh of
// the gateway's engine figures apart (it asks the engine every second) agree: the figures of the
// requests that have ended. Right away when speculation is off; as last read after 20 s.
nlohmann::json settled_speculation(const LocalCluster& cluster);

// A POST with its own client on a thread of its own, read as it arrives, so that a test can wait
// for its first generated text instead of for a while ("the stream is under way").
class AsyncPost {
 public:
  using Clock = std::chrono::steady_clock;
  AsyncPost(int port, const std::string& key, const std::string& path, const std::string& body);
  ~AsyncPost();  // waits for the end (bounded by the client's 60 s read timeout)
  // True once a chunk with a "text" or "content" field has arrived; false after `timeout_ms`, or
  // when the request ended without one.
  bool wait_first_text(int timeout_ms);
  // Waits for the end: the whole body ("" when the connection failed).
  std::string body();
  Clock::time_point ended();  // when the answer ended (after body())

 private:
  std::mutex mutex_;
  std::string body_;
  std::atomic<bool> text_{false}, done_{false};
  Clock::time_point ended_{};
  std::future<void> future_;
};

}  // namespace tandem::testing
