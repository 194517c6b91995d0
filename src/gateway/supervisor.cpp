#include "gateway/supervisor.h"

#include <linux/close_range.h>
#include <signal.h>
#include <stdlib.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <fcntl.h>

#include <cstring>
#include <future>

#include "common/cached_tensor.h"
#include "common/log.h"
#include "gateway/prometheus.h"
#include "link/control.h"

namespace tandem::gateway {
namespace {

// The prompt cache's families: what each node holds, the bound, and the counts since the engine
// started (they restart with it, as Prometheus counters may).
std::string prometheus_prompt_cache(const engine::PromptCacheStats& c, const std::vector<prometheus::Sample>& held) {
  const auto one = [](uint64_t v) { return std::vector<prometheus::Sample>{{"", static_cast<double>(v)}}; };
  return prometheus::family("tandem_prompt_cache_bytes", "gauge",
                            "Bytes of prompt-cache states each node holds, in memory and on disk.", held) +
         prometheus::family("tandem_prompt_cache_capacity_bytes", "gauge",
                            "The prompt cache's bound on each node (0: off).", one(c.max_bytes)) +
         prometheus::family("tandem_prompt_cache_disk_capacity_bytes", "gauge",
                            "The prompt cache's disk bound on each node (0: no disk tier).", one(c.max_disk_bytes)) +
         prometheus::family("tandem_prompt_cache_entries", "gauge", "Prompt-cache states held.", one(c.entries)) +
         prometheus::family("tandem_prompt_cache_spills_total", "counter",
                            "States moved from memory to disk to keep every node within the memory bound.",
                            one(c.spills)) +
         prometheus::family("tandem_prompt_cache_hits_total", "counter",
                            "Requests that found a cached state sharing a longer prefix than any slot.", one(c.hits)) +
         prometheus::family("tandem_prompt_cache_misses_total", "counter",
                            "Requests that found no cached state longer than the slots' prefixes.", one(c.misses)) +
         prometheus::family("tandem_prompt_cache_evictions_total", "counter",
                            "States dropped to keep every node within the bound.", one(c.evictions)) +
         prometheus::family("tandem_prompt_cache_restored_tokens_total", "counter",
                            "Prompt tokens restored from the cache instead of evaluated.", one(c.restored_tokens)) +
         prometheus::family("tandem_prompt_cache_failed_restores_total", "counter",
                            "Cached states that could not be restored (the prompt was evaluated).",
                            one(c.failed_restores));
}

using Clock = std::chrono::steady_clock;
constexpr auto kTick = std::chrono::milliseconds(100);
constexpr auto kMaxBackoff = std::chrono::seconds(30);

std::string join(const std::vector<int>& v) {
  std::string s;
  for (int x : v) s += (s.empty() ? "" : ",") + std::to_string(x);
  return s;
}

std::string describe_exit(int status) {
  if (WIFEXITED(status)) return "exited with status " + std::to_string(WEXITSTATUS(status));
  if (WIFSIGNALED(status)) return std::string("was killed by signal ") + strsignal(WTERMSIG(status));
  return "ended";
}

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
    ready_to_canary = connected && engine_status_.state == "ready" && !canary_running_;
  }
  if (!links_up) {
    if (pid > 0) {
      std::string lost;
      for (size_t i = 0; i < forwarders_.size(); ++i) {
        if (forwarders_[i]->state() == link::LinkState::up) continue;
        const auto st = forwarders_[i]->stats();
        lost += (lost.empty() ? "" : "; ") + std::string("worker ") + options_.workers[i].name + " (" +
                options_.workers[i].address.to_string() + ") lost" +
                (st.last_error.empty() ? "" : ": " + st.last_error);
      }
      kill_engine(lost);
    }
    if (state() != "starting") set_state("degraded", "waiting for every worker's heartbeat");
    return;
  }
  if (pid <= 0) {
    bool due;
    {
      std::lock_guard<std::mutex> lock(mutex_);
      due = Clock::now() >= restart_at_;
    }
    if (due && workers_free() && memory_free()) spawn_engine();
    return;
  }
  if (!connected) {
    connect_engine();
    return;
  }
  std::string failed;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    if (engine_status_.state == "failed") failed = engine_status_.error;
    if (kill_requested_) failed = last_error_;
  }
  if (!failed.empty()) {
    // A failed load or a hung generation does not heal in place: restart with backoff.
    kill_engine(failed, /*backoff=*/true);
    set_state("degraded", failed);
    return;
  }
  if (!ready_to_canary) return;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    const auto since = Clock::now() - last_canary_;
    // A freshly loaded engine is tried at once; a failing one every few seconds; a healthy one
    // when idle, every canary_interval, because generation can die while every process looks alive.
    bool due;
    if (!engine_verified_ || state_ != "ready") {
      due = last_canary_ < engine_started_ || since >= std::chrono::seconds(5);
    } else {
      due = (!in_flight_ || in_flight_() == 0) && since >= options_.canary_interval;
    }
    if (!due) return;
    canary_running_ = true;
    last_canary_ = Clock::now();
  }
  // The previous canary has finished (canary_running_ was false); joined without the lock, which
  // its last steps take.
  if (canary_thread_.joinable()) canary_thread_.join();
  canary_thread_ = std::thread([this] { start_canary(); });
}

