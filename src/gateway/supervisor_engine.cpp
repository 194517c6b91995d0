// The engine child: its arguments (engine/launch.h), fork and exec, the connection to it, and its
// end, reaped or killed.
#include "gateway/supervisor.h"

#include <fcntl.h>
#include <linux/close_range.h>
#include <signal.h>
#include <stdlib.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstring>

#include "common/log.h"

namespace tandem::gateway {
namespace {

constexpr auto kMaxBackoff = std::chrono::seconds(30);

std::string describe_exit(int status) {
  if (WIFEXITED(status)) return "exited with status " + std::to_string(WEXITSTATUS(status));
  if (WIFSIGNALED(status)) return std::string("was killed by signal ") + strsignal(WTERMSIG(status));
  return "ended";
}

// Forks and execs the engine (args[0]); returns its pid (-1 when fork fails). The child dies with
// this process and inherits none of its sockets.
pid_t start_engine_process(std::vector<std::string>& args, bool backtraces) {
  std::vector<char*> argv;  // built before fork: the child of a threaded process must not allocate
  for (auto& a : args) argv.push_back(a.data());
  argv.push_back(nullptr);
  // ggml prints a gdb backtrace on every abort, and an engine whose worker went away aborts: the
  // log would fill with debugger output that says nothing an operator can act on.
  std::vector<std::string> env_text;
  for (char** e = environ; *e != nullptr; ++e) {
    if (std::strncmp(*e, "GGML_NO_BACKTRACE=", 18) != 0) env_text.emplace_back(*e);
  }
  if (!backtraces) env_text.emplace_back("GGML_NO_BACKTRACE=1");
  std::vector<char*> envp;
  for (auto& e : env_text) envp.push_back(e.data());
  envp.push_back(nullptr);
  // With JSON logs the engine's stdout and stderr come through a pipe that this process turns into
  // records: ggml and llama.cpp's common library print there themselves, and an abort's last words
  // must survive the engine.
  int out_pipe[2] = {-1, -1};
  if (log::format() == log::Format::json && ::pipe2(out_pipe, O_CLOEXEC) != 0) out_pipe[0] = out_pipe[1] = -1;
  const pid_t parent = ::getpid();
  const pid_t pid = ::fork();
  if (pid == 0) {
    ::prctl(PR_SET_PDEATHSIG, SIGKILL);  // never outlive the gateway
    if (::getppid() != parent) ::_exit(1);
    if (out_pipe[1] >= 0) {
      ::dup2(out_pipe[1], STDOUT_FILENO);
      ::dup2(out_pipe[1], STDERR_FILENO);
    }
    ::close_range(3, ~0U, 0);  // no inherited client or worker sockets
    ::execve(argv[0], argv.data(), envp.data());
    static const char msg[] = "tandem serve: cannot run tandem-engine\n";
    [[maybe_unused]] ssize_t n = ::write(2, msg, sizeof msg - 1);
    ::_exit(127);
  }
  if (out_pipe[1] >= 0) {
    ::close(out_pipe[1]);
    log::relay_lines_as_records(out_pipe[0], STDERR_FILENO, "engine");
  }
  return pid;
}

}  // namespace

engine::EngineLaunch Supervisor::engine_launch() {
  engine::EngineLaunch l;
  l.socket_path = socket_path_;
  l.model = options_.model;
  l.context = options_.context;
  l.parallel = options_.parallel;
  l.cpu_layers = options_.cpu_layers;
  for (auto& f : forwarders_) l.rpc.push_back("127.0.0.1:" + std::to_string(f->port()));
  // Every forwarder reaches a tandem worker whose link protocol matched ours: it takes the
  // engine's input-reuse markers (datapath/input_reuse.h).
  l.tandem_workers = l.rpc;
  l.device_layers = options_.device_layers;
  l.workers_first = options_.workers_first;
  if (options_.ffn_tensor) l.split_mode = "ffn-tensor";
  l.threads = std::max(0, options_.threads);
  l.cuda_graphs = options_.cuda_graphs;
  l.mmap = options_.mmap;
  l.prompt_cache_bytes = options_.prompt_cache;
  if (!options_.prompt_cache_dir.empty()) {
    l.prompt_cache_dir = options_.prompt_cache_dir;
    l.prompt_cache_dir_bytes = options_.prompt_cache_dir_size;
  }
  l.speculative = options_.speculative;
  l.draft_model = options_.draft_model;
  l.draft_max = options_.draft_max;
  l.kv_type = options_.kv_type;
  l.spec_synth_len = options_.spec_synth_len;
  l.worker_caches = cache_listings();
  l.json_logs = log::format() == log::Format::json;
  l.extra = options_.engine_flags;
  return l;
}

void Supervisor::spawn_engine() {
  std::vector<std::string> args = {options_.engine_program, "engine"};
  for (std::string& a : engine::launch_args(engine_launch())) args.push_back(std::move(a));
  ::unlink(socket_path_.c_str());
  const pid_t pid = start_engine_process(args, options_.backtraces);
  std::string cmd;
  for (auto& a : args) cmd += (cmd.empty() ? "" : " ") + a;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    engine_pid_ = pid;
    engine_connected_ = false;
    engine_status_ = engine::EngineStatus();
    engine_started_ = Clock::now();
    engine_verified_ = false;
    meter_ = std::make_unique<ProgressMeter>("loading " + options_.model, stderr, options_.progress_tty);
  }
  log("engine started (pid " + std::to_string(pid) + "): " + cmd);
  set_state(restarts_ > 0 ? ServeState::recovering : ServeState::loading, "engine starting");
}

