// The ggml RPC server of a worker, run in a child process and kept alive.
//
// The child is this same `tandem` binary re-executed with the hidden `worker rpc-server`
// subcommand (rpc_server.h), which calls ggml_backend_rpc_start_server. We re-execute ourselves
// rather than spawn the stock `ggml-rpc-server` because: the worker is then one self-contained
// binary (the stock one is a build by-product that installs do not ship); tandem chooses the
// device list, thread count and cache folder directly (the stock one derives its cache folder from
// environment variables); and the child runs exactly the ggml that tandem was linked against.
//
// Isolation: where the host allows it (CAP_SYS_ADMIN), the child runs in a private network
// namespace that the worker creates, with only its own loopback up. The RPC port is then reachable
// from nothing but the worker, which connects from inside that namespace (a socket created by a
// thread that joined it). Otherwise the child listens on the host's 127.0.0.1, reachable by every
// local user, and isolation_note() says so.
#pragma once

#include <sys/types.h>

#include <atomic>
#include <condition_variable>
#include <functional>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "common/status.h"
#include "link/socket.h"

namespace tandem::worker {

struct RpcChildOptions {
  std::string executable;            // the tandem binary; default /proc/self/exe
  std::vector<std::string> devices;  // ggml device names; empty: the accelerators, else the CPU
  std::string cache_dir;             // ggml's weight cache; empty: none
  int threads = 0;                   // CPU threads; 0: all cores
  bool cuda_graphs = true;           // false: GGML_CUDA_DISABLE_GRAPHS=1 in the child's environment
  bool backtraces = false;           // false: GGML_NO_BACKTRACE=1, no gdb output when the child aborts
  bool async_input_writes = true;  // false: the child writes each step's inputs as ggml does (datapath/input_writes.h)
  bool private_netns = true;       // false: do not even try (tests of the fallback)
  link::Millis ready_timeout{60000};  // from spawn until the child listens
  link::Millis restart_delay{1000};
};

enum class ChildState { starting, running, restarting, stopped };
const char* child_state_name(ChildState s);

struct RpcChildInfo {
  ChildState state = ChildState::stopped;
  pid_t pid = 0;
  uint64_t starts = 0;    // spawns so far (1 after a clean start)
  std::string last_exit;  // e.g. "killed by signal 9", "" if it never exited
  bool isolated = false;  // runs in a private network namespace
  std::string isolation;  // one sentence: how it is isolated, or why it is not
  uint16_t port = 0;      // its port (inside its namespace when isolated)
};

// Thread-safety: all public methods may be called from any thread.
class RpcChild {
 public:
  explicit RpcChild(RpcChildOptions options);
  ~RpcChild();  // stop()
  RpcChild(const RpcChild&) = delete;
  RpcChild& operator=(const RpcChild&) = delete;

  // Called on the supervisor thread with a one-line description of each exit and restart.
  // Set before start().
  void on_event(std::function<void(const std::string& event, const std::string& detail)> fn) {
    on_event_ = std::move(fn);
  }

  // Sets up the namespace (or notes why not), spawns the child and waits until it listens.
  // Errors: the child could not start or did not listen within ready_timeout.
  Status start();
  // Stops the child (SIGTERM, SIGKILL after 5 s) and the supervisor. Idempotent.
  void stop();

  // A new connection to the child's RPC port, made from inside its namespace. Errors when the
  // child is not running or does not accept within `timeout`.
  Result<link::Fd> connect(link::Millis timeout);

  RpcChildInfo info() const;

  // Asks a running child to give the memory its last session freed back to the system
  // (run_rpc_server keeps large blocks in its heap); a no-op when it is not running.
  void release_memory();

 private:
  Status setup_namespace();
  pid_t spawn();
  bool wait_listening(pid_t pid, link::Deadline deadline);
  void supervise();
  void emit(const std::string& event, const std::string& detail);

  // Constant after start().
  const RpcChildOptions options_;
  std::function<void(const std::string&, const std::string&)> on_event_;
  int netns_fd_ = -1;  // the private namespace, held open so it outlives each child
  std::string isolation_;
  uint16_t port_ = 0;

  mutable std::mutex mutex_;
  std::condition_variable changed_;
  // guarded by mutex_
  ChildState state_ = ChildState::stopped;
  pid_t pid_ = 0;
  uint64_t starts_ = 0;
  std::string last_exit_;
  bool stopping_ = false;
  std::thread supervisor_;
};

}  // namespace tandem::worker
