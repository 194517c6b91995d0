#include "link/forwarder.h"

#include <fcntl.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <map>

#include "link/control.h"
#include "link/splice.h"

namespace tandem::link {

namespace {

// Records the round trip of a heartbeat answer; false for any other line (an event).
bool record_pong(const nlohmann::json& j, Clock::time_point now, std::map<uint64_t, Clock::time_point>& in_flight,
                 LatencyStats& rtt) {
  if (!j.contains("id") || !j["id"].is_number_unsigned()) return false;
  auto it = in_flight.find(j["id"].get<uint64_t>());
  if (it != in_flight.end()) {
    rtt.record(std::chrono::duration<double, std::milli>(now - it->second).count());
    in_flight.erase(it);
  }
  return true;
}

}  // namespace

const char* link_state_name(LinkState s) {
  switch (s) {
    case LinkState::connecting:
      return "connecting";
    case LinkState::up:
      return "up";
    case LinkState::lost:
      return "lost";
    case LinkState::stopped:
      return "stopped";
  }
  return "?";
}

Forwarder::Forwarder(ForwarderOptions options, Secret secret)
    : options_(std::move(options)), secret_(std::move(secret)) {}

Forwarder::~Forwarder() { stop(); }

std::string Forwarder::context() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return "worker " + (worker_name_.empty() ? std::string() : worker_name_ + " ") + "(" + options_.worker.to_string() +
         ")";
}

void Forwarder::log(const std::string& line) const {
  if (log_) log_(line);
}

Status Forwarder::start() {
  auto l = listen_tcp(options_.listen);
  if (!l.is_ok()) return l.status();
  listener_ = std::move(l.value());
  port_ = local_port(listener_.get());
  if (::pipe2(wake_, O_CLOEXEC) != 0) return Status::internal("pipe failed");
  accept_thread_ = std::thread(&Forwarder::accept_loop, this);
  heartbeat_thread_ = std::thread(&Forwarder::heartbeat_loop, this);
  return Status::ok();
}

void Forwarder::stop() {
  if (stopping_.exchange(true)) return;
  if (wake_[1] >= 0) {
    const char c = 1;
    (void)!::write(wake_[1], &c, 1);
  }
  {
    std::lock_guard<std::mutex> lock(mutex_);
    changed_.notify_all();
  }
  cut_sessions();
  if (accept_thread_.joinable()) accept_thread_.join();
  if (heartbeat_thread_.joinable()) heartbeat_thread_.join();
  cut_sessions();  // again: the accept thread may have added one before it saw the stop
  sessions_.join_all();
  state_ = LinkState::stopped;
  listener_.reset();
  for (int& fd : wake_) {
    if (fd >= 0) ::close(fd);
    fd = -1;
  }
}

ForwarderStats Forwarder::stats() const {
  ForwarderStats s;
  s.state = state_.load();
  s.bytes_to_worker = bytes_.to_peer.load();
  s.bytes_from_worker = bytes_.from_peer.load();
  s.connections = connections_.load();
  s.heartbeat = heartbeat_rtt_.snapshot();
  std::lock_guard<std::mutex> lock(mutex_);
  s.active = static_cast<uint64_t>(rpc_active_);
  s.worker_name = worker_name_;
  s.last_error = last_error_;
  return s;
}

bool Forwarder::wait_until_up(Millis timeout) {
  std::unique_lock<std::mutex> lock(mutex_);
  return changed_.wait_for(lock, timeout, [&] { return state_ == LinkState::up || stopping_; }) && !stopping_;
}

void Forwarder::set_state(LinkState s, const std::string& why) {
  const LinkState old = state_.exchange(s);
  {
    std::lock_guard<std::mutex> lock(mutex_);
    if (!why.empty()) last_error_ = why;
    changed_.notify_all();
  }
  if (old == s) return;
  log("link to " + context() + ": " + link_state_name(s) + (why.empty() ? "" : ": " + why));
  if (s == LinkState::lost) {
    // The callback first: the owner records why before the cut sessions report their errors.
    if (old == LinkState::up && on_lost_) on_lost_(why);
    cut_sessions();
  }
}

void Forwarder::cut_sessions() {
  std::lock_guard<std::mutex> lock(mutex_);
  for (int fd : session_fds_) ::shutdown(fd, SHUT_RDWR);
}

bool Forwarder::sleep_unless_stopped(Millis d) {
  std::unique_lock<std::mutex> lock(mutex_);
  changed_.wait_for(lock, d, [&] { return stopping_.load(); });
  return !stopping_;
}

void Forwarder::accept_loop() {
  while (!stopping_) {
    pollfd p[2] = {{listener_.get(), POLLIN, 0}, {wake_[0], POLLIN, 0}};
    if (::poll(p, 2, -1) < 0 && errno != EINTR) break;
    if (stopping_ || (p[1].revents & POLLIN)) break;
    if (!(p[0].revents & POLLIN)) continue;
    const int fd = ::accept4(listener_.get(), nullptr, nullptr, SOCK_CLOEXEC);
    if (fd < 0) continue;
    tune_socket(fd);
    ++connections_;
    {
      std::lock_guard<std::mutex> lock(mutex_);
      session_fds_.insert(fd);
    }
    sessions_.spawn([this, fd] { serve_local(fd); });
  }
}

