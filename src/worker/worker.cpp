#include "worker/worker.h"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <ctime>

#include "cluster/devices.h"
#include "common/build_info.h"
#include "common/log.h"
#include "common/systemd_notify.h"
#include "common/units.h"
#include "link/control.h"
#include "link/probe.h"
#include "link/worker_status.h"
#include "worker/cache.h"
#include "worker/rpc_splice.h"

namespace tandem::worker {
namespace {

constexpr int kMaxHandshakes = 64;

std::string utc_now() {
  const std::time_t t = std::time(nullptr);
  tm tm{};
  ::gmtime_r(&t, &tm);
  char buf[32];
  std::strftime(buf, sizeof buf, "%Y-%m-%dT%H:%M:%SZ", &tm);
  return buf;
}

// "10.0.0.1:7070" -> "10.0.0.1" (IPv6 "[::1]:7070" -> "[::1]").
std::string host_of(const std::string& address) { return address.substr(0, address.rfind(':')); }

}  // namespace

Worker::Worker(WorkerOptions options, link::Secret secret)
    : options_(std::move(options)),
      secret_(std::move(secret)),
      started_(std::chrono::steady_clock::now()),
      child_(options_.rpc) {}

Worker::~Worker() { stop(); }

Status Worker::start() {
  child_.on_event([this](const std::string& event, const std::string& detail) {
    log::info("worker", detail);
    {
      std::lock_guard<std::mutex> lock(mutex_);
      last_event_ = detail;
    }
    broadcast({{"event", event}, {"detail", detail}});
  });
  TANDEM_RETURN_IF_ERROR(child_.start());
  const RpcChildInfo info = child_.info();
  log::info("worker", "RPC server started (pid " + std::to_string(info.pid) + "); " + info.isolation);
  enforce_cache_limit_now();
  auto l = link::listen_tcp(options_.listen);
  if (!l.is_ok()) {
    child_.stop();
    return l.status();
  }
  listener_ = std::move(l.value());
  port_ = link::local_port(listener_.get());
  if (::pipe2(wake_, O_CLOEXEC) != 0) return Status::internal("pipe failed");
  accepting_ = true;
  accept_thread_ = std::thread(&Worker::accept_loop, this);
  log::info("worker", "'" + options_.handshake.name + "': listening on " +
                          link::Endpoint{options_.listen.host, port_}.to_string());
  return Status::ok();
}

void Worker::stop() {
  if (stopping_.exchange(true)) return;
  if (wake_[1] >= 0) {
    const char c = 1;
    (void)!::write(wake_[1], &c, 1);
  }
  if (accept_thread_.joinable()) accept_thread_.join();
  {
    std::lock_guard<std::mutex> lock(mutex_);
    for (int fd : live_fds_) ::shutdown(fd, SHUT_RDWR);
    rpc_free_.notify_all();
  }
  connections_.join_all();
  child_.stop();
  listener_.reset();
  for (int& fd : wake_) {
    if (fd >= 0) ::close(fd);
    fd = -1;
  }
}

bool Worker::healthy() const { return accepting_ && !stopping_; }

void Worker::accept_loop() {
  struct Done {
    std::atomic<bool>& flag;
    ~Done() { flag = false; }
  } done{accepting_};
  while (!stopping_) {
    pollfd p[2] = {{listener_.get(), POLLIN, 0}, {wake_[0], POLLIN, 0}};
    if (::poll(p, 2, -1) < 0 && errno != EINTR) break;
    if (stopping_ || (p[1].revents & POLLIN)) break;
    if (!(p[0].revents & POLLIN)) continue;
    const int fd = ::accept4(listener_.get(), nullptr, nullptr, SOCK_CLOEXEC);
    if (fd < 0) continue;
    // Unauthenticated peers cost a thread each for up to three handshake deadlines: bound them.
    if (handshaking_.load() >= kMaxHandshakes) {
      ++refused_;
      log::info("worker", "connection from " + link::peer_address(fd) + ": role ?: refused: " +
                              std::to_string(kMaxHandshakes) + " handshakes already in progress");
      ::close(fd);
      continue;
    }
    ++handshaking_;
    link::tune_socket(fd);
    {
      std::lock_guard<std::mutex> lock(mutex_);
      live_fds_.insert(fd);
    }
    connections_.spawn([this, fd] { serve(fd); });
  }
}

void Worker::serve(int raw_fd) {
  link::Fd fd(raw_fd);
  link::PeerInfo seen;
  auto peer = link::server_handshake(
      fd.get(), secret_, options_.handshake, [&](const link::PeerInfo& p) { return admit(p, fd.get()); }, &seen);
  --handshaking_;
  const std::string who = "connection from " + seen.address + ": role " +
                          (seen.role_known ? link::role_name(seen.role) : "?") +
                          (seen.name.empty() ? "" : ", peer '" + seen.name + "'");
  if (!peer.is_ok()) {
    ++refused_;
    log::info("worker", who + ": refused: " + peer.status().message());
  } else {
    ++accepted_;
    std::string outcome;
    if (peer->role == link::Role::rpc) {
      outcome = serve_rpc(fd.get(), peer.value());
      release_rpc();
    } else if (peer->role == link::Role::probe) {
      outcome = link::serve_probe(fd.get(), options_.control_idle);
    } else {
      outcome = serve_control(fd.get());
    }
    log::info("worker", who + ": accepted; " + outcome);
  }
  std::lock_guard<std::mutex> lock(mutex_);
  live_fds_.erase(fd.get());
}

bool Worker::head_hung_up() const {
  if (head_fd_ < 0) return false;
  pollfd p{head_fd_, POLLRDHUP, 0};
  return ::poll(&p, 1, 0) == 1 && (p.revents & (POLLRDHUP | POLLHUP | POLLERR)) != 0;
}

link::Verdict Worker::admit(const link::PeerInfo& peer, int peer_fd) {
  if (peer.role != link::Role::rpc) return {};
  if (child_.info().state != ChildState::running) {
    return {link::VerdictCode::unavailable, "worker '" + options_.handshake.name + "': its RPC server is " +
                                                child_state_name(child_.info().state) + "; try again shortly"};
  }
  std::unique_lock<std::mutex> lock(mutex_);
  // The same head (name and host) dialling again means that it has given up its old session:
  // its forwarder runs one rpc session at a time. After a pulled cable that session can look
  // alive here for half a minute (nothing tells us the head closed it), and refusing the head as
  // busy meanwhile kept the cluster down long after the cable was back: replace it.
  const bool same_head = rpc_busy_ && peer.name == head_name_ && host_of(peer.address) == host_of(head_address_);
  if (same_head && !head_hung_up()) {
    log::info("worker",
              "head '" + peer.name + "' reconnected; ending its previous rpc session (" + head_address_ + ")");
    ::shutdown(head_fd_, SHUT_RDWR);
  }
  // A head that just closed its session may reconnect before our splice has noticed; wait for
  // that slot briefly, never for another head's live one.
  if (rpc_busy_ && (same_head || head_hung_up())) {
    rpc_free_.wait_for(lock, std::chrono::seconds(2), [&] { return !rpc_busy_ || stopping_; });
  }
  if (rpc_busy_) {
    return {link::VerdictCode::busy, "worker '" + options_.handshake.name + "' already serves head '" + head_name_ +
                                         "' (" + head_address_ + ") since " + head_since_ + "; one head at a time"};
  }
  rpc_busy_ = true;
  head_fd_ = peer_fd;
  head_name_ = peer.name;
  head_address_ = peer.address;
  head_since_ = utc_now();
  return {};
}

void Worker::release_rpc() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    rpc_busy_ = false;
    head_fd_ = -1;
    head_name_.clear();
    head_address_.clear();
    rpc_free_.notify_all();
  }
  enforce_cache_limit_now();
}

