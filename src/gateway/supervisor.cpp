// The supervisor's state machine: start and stop, the tick that decides what comes next, the
// state. The engine's launch is in supervisor_engine.cpp, the workers' questions in
// supervisor_workers.cpp, the canary in supervisor_canary.cpp, /health in supervisor_report.cpp.
#include "gateway/supervisor.h"

#include <signal.h>
#include <stdlib.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstring>

#include "gateway/supervisor_report.h"

namespace tandem::gateway {
namespace {

constexpr auto kTick = std::chrono::milliseconds(100);

}  // namespace

Supervisor::Supervisor(SupervisorOptions options) : options_(std::move(options)) {}

Supervisor::~Supervisor() { stop(); }

void Supervisor::log(const std::string& line) {
  if (options_.log) options_.log(line);
}

Status Supervisor::start() {
  std::string dir = options_.runtime_dir;
  if (dir.empty()) {
    char tmpl[] = "/tmp/tandem-serve-XXXXXX";
    if (::mkdtemp(tmpl) == nullptr)
      return Status::internal(std::string("cannot create a runtime folder: ") + std::strerror(errno));
    dir = tmpl;
  }
  socket_path_ = dir + "/engine.sock";
  if (!options_.workers.empty() && !options_.secret)
    return Status::invalid_argument("workers need a cluster secret (--secret-file)");
  for (const WorkerLink& w : options_.workers) {
    link::ForwarderOptions fo;
    fo.worker = w.address;
    fo.heartbeat_deadline = options_.heartbeat_deadline;
    fo.handshake.name = options_.head_name;
    auto f = std::make_unique<link::Forwarder>(fo, *options_.secret);
    const std::string where = w.name + " (" + w.address.to_string() + ")";
    f->on_link_lost([this, where](const std::string& why) {
      backend_.set_failure_reason("worker " + where + " lost: " + why);
      log("worker " + where + ": link lost: " + why);
    });
    TANDEM_RETURN_IF_ERROR(f->start().with_context("worker " + w.name + " (" + w.address.to_string() + ")"));
    forwarders_.push_back(std::move(f));
  }
  thread_ = std::thread([this] { loop(); });
  poll_thread_ = std::thread([this] { poll_engine(); });
  return Status::ok();
}

void Supervisor::stop() {
  if (stop_.exchange(true)) return;
  if (thread_.joinable()) thread_.join();
  if (poll_thread_.joinable()) poll_thread_.join();
  int pid;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    pid = engine_pid_;
  }
  if (pid > 0) {
    ::kill(pid, SIGTERM);
    for (int i = 0; i < 100; ++i) {
      if (::waitpid(pid, nullptr, WNOHANG) == pid) {
        pid = -1;
        break;
      }
      std::this_thread::sleep_for(kTick);
    }
    if (pid > 0) {
      ::kill(pid, SIGKILL);
      ::waitpid(pid, nullptr, 0);
    }
  }
  // With the engine gone its connection fails every open request, the canary's too.
  if (canary_thread_.joinable()) canary_thread_.join();
  backend_.set_client(nullptr);
  for (auto& f : forwarders_) f->stop();
  ::unlink(socket_path_.c_str());
}

void Supervisor::loop() {
  while (!stop_) {
    tick();
    std::this_thread::sleep_for(kTick);
  }
}

void Supervisor::poll_engine() {
  while (!stop_) {
    for (int i = 0; i < 10 && !stop_; ++i) std::this_thread::sleep_for(kTick);
    // The engine pushes status only on changes (load progress, ready); slots, queue and tok/s
    // change all the time, so they are asked for: the answer reaches engine_status_ through the
    // client's status callback.
    auto client = backend_.client();
    if (client && client->connected()) (void)client->status(1000);
  }
}

bool Supervisor::all_links_up() {
  for (auto& f : forwarders_) {
    if (f->state() != link::LinkState::up) return false;
  }
  return true;
}

void Supervisor::tick() {
  reap_engine();
  const bool links_up = all_links_up();
  int pid;
  bool connected, ready_to_canary;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    pid = engine_pid_;
    connected = engine_connected_;
    ready_to_canary = connected && engine_status_.state == engine::EngineState::ready && !canary_running_;
  }
  if (!links_up) return on_links_down(pid);
  if (pid <= 0) {
    bool due;
    {
      std::lock_guard<std::mutex> lock(mutex_);
      due = Clock::now() >= restart_at_;
    }
    if (due && workers_free() && memory_free()) spawn_engine();
    return;
  }
  if (!connected) return connect_engine();
  if (restart_failed_engine()) return;
  if (ready_to_canary && canary_due()) run_canary();
}

void Supervisor::on_links_down(int pid) {
  if (pid > 0) {
    std::string lost;
    for (size_t i = 0; i < forwarders_.size(); ++i) {
      if (forwarders_[i]->state() == link::LinkState::up) continue;
      const auto st = forwarders_[i]->stats();
      lost += (lost.empty() ? "" : "; ") + std::string("worker ") + options_.workers[i].name + " (" +
              options_.workers[i].address.to_string() + ") lost" + (st.last_error.empty() ? "" : ": " + st.last_error);
    }
    kill_engine(lost);
  }
  if (state() != serve_state_name(ServeState::starting))
    set_state(ServeState::degraded, "waiting for every worker's heartbeat");
}

bool Supervisor::restart_failed_engine() {
  std::string failed;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    if (engine_status_.state == engine::EngineState::failed) failed = engine_status_.error;
    if (kill_requested_) failed = last_error_;
  }
  if (failed.empty()) return false;
  // A failed load or a hung generation does not heal in place: restart with backoff.
  kill_engine(failed, /*backoff=*/true);
  set_state(ServeState::degraded, failed);
  return true;
}

void Supervisor::set_state(ServeState state, const std::string& why) {
  std::lock_guard<std::mutex> lock(mutex_);
  if (state_ == state) return;
  state_ = state;
  if (options_.log) options_.log("state " + std::string(serve_state_name(state)) + ": " + why);
}

std::string Supervisor::state() {
  std::lock_guard<std::mutex> lock(mutex_);
  if (engine_status_.state == engine::EngineState::loading && engine_connected_) {
    return "loading " + std::to_string(static_cast<int>(engine_status_.load.fraction * 100)) + "%";
  }
  return std::string(serve_state_name(state_));
}

HealthReport Supervisor::health() {
  SupervisorSnapshot s;
  s.model_id = options_.model_id;
  s.head_name = options_.head_name;
  for (size_t i = 0; i < forwarders_.size(); ++i) {
    // The engine names a worker by the forwarder's loopback port it reaches the worker through.
    s.workers.push_back({options_.workers[i].name, options_.workers[i].address.to_string(),
                         "127.0.0.1:" + std::to_string(forwarders_[i]->port()), forwarders_[i]->stats(), ""});
  }
  std::lock_guard<std::mutex> lock(mutex_);
  for (WorkerSnapshot& w : s.workers) {
    const auto it = refused_.find(w.name);
    if (it != refused_.end()) w.refused = it->second;
  }
  s.state = state_;
  s.engine_pid = engine_pid_;
  s.engine_connected = engine_connected_;
  s.restarts = restarts_;
  s.engine = engine_status_;
  s.last_error = last_error_;
  return health_report(s);
}

}  // namespace tandem::gateway
