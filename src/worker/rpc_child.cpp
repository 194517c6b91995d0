#include "worker/rpc_child.h"

#include <fcntl.h>
#include <net/if.h>
#include <sched.h>
#include <signal.h>
#include <sys/ioctl.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "common/log.h"
#include "datapath/input_writes.h"
#include "worker/cache_loader.h"
#include "worker/rpc_server.h"

extern char** environ;

namespace tandem::worker {

const char* child_state_name(ChildState s) {
  switch (s) {
    case ChildState::starting:
      return "starting";
    case ChildState::running:
      return "running";
    case ChildState::restarting:
      return "restarting";
    case ChildState::stopped:
      return "stopped";
  }
  return "?";
}

namespace {

// Inside a private namespace nothing else can hold a port, so the child's is fixed.
constexpr uint16_t kNamespacePort = 50052;

std::string describe_exit(int st) {
  if (WIFEXITED(st) && WEXITSTATUS(st) == kCacheLoadFailedExit) {
    return "stopped because a cached weight could not be loaded (its log line says which and why)";
  }
  if (WIFEXITED(st) && WEXITSTATUS(st) == datapath::kInputReuseFailedExit) {
    return "stopped because the head's repeated-input marker named a slot it does not hold (its log line says which)";
  }
  if (WIFEXITED(st)) return "exited with status " + std::to_string(WEXITSTATUS(st));
  if (WIFSIGNALED(st))
    return std::string("killed by signal ") + std::to_string(WTERMSIG(st)) + " (" + strsignal(WTERMSIG(st)) + ")";
  return "ended";
}

// True when /proc/<pid>/net/tcp (the child's own network namespace) shows a listener on `port`.
bool proc_listens(pid_t pid, uint16_t port) {
  std::ifstream in("/proc/" + std::to_string(pid) + "/net/tcp");
  std::string line;
  char want[8];
  std::snprintf(want, sizeof want, ":%04X", port);
  std::getline(in, line);  // header
  while (std::getline(in, line)) {
    std::istringstream ss(line);
    std::string sl, local, remote, st;
    ss >> sl >> local >> remote >> st;
    if (st == "0A" && local.size() > 5 && local.compare(local.size() - 5, 5, want) == 0) return true;
  }
  return false;
}

uint16_t pick_free_loopback_port() {
  auto l = link::listen_tcp({"127.0.0.1", 0});
  return l.is_ok() ? link::local_port(l->get()) : 0;
}

}  // namespace

RpcChild::RpcChild(RpcChildOptions options) : options_(std::move(options)) {}

RpcChild::~RpcChild() {
  stop();
  if (netns_fd_ >= 0) ::close(netns_fd_);
}

Status RpcChild::setup_namespace() {
  if (!options_.private_netns) {
    isolation_ = "NOT isolated: private network namespace turned off (--no-private-netns)";
    return Status::ok();
  }
  std::string why;
  // unshare() moves only the calling thread, so a short-lived thread creates the namespace and
  // leaves a descriptor of it behind; the worker's own threads stay in the host namespace.
  std::thread([&] {
    if (::unshare(CLONE_NEWNET) != 0) {
      why = std::string("unshare(CLONE_NEWNET): ") + std::strerror(errno);
      return;
    }
    const int s = ::socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
    ifreq ifr{};
    std::strncpy(ifr.ifr_name, "lo", IFNAMSIZ - 1);
    if (s < 0 || ::ioctl(s, SIOCGIFFLAGS, &ifr) != 0 ||
        (ifr.ifr_flags |= IFF_UP | IFF_RUNNING, ::ioctl(s, SIOCSIFFLAGS, &ifr) != 0)) {
      why = std::string("bringing up loopback in the new namespace: ") + std::strerror(errno);
    } else {
      netns_fd_ = ::open("/proc/thread-self/ns/net", O_RDONLY | O_CLOEXEC);
      if (netns_fd_ < 0) why = std::string("opening the namespace: ") + std::strerror(errno);
    }
    if (s >= 0) ::close(s);
  }).join();
  if (netns_fd_ >= 0) {
    port_ = kNamespacePort;
    isolation_ = "isolated: the RPC server runs in a private network namespace, reachable only through this worker";
  } else {
    isolation_ = "NOT isolated: could not create a private network namespace (" + why + ")";
  }
  return Status::ok();
}

Status RpcChild::start() {
  TANDEM_RETURN_IF_ERROR(setup_namespace());
  if (port_ == 0) port_ = pick_free_loopback_port();
  if (port_ == 0) return Status::unavailable("no free loopback port for the RPC server");
  if (netns_fd_ < 0) {
    isolation_ +=
        "; the RPC server listens on 127.0.0.1:" + std::to_string(port_) + ", open to every user of this host";
  }
  {
    std::lock_guard<std::mutex> lock(mutex_);
    stopping_ = false;
    state_ = ChildState::starting;
  }
  supervisor_ = std::thread(&RpcChild::supervise, this);
  std::unique_lock<std::mutex> lock(mutex_);
  changed_.wait_for(lock, options_.ready_timeout + std::chrono::seconds(1),
                    [&] { return state_ == ChildState::running || (starts_ >= 1 && state_ != ChildState::starting); });
  if (state_ == ChildState::running) return Status::ok();
  const std::string why = last_exit_.empty()
                              ? "it did not listen within " + std::to_string(options_.ready_timeout.count()) + " ms"
                              : "it " + last_exit_;
  lock.unlock();
  stop();
  return Status::unavailable("the RPC server could not start: " + why + " (its output is above)");
}

void RpcChild::stop() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    stopping_ = true;
    if (pid_ > 0) ::kill(pid_, SIGTERM);
    changed_.notify_all();
  }
  if (!supervisor_.joinable()) return;
  {
    std::unique_lock<std::mutex> lock(mutex_);
    if (!changed_.wait_for(lock, std::chrono::seconds(5), [&] { return pid_ == 0; }) && pid_ > 0) ::kill(pid_, SIGKILL);
  }
  supervisor_.join();
  std::lock_guard<std::mutex> lock(mutex_);
  state_ = ChildState::stopped;
}