bool Supervisor::workers_free() {
  std::map<std::string, std::string> refused;
  for (size_t i = 0; i < options_.workers.size() && i < forwarders_.size(); ++i) {
    const WorkerLink& w = options_.workers[i];
    link::HandshakeOptions ho = link::default_handshake_options();
    ho.name = options_.head_name;
    auto st = link::control_request(w.address, *options_.secret, "status", ho);
    if (!st.is_ok()) continue;  // the heartbeat reports an unreachable worker
    const nlohmann::json head = st->value("head", nlohmann::json());
    // With no engine running we hold no session: a head the worker names is another one, or,
    // under our own name, one on another machine (the worker replaces only our own stale one).
    if (!head.is_object() || head.value("name", "") == options_.head_name) continue;
    refused[w.name] = "worker " + w.name + " (" + w.address.to_string() + ") serves another head, '" +
                      head.value("name", "?") + "' (" + head.value("address", "?") + ") since " +
                      head.value("since", "?") + "; a worker serves one head at a time: waiting until it is free";
  }
  std::lock_guard<std::mutex> lock(mutex_);
  for (const auto& [name, why] : refused) {
    if (refused_.count(name) == 0) log(why);
  }
  for (const auto& [name, why] : refused_) {
    if (refused.count(name) == 0) log("worker " + name + " is free again");
  }
  refused_ = refused;
  if (refused.empty()) return true;
  last_error_ = refused.begin()->second;
  restart_at_ = Clock::now() + std::chrono::seconds(5);
  return false;
}

bool Supervisor::memory_free() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    if (!options_.memory_check || restarts_ == 0) return true;
  }
  const std::string short_of = options_.memory_check();
  std::lock_guard<std::mutex> lock(mutex_);
  if (short_of.empty()) {
    if (!memory_short_.empty()) log("the memory the plan needs is free again: restarting the engine");
    memory_short_.clear();
    return true;
  }
  // Logged when it starts and then once a minute; /health carries the latest figures.
  if (memory_short_.empty() || Clock::now() - memory_logged_ >= std::chrono::seconds(60)) {
    log("not restarting the engine yet: " + short_of);
    memory_logged_ = Clock::now();
  }
  memory_short_ = short_of;
  last_error_ = "waiting for memory before restarting the engine: " + short_of;
  restart_at_ = Clock::now() + std::chrono::seconds(5);
  return false;
}

std::vector<std::string> Supervisor::cache_listing_args() {
  std::vector<std::string> out;
  if (!options_.secret || options_.device_layers.empty()) return out;
  const std::string dir = socket_path_.substr(0, socket_path_.find_last_of('/'));
  for (size_t i = 0; i < options_.workers.size() && i < forwarders_.size(); ++i) {
    const WorkerLink& w = options_.workers[i];
    if (forwarders_[i]->state() != link::LinkState::up) continue;
    link::HandshakeOptions ho = link::default_handshake_options();
    ho.name = options_.head_name;
    auto r = link::control_request(w.address, *options_.secret, "cache", ho);
    CacheListing listing;
    if (r.is_ok()) {
      for (const auto& e : r->value("entries", nlohmann::json::array())) {
        if (!e.is_array() || e.size() != 2 || !e[0].is_string() || !e[1].is_number_unsigned()) continue;
        if (auto h = parse_hash_name(e[0].get<std::string>())) listing[*h] = e[1].get<uint64_t>();
      }
    } else {
      // An older worker or a passing failure: its weights take ggml's own path, slower but whole.
      log("worker " + w.name + ": no cache listing (" + r.status().message() + "); its weights are hashed on the head");
    }
    if (listing.empty()) continue;
    const std::string path = dir + "/worker-" + std::to_string(i) + ".cache";
    if (Status s = write_cache_listing(path, listing); !s.is_ok()) {
      log(s.message());
      continue;
    }
    log("worker " + w.name + ": " + std::to_string(listing.size()) + " cached weights listed");
    out.push_back("127.0.0.1:" + std::to_string(forwarders_[i]->port()) + "=" + path);
  }
  return out;
}

