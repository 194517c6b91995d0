// A real cluster on loopback for integration tests: the tiny model, N `tandem worker` processes,
// `tandem serve` with an API key, torn down with the fixture.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "support/process.h"
#include "test_util.h"

namespace tandem::testing {

class LocalCluster {
 public:
  // Writes the model, secret and key, starts `workers` workers and the gateway (with
  // `extra_serve_args`; a context of 512 tokens and 2 slots unless they give --context or --parallel). wait_ready() waits
  // until /health says ready (false when it did not within `timeout_ms`; see log()).
  // `extra_worker_args` go to every worker (a worker's {i} in them becomes its index). A hand split
  // gives each node its layers unless `extra_serve_args` choose a --parallelism. `synth_args`: more
  // `tandem synth` flags for the tiny model.
  explicit LocalCluster(const ScratchDir& dir, int workers = 2, const std::vector<std::string>& extra_serve_args = {},
                        const std::vector<std::string>& extra_worker_args = {}, const std::string& synth_args = "");
  bool wait_ready(int timeout_ms = 60000);
  // /health's "state", or "" when it does not answer.
  std::string state();
  // Polls state() until it is `want`; the last state seen (== want unless `timeout_ms` passed).
  std::string wait_state(const std::string& want, int timeout_ms = 5000);

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

}  // namespace tandem::testing