void Forwarder::serve_local(int local_fd) {
  Fd local(local_fd);
  Fd remote;
  bool counted = false;  // holds one of rpc_active_
  auto forget = [&] {
    std::lock_guard<std::mutex> lock(mutex_);
    session_fds_.erase(local.get());
    if (remote.valid()) session_fds_.erase(remote.get());
    if (counted) --rpc_active_;
    changed_.notify_all();
  };
  // Dial only once the client speaks: a connect-and-close probe (llama.cpp's loader and ours do
  // that) must not occupy the worker, which serves one head connection at a time.
  pollfd p[2] = {{local.get(), POLLIN, 0}, {wake_[0], POLLIN, 0}};
  while (::poll(p, 2, -1) < 0 && errno == EINTR) {}
  char probe;
  if (stopping_ || (p[1].revents & POLLIN) || ::recv(local.get(), &probe, 1, MSG_PEEK | MSG_DONTWAIT) <= 0) {
    forget();
    return;
  }
  if (state_ == LinkState::lost) {
    log("local connection refused: the link to " + context() + " is lost");
    forget();
    return;
  }
  // The worker serves one rpc connection at a time, and ggml's client opens its connections one
  // after another: wait for our previous session to finish closing, or the worker could see the
  // new one while the old one still holds its slot.
  {
    std::unique_lock<std::mutex> lock(mutex_);
    changed_.wait_for(lock, options_.handshake.step_timeout, [&] { return rpc_active_ == 0 || stopping_; });
    ++rpc_active_;
    counted = true;
  }
  auto r = dial_worker(Role::rpc);
  if (!r.is_ok()) {
    {
      std::lock_guard<std::mutex> lock(mutex_);
      last_error_ = r.status().message();
    }
    log("rpc connection failed: " + r.status().message());
    forget();
    return;
  }
  remote = std::move(r.value());
  {
    std::lock_guard<std::mutex> lock(mutex_);
    session_fds_.insert(remote.get());
  }
  if (stopping_ || state_ == LinkState::lost) ::shutdown(remote.get(), SHUT_RDWR);  // cut while we dialled
  log("rpc session to " + context() + " opened");
  splice(local.get(), remote.get(), &bytes_.to_peer, &bytes_.from_peer);
  log("rpc session to " + context() + " closed");
  forget();
}

void Forwarder::heartbeat_loop() {
  while (!stopping_) {
    const Status s = heartbeat_session();
    if (stopping_) break;
    // Until the first success the link is "connecting"; after it, any failure means "lost".
    std::string previous;
    {
      std::lock_guard<std::mutex> lock(mutex_);
      previous = last_error_;
    }
    if (state_ == LinkState::up) {
      set_state(LinkState::lost, s.message());
    } else {
      set_state(state_.load(), s.message());
      if (s.message() != previous) log("link to " + context() + ": " + s.message());
    }
    if (!sleep_unless_stopped(options_.heartbeat_interval)) break;
  }
}

Result<Fd> Forwarder::dial_worker(Role role) {
  auto fd = connect_tcp(options_.worker, deadline_in(options_.handshake.step_timeout));
  if (!fd.is_ok()) return fd.status().with_context(context());
  auto peer = client_handshake(fd->get(), secret_, role, options_.handshake, context());
  if (!peer.is_ok()) return peer.status();
  std::lock_guard<std::mutex> lock(mutex_);
  worker_name_ = peer->name;
  return std::move(fd.value());
}

Status Forwarder::heartbeat_session() {
  auto r = dial_worker(Role::control);
  if (!r.is_ok()) return r.status();
  Fd fd = std::move(r.value());
  set_state(LinkState::up, "");
  LineReader reader(fd.get());
  uint64_t next_id = 1;
  auto last_seen = Clock::now();
  std::map<uint64_t, Clock::time_point> in_flight;
  auto next_ping = Clock::now();
  while (!stopping_) {
    const auto now = Clock::now();
    if (now - last_seen > options_.heartbeat_deadline) {
      return Status::unavailable(context() + ": no heartbeat for " +
                                 std::to_string(options_.heartbeat_deadline.count()) + " ms");
    }
    if (now >= next_ping) {
      in_flight[next_id] = now;
      // A stalled worker stops reading too; the write deadline keeps us from blocking on it.
      TANDEM_RETURN_IF_ERROR(
          write_json(fd.get(), {{"id", next_id++}, {"op", "ping"}}, last_seen + options_.heartbeat_deadline)
              .with_context(context()));
      next_ping = now + options_.heartbeat_interval;
    }
    const Deadline until = std::min(next_ping, last_seen + options_.heartbeat_deadline);
    pollfd p[2] = {{fd.get(), POLLIN, 0}, {wake_[0], POLLIN, 0}};
    const auto wait_ms = std::chrono::duration_cast<Millis>(until - Clock::now()).count();
    if (::poll(p, 2, static_cast<int>(std::max<int64_t>(wait_ms, 0) + 1)) < 0 && errno != EINTR) {
      return Status::unavailable("poll failed");
    }
    if (p[1].revents & POLLIN) break;
    if (!(p[0].revents & (POLLIN | POLLHUP | POLLERR))) continue;
    auto line = reader.read_json(deadline_in(options_.heartbeat_deadline));
    if (!line.is_ok()) return line.status().with_context(context());
    last_seen = Clock::now();
    if (!record_pong(line.value(), last_seen, in_flight, heartbeat_rtt_))
      log("event from " + context() + ": " + line->dump());
  }
  return Status::cancelled("stopped");
}

}  // namespace tandem::link
