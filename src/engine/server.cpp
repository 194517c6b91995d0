#include "engine/server.h"

#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <deque>
#include <memory>
#include <mutex>
#include <set>
#include <thread>

#include "common/log.h"
#include "common/units.h"
#include "datapath/head_session.h"
#include "engine/unix_socket.h"
#include "engine/worker_shares.h"
#include "plan/ffn_split.h"
#include "plan/model_info.h"

namespace tandem::engine {
namespace {

using Clock = std::chrono::steady_clock;

// One client connection: a reader thread (requests) and a writer thread (events). Events are
// queued, so the decode thread never waits for a slow client.
class Connection {
 public:
  Connection(int fd, int number) : fd_(fd), number_(number) {}
  ~Connection() { ::close(fd_); }

  int fd() const { return fd_; }
  // The scheduler id of client id `id`: connections may reuse each other's ids.
  std::string scoped(const std::string& id) const { return std::to_string(number_) + "/" + id; }

  void send(const EngineEvent& e) {
    std::lock_guard<std::mutex> lock(mutex_);
    if (closed_) return;
    outbox_.push_back(encode_event(e) + "\n");
    cv_.notify_one();
  }
  void close_outbox() {
    std::lock_guard<std::mutex> lock(mutex_);
    closed_ = true;
    cv_.notify_one();
  }
  // Sends queued events until the outbox is closed and drained, or the peer is gone.
  void write_loop() {
    for (;;) {
      std::string out;
      {
        std::unique_lock<std::mutex> lock(mutex_);
        cv_.wait(lock, [&] { return closed_ || !outbox_.empty(); });
        if (outbox_.empty()) return;
        while (!outbox_.empty()) out += outbox_.front(), outbox_.pop_front();
      }
      if (!write_all(fd_, out)) return;
    }
  }
  bool add_active(const std::string& id) {
    std::lock_guard<std::mutex> lock(mutex_);
    return active_.insert(id).second;
  }
  void remove_active(const std::string& id) {
    std::lock_guard<std::mutex> lock(mutex_);
    active_.erase(id);
  }
  std::set<std::string> take_active() {
    std::lock_guard<std::mutex> lock(mutex_);
    return std::move(active_);
  }

  std::thread reader, writer;
  std::atomic<bool> reader_done{false};

 private:
  const int fd_;
  const int number_;
  std::mutex mutex_;
  std::condition_variable cv_;
  std::deque<std::string> outbox_;  // guarded by mutex_
  std::set<std::string> active_;    // guarded by mutex_: client ids not yet ended
  bool closed_ = false;             // guarded by mutex_
};

std::string describe_placement(const EngineConfig& c, uint64_t weight_bytes) {
  const Placement& p = c.load.placement;
  std::string s = "loading " + c.load.model + " (" + format_bytes(weight_bytes) + " of weights) with " +
                  std::to_string(p.cpu_layers) + " layers on the CPU";
  if (p.use_local_gpus) s += ", the rest on the local GPUs";
  for (const auto& r : p.rpc_servers) s += ", RPC server " + r;
  if (!p.device_layers.empty()) {
    s += ", layer split";
    for (int n : p.device_layers) s += " " + std::to_string(n);
  }
  return s;
}

class Server {
 public:
  Server(const EngineConfig& config, int listen_fd) : config_(config), listen_fd_(listen_fd) {}
  ~Server() { ::close(listen_fd_); }

  void run(const std::atomic<bool>& stop);

 private:
  void load();
  bool on_progress(float fraction);
  void set_failed(const std::string& why);
  EngineEvent status_event();
  void broadcast(const EngineEvent& e);
  void accept_one();
  void reap();
  void read_loop(const std::shared_ptr<Connection>& conn);
  void handle(const std::shared_ptr<Connection>& conn, const std::string& line);
  void submit(const std::shared_ptr<Connection>& conn, const EngineRequest& r);
  void answer(const std::shared_ptr<Connection>& conn, const EngineRequest& r);
  Scheduler* scheduler();

