// The head side of the link: a loopback listener that the engine's ggml RPC client connects to,
// forwarding each connection to one worker through an authenticated `rpc` link connection, with a
// `control` connection beside it for heartbeats. The gateway owns one per worker;
// `tandem link forward` runs one alone.
//
// A worker whose heartbeat is missing longer than the deadline is declared lost: every local
// connection is closed at once (the engine's RPC client then fails instead of hanging forever),
// new local connections are closed until the heartbeat is back, and the link-lost callback runs.
#pragma once

#include <atomic>
#include <condition_variable>
#include <functional>
#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "common/status.h"
#include "link/counters.h"
#include "link/protocol.h"
#include "link/secret.h"
#include "link/socket.h"
#include "link/thread_set.h"

namespace tandem::link {

struct ForwarderOptions {
  Endpoint worker;                  // the worker's public listener
  Endpoint listen{"127.0.0.1", 0};  // local listener; port 0 picks one (see Forwarder::port)
  HandshakeOptions handshake = default_handshake_options();
  Millis heartbeat_interval{1000};
  Millis heartbeat_deadline{5000};  // no line from the worker for this long: link lost
};

enum class LinkState { connecting, up, lost, stopped };
const char* link_state_name(LinkState s);

struct ForwarderStats {
  LinkState state = LinkState::connecting;
  uint64_t bytes_to_worker = 0;    // rpc bytes, head -> worker, since start
  uint64_t bytes_from_worker = 0;  // rpc bytes, worker -> head
  uint64_t connections = 0;        // local connections accepted
  uint64_t active = 0;             // rpc sessions spliced now
  LatencySnapshot heartbeat;       // heartbeat round trips
  std::string worker_name;         // as the worker introduced itself ("" before the first handshake)
  std::string last_error;          // the latest failure, "" if none
};

// Thread-safety: every public method may be called from any thread. Callbacks run on internal
// threads and must not call stop() (it joins those threads).
class Forwarder {
 public:
  Forwarder(ForwarderOptions options, Secret secret);
  ~Forwarder();  // stop()
  Forwarder(const Forwarder&) = delete;
  Forwarder& operator=(const Forwarder&) = delete;

  // Called with the reason each time the link goes from up to lost. Set before start().
  void on_link_lost(std::function<void(const std::string&)> fn) { on_lost_ = std::move(fn); }
  // Called for every notable event (log lines). Set before start(). Default: none.
  void on_log(std::function<void(const std::string&)> fn) { log_ = std::move(fn); }

  // Binds the local listener and starts the threads; returns at once (the link comes up in the
  // background: see state() / wait_until_up()). Error: the listener cannot be bound.
  Status start();
  // Closes the listener and every connection and joins the threads. Idempotent.
  void stop();

  uint16_t port() const { return port_; }  // the local port, valid after start()
  LinkState state() const { return state_.load(); }
  ForwarderStats stats() const;
  // Waits until the heartbeat connection is up; false after `timeout` or once stopped.
  bool wait_until_up(Millis timeout);

 private:
  void accept_loop();
  void serve_local(int local_fd);
  void heartbeat_loop();
  Status heartbeat_session();         // one control connection, until it fails or stop()
  Result<Fd> dial_worker(Role role);  // connect + handshake, with the step deadlines
  void set_state(LinkState s, const std::string& why);
  void cut_sessions();
  bool sleep_unless_stopped(Millis d);
  void log(const std::string& line) const;
  std::string context() const;

  // Constant after construction / start().
  const ForwarderOptions options_;
  const Secret secret_;
  std::function<void(const std::string&)> on_lost_, log_;
  Fd listener_;
  uint16_t port_ = 0;
  int wake_[2] = {-1, -1};  // a pipe: written once by stop() to wake every poll

  ByteCounters bytes_;
  LatencyStats heartbeat_rtt_;
  std::atomic<LinkState> state_{LinkState::connecting};
  std::atomic<bool> stopping_{false};
  std::atomic<uint64_t> connections_{0};

  mutable std::mutex mutex_;
  std::condition_variable changed_;  // state_ or stopping_ changed
  // guarded by mutex_
  std::set<int> session_fds_;  // sockets of live sessions (local and remote), shut down on cut
  int rpc_active_ = 0;         // sessions dialling or spliced (changed_ signals decrements)
  std::string worker_name_, last_error_;

  ThreadSet sessions_;  // one per local connection
  std::thread accept_thread_, heartbeat_thread_;
};

}  // namespace tandem::link
