#include "link/control.h"

#include <sys/socket.h>

#include <cerrno>

namespace tandem::link {

Result<std::string> LineReader::read_line(Deadline deadline) {
  for (;;) {
    const size_t nl = buf_.find('\n');
    if (nl != std::string::npos) {
      std::string line = buf_.substr(0, nl);
      buf_.erase(0, nl + 1);
      return line;
    }
    if (buf_.size() > kMaxControlLine) return Status::invalid_argument("control line longer than 1 MiB");
    if (!wait_readable(fd_, deadline)) return Status::unavailable("no control message before the deadline");
    char chunk[4096];
    const ssize_t r = ::recv(fd_, chunk, sizeof chunk, MSG_DONTWAIT);
    if (r == 0) return Status::unavailable("control connection closed");
    if (r < 0) {
      if (errno == EAGAIN || errno == EINTR) continue;
      return Status::unavailable("control connection failed");
    }
    buf_.append(chunk, static_cast<size_t>(r));
  }
}

Result<nlohmann::json> LineReader::read_json(Deadline deadline) {
  auto line = read_line(deadline);
  if (!line.is_ok()) return line.status();
  nlohmann::json j = nlohmann::json::parse(line.value(), nullptr, false);
  if (j.is_discarded() || !j.is_object()) return Status::invalid_argument("control line is not a JSON object");
  return j;
}

Status write_json(int fd, const nlohmann::json& j, Deadline deadline) {
  const std::string line = j.dump() + "\n";
  const Io io = write_all(fd, line.data(), line.size(), deadline);
  if (io != Io::ok) return Status::unavailable(std::string("control write: ") + io_name(io));
  return Status::ok();
}

}  // namespace tandem::link

namespace tandem::link {

Result<nlohmann::json> control_request(const Endpoint& worker, const Secret& secret, const std::string& op,
                                       const HandshakeOptions& options) {
  const std::string ctx = "worker (" + worker.to_string() + ")";
  auto fd = connect_tcp(worker, deadline_in(options.step_timeout));
  if (!fd.is_ok()) return fd.status().with_context(ctx);
  auto peer = client_handshake(fd->get(), secret, Role::control, options, ctx);
  if (!peer.is_ok()) return peer.status();
  const std::string named = "worker " + peer->name + " (" + worker.to_string() + ")";
  TANDEM_RETURN_IF_ERROR(
      write_json(fd->get(), {{"id", 1}, {"op", op}}, deadline_in(options.step_timeout)).with_context(named));
  LineReader reader(fd->get());
  for (;;) {
    auto r = reader.read_json(deadline_in(options.step_timeout));
    if (!r.is_ok()) return r.status().with_context(named);
    const nlohmann::json& j = r.value();
    if (!j.contains("id")) continue;  // an event
    if (!j.contains("ok") || !j["ok"].is_boolean() || !j["ok"].get<bool>()) {
      const auto err = j.contains("error") && j["error"].is_string() ? j["error"].get<std::string>() : "request failed";
      return Status::invalid_argument(named + ": " + err);
    }
    return j.contains("result") ? j["result"] : nlohmann::json::object();
  }
}

}  // namespace tandem::link