pid_t RpcChild::spawn() {
  // Everything the child needs is built before fork: only async-signal-safe calls after it.
  std::string exe = options_.executable;
  if (exe.empty()) {  // the real path, so that ps shows "tandem worker rpc-server"
    std::error_code ec;
    exe = std::filesystem::read_symlink("/proc/self/exe", ec).string();
    if (ec) exe = "/proc/self/exe";
  }
  std::vector<std::string> args = {exe,
                                   "worker",
                                   "rpc-server",
                                   "--endpoint",
                                   "127.0.0.1:" + std::to_string(port_),
                                   "--threads",
                                   std::to_string(options_.threads)};
  for (const auto& d : options_.devices) args.insert(args.end(), {"--device", d});
  if (!options_.cache_dir.empty()) args.insert(args.end(), {"--cache-dir", options_.cache_dir});
  if (!options_.async_input_writes) args.emplace_back("--sync-input-writes");
  if (log::format() == log::Format::json) args.insert(args.end(), {"--log-format", "json"});
  std::vector<char*> argv;
  for (auto& a : args) argv.push_back(a.data());
  argv.push_back(nullptr);
  std::vector<std::string> env_store;
  for (char** e = environ; *e != nullptr; ++e) {
    if (std::strncmp(*e, "GGML_CUDA_DISABLE_GRAPHS=", 25) != 0 && std::strncmp(*e, "GGML_NO_BACKTRACE=", 18) != 0) {
      env_store.emplace_back(*e);
    }
  }
  if (!options_.cuda_graphs) env_store.emplace_back("GGML_CUDA_DISABLE_GRAPHS=1");
  // A head that goes away mid-session makes ggml's RPC server abort; a gdb backtrace of that
  // says nothing an operator can act on.
  if (!options_.backtraces) env_store.emplace_back("GGML_NO_BACKTRACE=1");
  std::vector<char*> envp;
  for (auto& e : env_store) envp.push_back(e.data());
  envp.push_back(nullptr);
  const pid_t parent = ::getpid();
  const int netns = netns_fd_;
  const pid_t pid = ::fork();
  if (pid != 0) return pid;
  sigset_t all;
  sigemptyset(&all);
  ::sigprocmask(SIG_SETMASK, &all, nullptr);  // the worker blocks SIGTERM for its sigwait
  // Dies with the supervisor thread that forked it, so a killed worker leaves no orphan holding
  // the GPU; the supervisor lives until stop().
  ::prctl(PR_SET_PDEATHSIG, SIGKILL);
  if (::getppid() != parent) ::_exit(125);
  if (netns >= 0 && ::setns(netns, CLONE_NEWNET) != 0) ::_exit(126);
  ::execve(argv[0], argv.data(), envp.data());
  ::_exit(127);
}