  const EngineConfig config_;
  const int listen_fd_;
  std::atomic<bool> stopping_{false};
  std::thread loader_;
  int next_connection_ = 0;  // accept thread only

  std::mutex mutex_;
  EngineStatus load_status_;             // guarded by mutex_
  Clock::time_point load_start_;         // guarded by mutex_
  double last_broadcast_fraction_ = -1;  // guarded by mutex_
  ModelPtr model_;                       // written once by the loader, before scheduler_
  // Written by the loader; they outlive scheduler_.
  std::unique_ptr<datapath::HeadSession> datapath_;
  std::unique_ptr<WorkerShares> worker_shares_;  // the prompt cache's parts on the tandem workers
  std::unique_ptr<Scheduler> scheduler_;         // guarded by mutex_; set once, reset only after the readers are joined
  std::vector<std::shared_ptr<Connection>> connections_;  // guarded by mutex_
};

void Server::run(const std::atomic<bool>& stop) {
  loader_ = std::thread([this] { load(); });
  while (!stop) {
    pollfd p{listen_fd_, POLLIN, 0};
    if (::poll(&p, 1, 200) == 1) accept_one();
    reap();
  }
  stopping_ = true;
  loader_.join();
  std::vector<std::shared_ptr<Connection>> conns;
  std::unique_ptr<Scheduler> scheduler;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    conns.swap(connections_);
    scheduler = std::move(scheduler_);
  }
  // Readers first (they may still use the scheduler), then the scheduler, whose destructor ends
  // running requests with `unavailable`, then the writers once those events are out.
  for (auto& c : conns) {
    ::shutdown(c->fd(), SHUT_RD);
    c->reader.join();
  }
  scheduler.reset();
  for (auto& c : conns) {
    c->close_outbox();
    c->writer.join();
  }
}

void Server::load() {
  auto info = plan::read_model_info(config_.load.model);
  {
    std::lock_guard<std::mutex> lock(mutex_);
    load_status_.state = EngineState::loading;
    load_status_.load.total_bytes = info.is_ok() ? info->tensor_bytes : 0;
    load_start_ = Clock::now();
  }
  if (info.is_ok() && config_.load.placement.tensor_parallel()) {
    const std::string refusal =
        plan::tensor_split_parallel_refusal(info.value(), static_cast<uint32_t>(config_.scheduler.parallel));
    if (!refusal.empty()) return set_failed(refusal);
  }
  LoadOptions lo = config_.load;
  lo.progress = [this](float f) { return on_progress(f); };
  auto model = load_model(lo);
  if (!model.is_ok()) {
    return set_failed(describe_placement(config_, info.is_ok() ? info->tensor_bytes : 0) +
                      " failed: " + model.status().message());
  }
  model_ = std::move(model.value());
  const Placement& p = config_.load.placement;
  const SchedulerOptions& so = config_.scheduler;
  auto session = open_head_session(p, model_.get(), static_cast<uint32_t>(so.context * so.parallel),
                                   static_cast<uint32_t>(so.parallel), static_cast<uint32_t>(so.batch));
  if (!session.is_ok()) return set_failed(session.status().message());
  datapath_ = std::move(session.value());
  // Under a tensor split every device holds the whole KV cache, and a state restored through the
  // meta device gave other tokens than its fresh prefill: no prompt cache there until it does.
  SchedulerOptions scheduler_options = config_.scheduler;
  if (p.tensor_parallel() && scheduler_options.prompt_cache_bytes > 0) {
    scheduler_options.prompt_cache_bytes = 0;
    log::info("engine", "prompt cache off: a tensor split's restored states are not yet exact");
  }
  if (!p.tandem_workers.empty() && scheduler_options.prompt_cache_bytes > 0)
    worker_shares_ = std::make_unique<WorkerShares>(p.tandem_workers);
  auto scheduler = Scheduler::create(model_.get(), scheduler_options, worker_shares_.get());
  if (!scheduler.is_ok()) return set_failed(scheduler.status().message());
  {
    std::lock_guard<std::mutex> lock(mutex_);
    scheduler_ = std::move(scheduler.value());
    load_status_.state = EngineState::ready;
    load_status_.load.fraction = 1;
    load_status_.load.bytes = load_status_.load.total_bytes;
  }
  log::info("engine", "ready on " + config_.socket_path + ": " + std::to_string(config_.scheduler.parallel) +
                          " slots of " + std::to_string(scheduler_->context_per_request()) + " tokens");
  broadcast(status_event());
}

bool Server::on_progress(float fraction) {
  bool push = false;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    LoadProgress& p = load_status_.load;
    p.fraction = fraction;
    p.bytes = static_cast<uint64_t>(fraction * static_cast<double>(p.total_bytes));
    const double elapsed = std::chrono::duration<double>(Clock::now() - load_start_).count();
    p.rate = elapsed > 0 ? p.bytes / elapsed : 0;
    // Pushed at each percent: often enough for a progress bar, rare enough to cost nothing.
    if (fraction - last_broadcast_fraction_ >= 0.01 || fraction >= 1) {
      last_broadcast_fraction_ = fraction;
      push = true;
    }
  }
  if (push) broadcast(status_event());
  return !stopping_;  // false aborts the load
}

