#include "engine/client.h"

#include <sys/socket.h>
#include <unistd.h>

#include <future>

#include "engine/unix_socket.h"

namespace tandem::engine {

Result<std::unique_ptr<EngineClient>> EngineClient::connect(const std::string& socket_path, int timeout_ms,
                                                            StatusCallback on_status) {
  auto fd = connect_unix(socket_path, timeout_ms);
  if (!fd.is_ok()) return fd.status();
  return std::unique_ptr<EngineClient>(new EngineClient(fd.value(), std::move(on_status)));
}

EngineClient::EngineClient(int fd, StatusCallback on_status) : fd_(fd), on_status_(std::move(on_status)) {
  reader_ = std::thread([this] { read_loop(); });
}

EngineClient::~EngineClient() {
  ::shutdown(fd_, SHUT_RDWR);
  reader_.join();
  ::close(fd_);
}

Status EngineClient::send_line(const std::string& line) {
  if (closed_) return Status::unavailable("the engine connection is closed");
  std::lock_guard<std::mutex> lock(write_mutex_);
  if (!write_all(fd_, line + "\n")) return Status::unavailable("the engine connection is closed");
  return Status::ok();
}

Status EngineClient::submit(const std::string& id, RequestKind kind, const std::string& body, EventCallback on_event) {
  if (id.empty()) return Status::invalid_argument("the request id is empty");
  {
    std::lock_guard<std::mutex> lock(mutex_);
    if (open_.count(id)) return Status::invalid_argument("request id '" + id + "' is already in use");
    open_[id] = std::make_shared<EventCallback>(std::move(on_event));
  }
  EngineRequest r;
  r.op = EngineRequest::Op::submit;
  r.id = id;
  r.kind = kind;
  r.body = body;
  Status st = send_line(encode_request(r));
  if (!st.is_ok()) {
    std::lock_guard<std::mutex> lock(mutex_);
    open_.erase(id);
  }
  return st;
}

Status EngineClient::cancel(const std::string& id) {
  EngineRequest r;
  r.op = EngineRequest::Op::cancel;
  r.id = id;
  return send_line(encode_request(r));
}

Result<EngineEvent> EngineClient::query(EngineRequest r, int timeout_ms) {
  auto answer = std::make_shared<std::promise<EngineEvent>>();
  std::future<EngineEvent> got = answer->get_future();
  {
    std::lock_guard<std::mutex> lock(mutex_);
    // "?" keeps these ids apart from the caller's submits.
    r.id = "?" + std::to_string(next_query_++);
    open_[r.id] = std::make_shared<EventCallback>([answer](const EngineEvent& e) { answer->set_value(e); });
  }
  Status st = send_line(encode_request(r));
  if (st.is_ok() && got.wait_for(std::chrono::milliseconds(timeout_ms)) != std::future_status::ready) {
    st = Status::unavailable("the engine did not answer within " + std::to_string(timeout_ms) + " ms");
  }
  if (!st.is_ok()) {
    std::lock_guard<std::mutex> lock(mutex_);
    open_.erase(r.id);
    return st;
  }
  EngineEvent e = got.get();
  if (e.type == EngineEvent::Type::error) {
    switch (e.code) {
      case StatusCode::invalid_argument:
        return Status::invalid_argument(e.message);
      case StatusCode::internal:
        return Status::internal(e.message);
      default:
        return Status::unavailable(e.message);
    }
  }
  return e;
}

Result<EngineStatus> EngineClient::status(int timeout_ms) {
  std::unique_lock<std::mutex> lock(mutex_);
  const uint64_t seen = status_seen_;
  lock.unlock();
  EngineRequest r;
  r.op = EngineRequest::Op::status;
  TANDEM_RETURN_IF_ERROR(send_line(encode_request(r)));
  lock.lock();
  // Any status event after the request answers it: a pushed one is just as fresh.
  if (!status_cv_.wait_for(lock, std::chrono::milliseconds(timeout_ms),
                           [&] { return status_seen_ > seen || closed_; }) ||
      closed_) {
    return Status::unavailable("the engine did not answer a status request within " + std::to_string(timeout_ms) +
                               " ms");
  }
  return last_status_;
}

Status EngineClient::send_raw(const std::string& line) { return send_line(line); }

void EngineClient::on_orphan_error(EventCallback cb) {
  std::lock_guard<std::mutex> lock(mutex_);
  orphan_ = std::move(cb);
}

void EngineClient::read_loop() {
  LineReader reader(fd_);
  std::string line;
  while (reader.next(&line)) {
    auto e = decode_event(line);
    if (e.is_ok()) dispatch(e.value());
  }
  closed_ = true;
  fail_all("the engine closed the connection" + (reader.error().empty() ? std::string() : ": " + reader.error()));
}

void EngineClient::dispatch(const EngineEvent& e) {
  if (e.type == EngineEvent::Type::status) {
    {
      std::lock_guard<std::mutex> lock(mutex_);
      last_status_ = e.status;
      ++status_seen_;
    }
    status_cv_.notify_all();
    if (on_status_) on_status_(e.status);
    return;
  }
  std::shared_ptr<EventCallback> cb;
  EventCallback orphan;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    auto it = open_.find(e.id);
    if (it == open_.end()) {
      if (e.type == EngineEvent::Type::error) orphan = orphan_;
    } else {
      cb = it->second;  // shared: no copy of the callback per token
      // Every event but started and delta ends its request (a query's result too).
      if (e.type != EngineEvent::Type::delta && e.type != EngineEvent::Type::started) open_.erase(it);
    }
  }
  if (cb)
    (*cb)(e);
  else if (orphan)
    orphan(e);
}

void EngineClient::fail_all(const std::string& why) {
  std::map<std::string, std::shared_ptr<EventCallback>> open;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    open.swap(open_);
  }
  status_cv_.notify_all();
  for (auto& [id, cb] : open) {
    EngineEvent e;
    e.type = EngineEvent::Type::error;
    e.id = id;
    e.code = StatusCode::unavailable;
    e.message = why;
    (*cb)(e);
  }
}

}  // namespace tandem::engine