std::string Worker::serve_rpc(int fd, const link::PeerInfo& peer) {
  auto child = child_.connect(link::Millis(5000));
  if (!child.is_ok()) return "closed: cannot reach the RPC server: " + child.status().message();
  {
    std::lock_guard<std::mutex> lock(mutex_);
    live_fds_.insert(child->get());
    if (stopping_) ::shutdown(child->get(), SHUT_RDWR);  // stop() swept live_fds_ before we got here
  }
  const uint64_t in0 = bytes_from_head_, out0 = bytes_to_head_;
  const auto t0 = std::chrono::steady_clock::now();
  RpcSpliceOptions so;
  so.cache_dir = options_.rpc.cache_dir;
  so.from_head = &bytes_from_head_;
  so.to_head = &bytes_to_head_;
  const RpcSpliceResult spliced = rpc_splice(fd, child->get(), so);
  child_.release_memory();
  if (!spliced.error.empty()) log::warn("worker", "rpc session from " + peer.name + " cut: " + spliced.error);
  {
    std::lock_guard<std::mutex> lock(mutex_);
    live_fds_.erase(child->get());
  }
  const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  char buf[200];
  std::snprintf(buf, sizeof buf, "session ended after %.1f s, %s from the head, %s to it", secs,
                format_bytes(bytes_from_head_ - in0).c_str(), format_bytes(bytes_to_head_ - out0).c_str());
  std::string out = buf;
  if (spliced.cached_loads > 0) {
    out += ", " + std::to_string(spliced.cached_loads) + " weights (" + format_bytes(spliced.cached_bytes) +
           ") loaded from the cache";
  }
  if (spliced.graph_computes + spliced.graph_recomputes > 0) {
    out += ", " + std::to_string(spliced.graph_computes) + " graphs sent whole and " +
           std::to_string(spliced.graph_recomputes) + " re-run";
  }
  if (spliced.input_copies > 0) {
    out += ", " + std::to_string(spliced.input_copies) + " repeated inputs copied here (" +
           format_bytes(spliced.input_bytes_not_sent) + " not sent)";
  }
  return out;
}