void Server::set_failed(const std::string& why) {
  log::error("engine", why);
  {
    std::lock_guard<std::mutex> lock(mutex_);
    load_status_.state = EngineState::failed;
    load_status_.error = why;
  }
  broadcast(status_event());
}

EngineEvent Server::status_event() {
  EngineEvent e;
  e.type = EngineEvent::Type::status;
  Scheduler* s = nullptr;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    e.status = load_status_;
    s = scheduler_.get();
  }
  if (s != nullptr) {
    const SchedulerStats st = s->stats();
    e.status.slots_busy = st.busy;
    e.status.slots_total = st.total;
    e.status.waiting = st.waiting;
    e.status.tokens_per_s = st.tokens_per_s;
    e.status.prompt_cache = st.prompt_cache;
    e.status.speculative = st.speculative;
    e.status.speculation = st.speculation;
  } else {
    e.status.slots_total = config_.scheduler.parallel;
  }
  return e;
}

void Server::broadcast(const EngineEvent& e) {
  std::vector<std::shared_ptr<Connection>> conns;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    conns = connections_;
  }
  for (auto& c : conns) c->send(e);
}

Scheduler* Server::scheduler() {
  std::lock_guard<std::mutex> lock(mutex_);
  return scheduler_.get();
}

void Server::accept_one() {
  const int fd = ::accept4(listen_fd_, nullptr, nullptr, SOCK_CLOEXEC);
  if (fd < 0) return;
  auto conn = std::make_shared<Connection>(fd, next_connection_++);
  conn->writer = std::thread([conn] { conn->write_loop(); });
  conn->reader = std::thread([this, conn] { read_loop(conn); });
  std::lock_guard<std::mutex> lock(mutex_);
  connections_.push_back(conn);
}

// Joins the connections whose client left.
void Server::reap() {
  std::vector<std::shared_ptr<Connection>> gone;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    for (auto it = connections_.begin(); it != connections_.end();) {
      if ((*it)->reader_done) {
        gone.push_back(*it);
        it = connections_.erase(it);
      } else {
        ++it;
      }
    }
  }
  for (auto& c : gone) {
    c->close_outbox();
    c->writer.join();
    ::shutdown(c->fd(), SHUT_RDWR);
    c->reader.join();
  }
}

void Server::read_loop(const std::shared_ptr<Connection>& conn) {
  LineReader reader(conn->fd());
  std::string line;
  while (!stopping_ && reader.next(&line)) {
    if (!line.empty()) handle(conn, line);
  }
  // A client that leaves cancels what it started.
  if (Scheduler* s = scheduler()) {
    for (const auto& id : conn->take_active()) s->cancel(conn->scoped(id));
  }
  conn->reader_done = true;
}

