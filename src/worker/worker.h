// `tandem worker`: the public, authenticated listener of a worker machine in front of its ggml RPC
// server (a child process, see rpc_child.h).
//
// Each accepted connection does the link handshake (link/protocol.h) within its deadline, then:
//   rpc      spliced byte for byte to the RPC child; one head at a time (ggml's server serves one
//            client and leaves a second hanging forever), a second one is refused at once with a
//            verdict naming the head already connected;
//   control  JSON lines (link/control.h): "status", "ping"; events such as the RPC child's
//            restarts are pushed to every control connection;
//   probe    echo and bulk transfers that measure the cable (link/probe.h), for `tandem doctor`.
// Nothing reaches the RPC child before a peer has proved that it holds the cluster secret.
// One log line per connection: peer, role, outcome.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <memory>
#include <mutex>
#include <nlohmann/json.hpp>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "common/status.h"
#include "link/protocol.h"
#include "link/secret.h"
#include "link/socket.h"
#include "link/thread_set.h"
#include "worker/rpc_child.h"

namespace tandem::worker {

struct WorkerOptions {
  link::Endpoint listen;
  RpcChildOptions rpc;
  uint64_t cache_max_bytes = 0;  // 0: unbounded; else LRU eviction after each head session
  link::HandshakeOptions handshake = link::default_handshake_options();
  link::Millis control_idle{60000};  // a control connection silent this long is closed
};

// Thread-safety: start/stop from one thread; status() from any.
class Worker {
 public:
  Worker(WorkerOptions options, link::Secret secret);
  ~Worker();  // stop()
  Worker(const Worker&) = delete;
  Worker& operator=(const Worker&) = delete;

  // Starts the RPC child (waits until it listens), then the public listener. Errors: the child
  // could not start, the address cannot be bound.
  Status start();
  // Closes the listener and every connection, stops the child, joins every thread. Idempotent.
  void stop();

  uint16_t port() const { return port_; }
  // True while the listener accepts connections (for the systemd watchdog).
  bool healthy() const;
  nlohmann::json status() const;  // the "status" answer of the control channel
  // The "cache" answer: {"dir", "entries": [[hash name, bytes], ...]} (empty without a cache).
  nlohmann::json cache_listing() const;

 private:
  struct Control {
    int fd;
    std::mutex write_mutex;  // one writer at a time: the session thread and event broadcasts
  };

  void accept_loop();
  void serve(int fd);
  link::Verdict admit(const link::PeerInfo& peer, int peer_fd);
  bool head_hung_up() const;  // the rpc head's socket has been closed by its peer (mutex_ held)
  std::string serve_rpc(int fd, const link::PeerInfo& peer);
  std::string serve_control(int fd);
  void broadcast(const nlohmann::json& event);
  void release_rpc();
  void enforce_cache_limit_now();

  // Constant after start().
  const WorkerOptions options_;
  const link::Secret secret_;
  const std::chrono::steady_clock::time_point started_;
  RpcChild child_;
  link::Fd listener_;
  uint16_t port_ = 0;
  int wake_[2] = {-1, -1};
  std::thread accept_thread_;
  link::ThreadSet connections_;  // one per accepted connection

  std::atomic<bool> stopping_{false};
  std::atomic<bool> accepting_{false};  // the accept loop runs
  std::atomic<uint64_t> bytes_from_head_{0}, bytes_to_head_{0};
  std::atomic<uint64_t> accepted_{0}, refused_{0};
  std::atomic<int> handshaking_{0};  // connections still in the handshake

  mutable std::mutex mutex_;
  std::condition_variable rpc_free_;
  // guarded by mutex_
  bool rpc_busy_ = false;
  int head_fd_ = -1;  // the rpc head's socket while rpc_busy_
  std::string head_name_, head_address_, head_since_;
  std::set<int> live_fds_;
  std::vector<std::shared_ptr<Control>> controls_;
  std::string last_event_;
};

// Runs a worker until SIGTERM or SIGINT, then stops it cleanly. Logs to stderr.
Status run_worker(const WorkerOptions& options, link::Secret secret);

}  // namespace tandem::worker