void Supervisor::spawn_engine() {
  std::vector<std::string> args = {options_.engine_program,
                                   "engine",
                                   "--socket",
                                   socket_path_,
                                   "-m",
                                   options_.model,
                                   "-c",
                                   std::to_string(options_.context),
                                   "--parallel",
                                   std::to_string(options_.parallel),
                                   "--cpu-layers",
                                   std::to_string(options_.cpu_layers)};
  std::string rpc;
  for (auto& f : forwarders_) rpc += (rpc.empty() ? "" : ",") + std::string("127.0.0.1:") + std::to_string(f->port());
  if (!rpc.empty()) args.insert(args.end(), {"--rpc", rpc});
  // Every forwarder reaches a tandem worker whose link protocol matched ours: it takes the
  // engine's input-reuse markers (datapath/input_reuse.h).
  for (auto& f : forwarders_) args.insert(args.end(), {"--tandem-worker", "127.0.0.1:" + std::to_string(f->port())});
  if (!options_.device_layers.empty()) args.insert(args.end(), {"--layer-split", join(options_.device_layers)});
  if (options_.workers_first) args.push_back("--workers-first");
  if (options_.ffn_tensor) args.insert(args.end(), {"--split-mode", "ffn-tensor"});
  if (options_.threads > 0) args.insert(args.end(), {"-t", std::to_string(options_.threads)});
  if (!options_.cuda_graphs) args.push_back("--no-cuda-graphs");
  if (!options_.mmap) args.push_back("--no-mmap");
  args.insert(args.end(), {"--prompt-cache", std::to_string(options_.prompt_cache)});
  if (!options_.prompt_cache_dir.empty()) {
    args.insert(args.end(), {"--prompt-cache-dir", options_.prompt_cache_dir, "--prompt-cache-dir-size",
                             std::to_string(options_.prompt_cache_dir_size)});
  }
  for (const std::string& a : cache_listing_args()) args.insert(args.end(), {"--worker-cache", a});
  if (log::format() == log::Format::json) args.insert(args.end(), {"--log-format", "json"});
  args.insert(args.end(), options_.engine_flags.begin(), options_.engine_flags.end());
  ::unlink(socket_path_.c_str());
  std::vector<char*> argv;  // built before fork: the child of a threaded process must not allocate
  for (auto& a : args) argv.push_back(a.data());
  argv.push_back(nullptr);
  // ggml prints a gdb backtrace on every abort, and an engine whose worker went away aborts: the
  // log would fill with debugger output that says nothing an operator can act on.
  std::vector<std::string> env_text;
  for (char** e = environ; *e != nullptr; ++e) {
    if (std::strncmp(*e, "GGML_NO_BACKTRACE=", 18) != 0) env_text.emplace_back(*e);
  }
  if (!options_.backtraces) env_text.emplace_back("GGML_NO_BACKTRACE=1");
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
  set_state(restarts_ > 0 ? "recovering" : "loading", "engine starting");
}