void Supervisor::connect_engine() {
  auto on_status = [this](const engine::EngineStatus& s) {
    std::lock_guard<std::mutex> lock(mutex_);
    engine_status_ = s;
    if (meter_ && s.state == engine::EngineState::loading && s.load.total_bytes > 0)
      meter_->update(s.load.bytes, s.load.total_bytes);
    if (meter_ && s.state != engine::EngineState::loading) {
      if (s.load.total_bytes > 0) meter_->update(s.load.total_bytes, s.load.total_bytes);
      meter_->finish();
      meter_.reset();
    }
    if (s.state == engine::EngineState::failed) last_error_ = "the engine could not load the model: " + s.error;
  };
  auto client = engine::EngineClient::connect(socket_path_, 50, on_status);
  if (!client.is_ok()) return;  // not listening yet: next tick
  std::shared_ptr<engine::EngineClient> c = std::move(client.value());
  backend_.set_client(c);
  {
    std::lock_guard<std::mutex> lock(mutex_);
    engine_connected_ = true;
  }
  // The engine pushes status only on changes: ask once, in case it was ready before we connected.
  c->status(2000);
}

void Supervisor::reap_engine() {
  int pid;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    pid = engine_pid_;
  }
  if (pid <= 0) return;
  int status = 0;
  if (::waitpid(pid, &status, WNOHANG) != pid) return;
  std::string why = "the engine " + describe_exit(status);
  backend_.set_failure_reason(why);
  backend_.set_client(nullptr);  // requests in flight end with `unavailable`
  {
    std::lock_guard<std::mutex> lock(mutex_);
    engine_pid_ = -1;
    engine_connected_ = false;
    meter_.reset();
    if (!last_error_.empty() && engine_status_.state == engine::EngineState::failed) why += " (" + last_error_ + ")";
    engine_status_ = engine::EngineStatus();  // its slots, queue and tok/s went with it
    engine_status_.state = engine::EngineState::stopped;
    last_error_ = why;
    restart_at_ = Clock::now() + backoff_;
    log(why + "; restarting in " + std::to_string(backoff_.count()) + " s");
    backoff_ = std::min(kMaxBackoff, backoff_ * 2);
    ++restarts_;
  }
  set_state(ServeState::recovering, why);
}

void Supervisor::kill_engine(const std::string& why, bool backoff) {
  int pid;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    pid = engine_pid_;
  }
  if (pid <= 0) return;
  log("stopping the engine: " + why);
  backend_.set_failure_reason(why);
  ::kill(pid, SIGKILL);
  int status = 0;
  ::waitpid(pid, &status, 0);
  backend_.set_client(nullptr);
  std::lock_guard<std::mutex> lock(mutex_);
  engine_pid_ = -1;
  engine_connected_ = false;
  meter_.reset();
  engine_status_ = engine::EngineStatus();
  engine_status_.state = engine::EngineState::stopped;
  last_error_ = "engine stopped: " + why;
  kill_requested_ = false;
  // After a lost worker: restart as soon as every worker is back. After a failure of the engine
  // itself: back off, so a model that cannot load is not reloaded in a loop.
  restart_at_ = Clock::now() + (backoff ? backoff_ : std::chrono::seconds(0));
  if (backoff) {
    log("restarting the engine in " + std::to_string(backoff_.count()) + " s");
    backoff_ = std::min(kMaxBackoff, backoff_ * 2);
  }
  ++restarts_;
}

}  // namespace tandem::gateway
