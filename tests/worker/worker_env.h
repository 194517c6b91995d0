// A `tandem worker` process for the tests, with its secret, log and helpers to talk to it.
#pragma once

#include <signal.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <memory>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "link/forwarder.h"
#include "link/protocol.h"
#include "link/secret.h"
#include "link/socket.h"
#include "support/process.h"
#include "test_util.h"

namespace tandem::testing {

inline link::Secret make_secret(const std::string& path) {
  EXPECT_TRUE(link::write_new_secret(path).is_ok());
  return link::load_secret(path).value();
}

class WorkerProcess {
 public:
  WorkerProcess(const ScratchDir& dir, const std::string& name, const std::string& secret_file,
                std::vector<std::string> extra = {}, std::vector<std::string> wrapper = {})
      : port_(free_port()), log_(dir.file(name + ".log")) {
    std::vector<std::string> argv = wrapper;  // e.g. setpriv ... to run it with fewer capabilities
    argv.insert(argv.end(), {TANDEM_BINARY, "worker", "--listen", "127.0.0.1:" + std::to_string(port_), "--secret-file",
                             secret_file, "--name", name, "--threads", "1"});
    argv.insert(argv.end(), extra.begin(), extra.end());
    proc_ = std::make_unique<ChildProcess>(argv, log_);
    up_ = wait_for_port(port_, 60000);
  }

  bool up() const { return up_; }
  int port() const { return port_; }
  std::string endpoint() const { return "127.0.0.1:" + std::to_string(port_); }
  link::Endpoint ep() const { return {"127.0.0.1", static_cast<uint16_t>(port_)}; }
  ChildProcess& process() { return *proc_; }

  std::string log() const {
    std::ifstream in(log_);
    std::stringstream ss;
    ss << in.rdbuf();
    return ss.str();
  }
  // Waits (bounded) until the log contains `text`.
  bool wait_log(const std::string& text, int timeout_ms = 20000) const {
    const auto end = std::chrono::steady_clock::now() + std::chrono::milliseconds(timeout_ms);
    while (std::chrono::steady_clock::now() < end) {
      if (log().find(text) != std::string::npos) return true;
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
    }
    return false;
  }

 private:
  int port_;
  std::string log_;
  std::unique_ptr<ChildProcess> proc_;
  bool up_ = false;
};

// The first child process of `parent` (e.g. a worker's RPC server), or -1.
inline int child_pid_of(int parent) {
  // Each thread lists the children it forked; the worker forks from its supervisor thread.
  std::error_code ec;
  for (const auto& task : std::filesystem::directory_iterator("/proc/" + std::to_string(parent) + "/task", ec)) {
    std::ifstream in(task.path() / "children");
    int pid = -1;
    if (in >> pid) return pid;
  }
  return -1;
}

// Resident memory of `pid` in KiB (0 when it is gone).
inline uint64_t rss_kib(int pid) {
  std::ifstream in("/proc/" + std::to_string(pid) + "/status");
  for (std::string line; std::getline(in, line);) {
    if (line.rfind("VmRSS:", 0) == 0) return std::stoull(line.substr(6));
  }
  return 0;
}

// A started forwarder to `w` whose link is up (test expectations fail otherwise).
inline std::unique_ptr<link::Forwarder> forward_to(const WorkerProcess& w, const link::Secret& secret) {
  link::ForwarderOptions o;
  o.worker = w.ep();
  auto f = std::make_unique<link::Forwarder>(o, secret);
  EXPECT_TRUE(f->start().is_ok());
  EXPECT_TRUE(f->wait_until_up(link::Millis(10000)));
  return f;
}

}  // namespace tandem::testing