void Server::handle(const std::shared_ptr<Connection>& conn, const std::string& line) {
  auto request = decode_request(line);
  if (!request.is_ok()) {
    EngineEvent e;
    e.type = EngineEvent::Type::error;
    e.code = StatusCode::invalid_argument;
    e.message = "malformed request line: " + request.status().message();
    return conn->send(e);
  }
  const EngineRequest& r = request.value();
  switch (r.op) {
    case EngineRequest::Op::status:
      return conn->send(status_event());
    case EngineRequest::Op::cancel:
      if (Scheduler* s = scheduler()) s->cancel(conn->scoped(r.id));
      return;
    case EngineRequest::Op::submit:
      return submit(conn, r);
    case EngineRequest::Op::tokenize:
    case EngineRequest::Op::detokenize:
    case EngineRequest::Op::count:
      return answer(conn, r);
  }
}

// The ops the tokenizer answers at once, on the connection's reader thread: they need no slot.
void Server::answer(const std::shared_ptr<Connection>& conn, const EngineRequest& r) {
  EngineEvent e;
  e.id = r.id;
  Scheduler* s = scheduler();
  Status error;
  if (s == nullptr) {
    error = Status::unavailable("the model is not loaded (" +
                                std::string(engine_state_name(status_event().status.state)) + ")");
  } else if (r.op == EngineRequest::Op::tokenize) {
    e.tokens = s->tokenize(r.content, r.add_special, r.parse_special);
    for (int32_t t : e.tokens) e.pieces.push_back(s->token_piece(t));
  } else if (r.op == EngineRequest::Op::detokenize) {
    auto text = s->detokenize(r.tokens);
    if (text.is_ok())
      e.content = text.value();
    else
      error = text.status();
  } else {
    auto rendered = s->render_prompt(r.kind, r.body);
    if (rendered.is_ok()) {
      e.count = rendered->tokens;
      e.content = std::move(rendered->text);
    } else {
      error = rendered.status();
    }
  }
  if (!error.is_ok()) {
    e.type = EngineEvent::Type::error;
    e.code = error.code();
    e.message = error.message();
  } else {
    e.type = EngineEvent::Type::result;
  }
  conn->send(e);
}

void Server::submit(const std::shared_ptr<Connection>& conn, const EngineRequest& r) {
  EngineEvent error;
  error.type = EngineEvent::Type::error;
  error.id = r.id;
  Scheduler* s = scheduler();
  if (s == nullptr) {
    const EngineStatus st = status_event().status;
    error.code = StatusCode::unavailable;
    error.message = st.state == EngineState::failed
                        ? "the model failed to load: " + st.error
                        : "the model is loading (" + std::to_string(static_cast<int>(st.load.fraction * 100)) + "%)";
    return conn->send(error);
  }
  if (!conn->add_active(r.id)) {
    error.code = StatusCode::invalid_argument;
    error.message = "request id '" + r.id + "' is already in use on this connection";
    return conn->send(error);
  }
  std::weak_ptr<Connection> weak = conn;
  const std::string id = r.id;
  Status st = s->submit(conn->scoped(r.id), r.kind, r.body, [weak, id](const EngineEvent& e) {
    auto c = weak.lock();
    if (!c) return;
    EngineEvent out = e;
    out.id = id;
    if (e.type != EngineEvent::Type::delta && e.type != EngineEvent::Type::started) c->remove_active(id);
    c->send(out);
  });
  if (!st.is_ok()) {
    conn->remove_active(r.id);
    error.code = st.code();
    error.message = st.message();
    conn->send(error);
  }
}

}  // namespace

Status serve_engine(const EngineConfig& config, const std::atomic<bool>& stop) {
  // Before any backend exists: ggml's CUDA backend reads this when it creates its contexts.
  if (!config.cuda_graphs) ::setenv("GGML_CUDA_DISABLE_GRAPHS", "1", 1);
  auto fd = listen_unix(config.socket_path);
  if (!fd.is_ok()) return fd.status();
  {
    Server server(config, fd.value());
    server.run(stop);
  }
  ::unlink(config.socket_path.c_str());
  return Status::ok();
}

}  // namespace tandem::engine