void Supervisor::connect_engine() {
  auto on_status = [this](const engine::EngineStatus& s) {
    std::lock_guard<std::mutex> lock(mutex_);
    engine_status_ = s;
    if (meter_ && s.state == "loading" && s.load.total_bytes > 0) meter_->update(s.load.bytes, s.load.total_bytes);
    if (meter_ && s.state != "loading") {
      if (s.load.total_bytes > 0) meter_->update(s.load.total_bytes, s.load.total_bytes);
      meter_->finish();
      meter_.reset();
    }
    if (s.state == "failed") last_error_ = "the engine could not load the model: " + s.error;
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
    if (!last_error_.empty() && engine_status_.state == "failed") why += " (" + last_error_ + ")";
    engine_status_ = engine::EngineStatus();  // its slots, queue and tok/s went with it
    engine_status_.state = "stopped";
    last_error_ = why;
    restart_at_ = Clock::now() + backoff_;
    log(why + "; restarting in " + std::to_string(backoff_.count()) + " s");
    backoff_ = std::min(kMaxBackoff, backoff_ * 2);
    ++restarts_;
  }
  set_state("recovering", why);
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
  engine_status_.state = "stopped";
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

void Supervisor::start_canary() {
  auto client = backend_.client();
  Clock::time_point engine;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    engine = engine_started_;
  }
  auto done = std::make_shared<std::promise<std::string>>();
  auto future = done->get_future();
  std::string id;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    id = "canary-" + std::to_string(++canary_seq_);
  }
  const nlohmann::json body = {
      {"model", options_.model_id}, {"prompt", "Hello"}, {"max_tokens", 1}, {"temperature", 0}};
  Status s = client ? client->submit(id, engine::RequestKind::completion, body.dump(),
                                     [done](const engine::EngineEvent& e) {
                                       if (e.type == engine::EngineEvent::Type::done) done->set_value("");
                                       if (e.type == engine::EngineEvent::Type::error)
                                         done->set_value(e.message.empty() ? "error" : e.message);
                                     })
                    : Status::unavailable("the engine is not connected");
  std::string failure;
  if (!s.is_ok()) {
    failure = s.message();
  } else if (future.wait_for(options_.canary_timeout) != std::future_status::ready) {
    failure = "no token within " + std::to_string(options_.canary_timeout.count()) + " s";
    client->cancel(id);
  } else {
    failure = future.get();
  }
  client.reset();
  bool stale;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    stale = engine != engine_started_;  // the engine was replaced meanwhile: this result is not its
    if (!stale && failure.empty()) {
      engine_verified_ = true;
      backoff_ = std::chrono::seconds(1);
      last_error_.clear();
    } else if (!stale) {
      last_error_ = "canary generation failed: " + failure;
      // No token at all within the deadline: the engine (or a link under it) hangs; restart it.
      if (failure.rfind("no token within", 0) == 0) kill_requested_ = true;
    }
  }
  if (!stale) {
    if (failure.empty())
      set_state("ready", "a one-token generation went through the whole split");
    else
      set_state("degraded", "canary generation failed: " + failure);
  }
  std::lock_guard<std::mutex> lock(mutex_);
  canary_running_ = false;
}

void Supervisor::set_state(const std::string& state, const std::string& why) {
  std::lock_guard<std::mutex> lock(mutex_);
  if (state_ == state) return;
  state_ = state;
  if (options_.log) options_.log("state " + state + ": " + why);
}

std::string Supervisor::state() {
  std::lock_guard<std::mutex> lock(mutex_);
  if (engine_status_.state == "loading" && engine_connected_) {
    return "loading " + std::to_string(static_cast<int>(engine_status_.load.fraction * 100)) + "%";
  }
  return state_;
}

