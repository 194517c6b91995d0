// A head and one worker for fault injection: the worker runs in a network namespace of its own,
// joined to the head's by a veth pair, so that the link can be throttled (a slow first load) and
// cut (a pulled cable) with `ip` and `tc`, and the worker killed or frozen like a real box.
// Needs root (network namespaces); FaultCluster::supported() says whether this machine allows it.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "support/process.h"
#include "test_util.h"

namespace tandem::testing {

// A network namespace with a veth pair to the current one: 10.213.N.1 here, 10.213.N.2 inside.
// Removed (with both ends of the pair) on destruction.
class NetnsLink {
 public:
  NetnsLink();
  ~NetnsLink();
  bool ok() const { return ok_; }
  const std::string& ns() const { return ns_; }
  const std::string& inner_ip() const { return inner_ip_; }
  // Egress shaping on the head's end (towards the worker): a rate such as "8mbit", or "" for none.
  // False when the kernel refuses it.
  bool throttle(const std::string& rate);
  // Pulls and re-plugs the cable: the head's end goes down / up.
  void cut();
  void restore();

 private:
  bool ok_ = false;
  std::string ns_, host_if_, inner_if_, host_ip_, inner_ip_;
};

struct FaultClusterOptions {
  int context = 8192;  // per slot: room for a long prompt (prefill cases) and a long answer
  int parallel = 2;
  std::string throttle;  // applied before the first load ("" = none)
};

class FaultCluster {
 public:
  FaultCluster(const ScratchDir& dir, FaultClusterOptions options);
  ~FaultCluster();
  // Whether network namespaces and veth pairs can be made here; `why` says what failed.
  static bool supported(std::string* why);

  bool wait_state(const std::string& state, int timeout_ms);
  nlohmann::json health();  // /health's body, or null when it does not answer

  void start_worker();
  void signal_worker(int signal);        // the worker process alone
  void signal_worker_group(int signal);  // the worker and its RPC child: the whole box
  void wait_worker_exit();
  NetnsLink& link() { return link_; }
  ChildProcess& gateway() { return *gateway_; }
  int engine_pid();
  int worker_pid() const { return worker_->pid(); }

  int port() const { return port_; }
  const std::string& key() const { return key_; }
  std::string gateway_log() const;
  std::string worker_log() const;

 private:
  const ScratchDir& dir_;
  FaultClusterOptions options_;
  NetnsLink link_;
  std::string secret_, model_, key_;
  int port_ = 0, worker_port_ = 0;
  std::unique_ptr<ChildProcess> worker_, gateway_;
};

// What /proc says about a process: its children, its listening TCP ports, its open descriptors.
std::vector<int> child_pids(int pid);
std::vector<int> listening_ports(int pid);
int open_fds(int pid);

}  // namespace tandem::testing