std::string Worker::serve_control(int fd) {
  auto control = std::make_shared<Control>();
  control->fd = fd;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    controls_.push_back(control);
  }
  link::LineReader reader(fd);
  uint64_t requests = 0;
  std::string end;
  while (!stopping_) {
    auto req = reader.read_json(link::deadline_in(options_.control_idle));
    if (!req.is_ok()) {
      end = req.status().message();
      break;
    }
    ++requests;
    const nlohmann::json& j = req.value();
    nlohmann::json rsp = {{"id", j.contains("id") ? j["id"] : nlohmann::json()}};
    const std::string op = j.contains("op") && j["op"].is_string() ? j["op"].get<std::string>() : "";
    if (op == "ping") {
      rsp["ok"] = true;
      rsp["result"] = {
          {"uptime_s", std::chrono::duration<double>(std::chrono::steady_clock::now() - started_).count()}};
    } else if (op == "status") {
      rsp["ok"] = true;
      rsp["result"] = status();
    } else if (op == "cache") {
      rsp["ok"] = true;
      rsp["result"] = cache_listing();
    } else {
      rsp["ok"] = false;
      rsp["error"] = "unknown op '" + op + "' (known: status, ping, cache)";
    }
    std::lock_guard<std::mutex> lock(control->write_mutex);
    if (Status s = link::write_json(fd, rsp, link::deadline_in(link::Millis(5000))); !s.is_ok()) {
      end = s.message();
      break;
    }
  }
  {
    std::lock_guard<std::mutex> lock(mutex_);
    std::erase(controls_, control);
  }
  return "control session ended after " + std::to_string(requests) + " requests (" + end + ")";
}

void Worker::broadcast(const nlohmann::json& event) {
  std::vector<std::shared_ptr<Control>> targets;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    targets = controls_;
  }
  for (const auto& c : targets) {
    std::lock_guard<std::mutex> lock(c->write_mutex);
    (void)link::write_json(c->fd, event, link::deadline_in(link::Millis(1000)));  // a stuck reader loses the event
  }
}