HealthReport Supervisor::health() {
  HealthReport h;
  nlohmann::json nodes = nlohmann::json::array();
  std::vector<prometheus::Sample> link_bytes, node_up, cache_bytes;
  engine::PromptCacheStats cache;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    if (engine_pid_ > 0) cache = engine_status_.prompt_cache;
  }
  nlohmann::json cache_nodes = nlohmann::json::object(), disk_nodes = nlohmann::json::object();
  // One node's bytes of both tiers, in /health and as samples.
  const auto held_on = [&](const std::string& node, uint64_t memory, uint64_t disk) {
    cache_nodes[node] = memory;
    disk_nodes[node] = disk;
    const std::string label = "node=\"" + prometheus::label(node) + "\",tier=";
    cache_bytes.push_back({label + "\"memory\"", static_cast<double>(memory)});
    cache_bytes.push_back({label + "\"disk\"", static_cast<double>(disk)});
  };
  held_on(options_.head_name, cache.bytes, cache.disk_bytes);
  const auto find = [](const std::map<std::string, uint64_t>& m, const std::string& k) {
    const auto it = m.find(k);
    return it != m.end() ? it->second : uint64_t{0};
  };
  for (size_t i = 0; i < forwarders_.size(); ++i) {
    const link::ForwarderStats st = forwarders_[i]->stats();
    const std::string& name = options_.workers[i].name;
    // The engine names a worker by the forwarder's loopback port it reaches the worker through.
    const std::string endpoint = "127.0.0.1:" + std::to_string(forwarders_[i]->port());
    const uint64_t cached = find(cache.per_worker, endpoint), spilled = find(cache.per_worker_disk, endpoint);
    nodes.push_back({{"name", name},
                     {"address", options_.workers[i].address.to_string()},
                     {"state", link::link_state_name(st.state)},
                     {"bytes_to_worker", st.bytes_to_worker},
                     {"bytes_from_worker", st.bytes_from_worker},
                     {"prompt_cache_bytes", cached},
                     {"prompt_cache_disk_bytes", spilled},
                     {"last_error", st.last_error}});
    held_on(name, cached, spilled);
    const std::string worker = "worker=\"" + prometheus::label(name) + "\"";
    link_bytes.push_back({worker + ",direction=\"to_worker\"", static_cast<double>(st.bytes_to_worker)});
    link_bytes.push_back({worker + ",direction=\"from_worker\"", static_cast<double>(st.bytes_from_worker)});
    node_up.push_back({"node=\"" + prometheus::label(name) + "\"", st.state == link::LinkState::up ? 1.0 : 0.0});
  }
  std::lock_guard<std::mutex> lock(mutex_);
  for (auto& n : nodes) {
    const auto it = refused_.find(n.value("name", ""));
    if (it == refused_.end()) continue;
    n["state"] = "refused";
    n["last_error"] = it->second;
  }
  h.state = state_;
  if (engine_connected_ && engine_status_.state == "loading") h.state = restarts_ > 0 ? "recovering" : "loading";
  h.accepting = state_ == "ready";
  h.retry_after_s = state_ == "degraded" ? 10 : 5;
  const engine::LoadProgress& l = engine_status_.load;
  nlohmann::json load = {
      {"fraction", l.fraction}, {"bytes", l.bytes}, {"total_bytes", l.total_bytes}, {"rate", l.rate}};
  if (l.rate > 0 && l.total_bytes >= l.bytes) load["eta_s"] = static_cast<double>(l.total_bytes - l.bytes) / l.rate;
  h.detail = {{"model", options_.model_id},
              {"engine",
               {{"state", engine_pid_ > 0 ? engine_status_.state : std::string("stopped")},
                {"pid", engine_pid_},
                {"restarts", restarts_},
                {"slots_busy", engine_status_.slots_busy},
                {"slots_total", engine_status_.slots_total},
                {"waiting", engine_status_.waiting},
                {"tokens_per_s", engine_status_.tokens_per_s}}},
              {"prompt_cache",
               {{"max_bytes_per_node", cache.max_bytes},
                {"bytes", cache_nodes},
                {"max_disk_bytes_per_node", cache.max_disk_bytes},
                {"disk_bytes", disk_nodes},
                {"spills", cache.spills},
                {"entries", cache.entries},
                {"hits", cache.hits},
                {"misses", cache.misses},
                {"evictions", cache.evictions},
                {"restored_tokens", cache.restored_tokens},
                {"failed_restores", cache.failed_restores},
                {"saves", cache.saves},
                {"saved_bytes", cache.saved_bytes},
                {"saved_worker_bytes", cache.saved_worker_bytes}}},
              {"load", load},
              {"nodes", nodes},
              {"last_error", last_error_}};
  const bool running = engine_pid_ > 0;
  h.extra_metrics =
      prometheus::family("tandem_link_bytes_total", "counter", "RPC bytes through each worker's link, by direction.",
                         link_bytes) +
      prometheus::family("tandem_node_up", "gauge", "1 while the worker's heartbeat answers.", node_up) +
      prometheus::family("tandem_engine_restarts_total", "counter", "Engine restarts since the gateway started.",
                         {{"", static_cast<double>(restarts_)}}) +
      prometheus::family("tandem_slots_busy", "gauge", "Engine slots generating now.",
                         {{"", running ? static_cast<double>(engine_status_.slots_busy) : 0.0}}) +
      prometheus::family("tandem_slots_capacity", "gauge", "Engine slots (parallel sequences) of the running engine.",
                         {{"", running ? static_cast<double>(engine_status_.slots_total) : 0.0}}) +
      prometheus::family("tandem_queue_depth", "gauge", "Requests the engine holds waiting for a free slot.",
                         {{"", running ? static_cast<double>(engine_status_.waiting) : 0.0}}) +
      prometheus::family("tandem_engine_tokens_per_second", "gauge",
                         "Tokens generated per second over the last few seconds.",
                         {{"", running ? engine_status_.tokens_per_s : 0.0}}) +
      prometheus_prompt_cache(cache, cache_bytes);
  return h;
}

}  // namespace tandem::gateway