bool RpcChild::wait_listening(pid_t pid, link::Deadline deadline) {
  while (link::Clock::now() < deadline) {
    if (proc_listens(pid, port_)) return true;
    if (::kill(pid, 0) != 0) return false;
    std::unique_lock<std::mutex> lock(mutex_);
    // Polled: ggml offers no readiness signal. 50 ms is nothing next to a backend's start-up.
    if (changed_.wait_for(lock, std::chrono::milliseconds(50), [&] { return stopping_; })) return false;
  }
  return false;
}

void RpcChild::supervise() {
  for (;;) {
    const pid_t pid = spawn();
    {
      std::lock_guard<std::mutex> lock(mutex_);
      if (pid < 0) {
        last_exit_ = std::string("could not be forked: ") + std::strerror(errno);
      } else {
        pid_ = pid;
        ++starts_;
      }
      changed_.notify_all();
    }
    if (pid > 0) {
      if (wait_listening(pid, link::deadline_in(options_.ready_timeout))) {
        std::lock_guard<std::mutex> lock(mutex_);
        state_ = ChildState::running;
        changed_.notify_all();
      } else {
        ::kill(pid, SIGKILL);  // hung in start-up or stop() came: it gets a fresh start
      }
      int st = 0;
      while (::waitpid(pid, &st, 0) < 0 && errno == EINTR) {}
      std::lock_guard<std::mutex> lock(mutex_);
      last_exit_ = describe_exit(st);
      pid_ = 0;
      state_ = stopping_ ? ChildState::stopped : ChildState::restarting;
      changed_.notify_all();
    }
    bool stopping;
    {
      std::lock_guard<std::mutex> lock(mutex_);
      stopping = stopping_;
    }
    if (stopping) return;
    emit("rpc_server_exited", "the RPC server (pid " + std::to_string(pid) + ") " + last_exit_ + "; restarting it in " +
                                  std::to_string(options_.restart_delay.count()) + " ms");
    std::unique_lock<std::mutex> lock(mutex_);
    if (changed_.wait_for(lock, options_.restart_delay, [&] { return stopping_; })) return;
    state_ = ChildState::starting;
  }
}

void RpcChild::emit(const std::string& event, const std::string& detail) {
  if (on_event_) on_event_(event, detail);
}

Result<link::Fd> RpcChild::connect(link::Millis timeout) {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    if (state_ != ChildState::running)
      return Status::unavailable(std::string("the RPC server is ") + child_state_name(state_));
  }
  const link::Endpoint ep{"127.0.0.1", port_};
  if (netns_fd_ < 0) return link::connect_tcp(ep, link::deadline_in(timeout));
  // A socket belongs to the namespace of the thread that creates it: join the child's namespace
  // on a throw-away thread, connect, and hand the socket back.
  Result<link::Fd> out = Status::internal("not connected");
  std::thread([&] {
    if (::setns(netns_fd_, CLONE_NEWNET) != 0) {
      out = Status::internal(std::string("setns into the RPC server's namespace: ") + std::strerror(errno));
      return;
    }
    out = link::connect_tcp(ep, link::deadline_in(timeout));
  }).join();
  return out;
}

void RpcChild::release_memory() {
  std::lock_guard<std::mutex> lock(mutex_);
  // Only a child that listens has its handler installed; SIGUSR1 would end one still starting.
  if (state_ == ChildState::running && pid_ > 0) ::kill(pid_, kReleaseMemorySignal);
}

RpcChildInfo RpcChild::info() const {
  std::lock_guard<std::mutex> lock(mutex_);
  RpcChildInfo i;
  i.state = state_;
  i.pid = pid_;
  i.starts = starts_;
  i.last_exit = last_exit_;
  i.isolated = netns_fd_ >= 0;
  i.isolation = isolation_;
  i.port = port_;
  return i;
}

}  // namespace tandem::worker