void Worker::enforce_cache_limit_now() {
  const std::string& dir = options_.rpc.cache_dir;
  if (dir.empty() || options_.cache_max_bytes == 0) return;
  auto removed = enforce_cache_limit(dir, options_.cache_max_bytes);
  if (removed.is_ok() && removed.value() > 0) {
    log::info("worker", "weight cache over " + format_bytes(options_.cache_max_bytes) + ": evicted " +
                            format_bytes(removed.value()) + " of least recently used entries");
  }
}

nlohmann::json Worker::cache_listing() const {
  nlohmann::json entries = nlohmann::json::array();
  const std::string& dir = options_.rpc.cache_dir;
  if (!dir.empty()) {
    auto list = list_cache(dir);
    if (list.is_ok()) {
      for (const auto& e : list.value()) entries.push_back({e.name, e.bytes});
    }
  }
  return {{"dir", dir}, {"entries", entries}};
}

nlohmann::json Worker::status() const {
  link::WorkerStatus s;
  const RpcChildInfo child = child_.info();
  for (const auto& d : cluster::local_devices()) {
    const auto& chosen = options_.rpc.devices;
    if (!chosen.empty() && std::find(chosen.begin(), chosen.end(), d.name) == chosen.end()) continue;
    s.devices.push_back({d.name, d.description, d.type, d.free_bytes, d.total_bytes, d.shares_host_memory});
  }
  s.name = options_.handshake.name;
  s.version = TANDEM_VERSION;
  s.llama_tag = TANDEM_LLAMA_TAG;
  s.llama_commit = TANDEM_LLAMA_COMMIT;
  s.protocol = link::kProtocolVersion;
  s.uptime_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - started_).count();
  // What holds this box's memory: a head about to restart its engine says so when it is short.
  for (const auto& h : cluster::memory_holders(3)) s.memory_holders.push_back({h.pid, h.name, h.bytes});
  s.rpc_server = {child_state_name(child.state),
                  child.pid,
                  child.starts > 0 ? child.starts - 1 : 0,
                  child.last_exit,
                  child.isolated,
                  child.isolation,
                  child.port,
                  options_.rpc.cuda_graphs,
                  options_.rpc.async_input_writes};
  s.bytes_from_head = bytes_from_head_.load();
  s.bytes_to_head = bytes_to_head_.load();
  s.connections_accepted = accepted_.load();
  s.connections_refused = refused_.load();
  const CacheStats cs = options_.rpc.cache_dir.empty() ? CacheStats{} : cache_stats(options_.rpc.cache_dir);
  s.cache_dir = options_.rpc.cache_dir;
  s.cache_entries = cs.entries;
  s.cache_bytes = cs.bytes;
  s.cache_max_bytes = options_.cache_max_bytes;
  std::lock_guard<std::mutex> lock(mutex_);
  if (rpc_busy_) s.head = link::WorkerHead{head_name_, head_address_, head_since_};
  s.last_event = last_event_;
  return link::worker_status_json(s);
}

Status run_worker(const WorkerOptions& options, link::Secret secret) {
  // SIGTERM/SIGINT are taken by sigwait below; blocked before any thread starts so that no
  // thread is killed by them (the RPC child unblocks them again).
  sigset_t set;
  sigemptyset(&set);
  sigaddset(&set, SIGTERM);
  sigaddset(&set, SIGINT);
  ::pthread_sigmask(SIG_BLOCK, &set, nullptr);
  ::signal(SIGPIPE, SIG_IGN);
  Worker worker(options, std::move(secret));
  TANDEM_RETURN_IF_ERROR(worker.start());
  systemd::notify_ready("listening on port " + std::to_string(worker.port()));
  systemd::WatchdogPinger watchdog;
  watchdog.start([&worker] { return worker.healthy(); });
  int sig = 0;
  ::sigwait(&set, &sig);
  log::info("worker", std::string(strsignal(sig)) + ": stopping");
  systemd::notify_stopping();
  watchdog.stop();
  worker.stop();
  log::info("worker", "stopped");
  return Status::ok();
}

}  // namespace tandem::worker
