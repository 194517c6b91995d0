// The `control` connection after the handshake: JSON lines, one object per line, both ways.
//
//   request   {"id": 7, "op": "status"}            ops: "status", "ping"
//   response  {"id": 7, "ok": true, "result": {...}}   or  {"id": 7, "ok": false, "error": "..."}
//   event     {"event": "rpc_child_restarted", ...}    unsolicited, from the worker
//
// A "ping" is the heartbeat: the forwarder sends one every interval and treats a link with no
// line from the worker for longer than its deadline as lost.
#pragma once

#include <nlohmann/json.hpp>
#include <string>

#include "common/status.h"
#include "link/socket.h"

namespace tandem::link {

constexpr size_t kMaxControlLine = 1 << 20;

// Buffered line reader over a socket. Not thread-safe: one reader per connection.
class LineReader {
 public:
  explicit LineReader(int fd) : fd_(fd) {}
  // One line (without the newline). Errors: unavailable on close, error or deadline;
  // invalid_argument for a line past kMaxControlLine.
  Result<std::string> read_line(Deadline deadline);
  // Reads a line and parses it as a JSON object.
  Result<nlohmann::json> read_json(Deadline deadline);

 private:
  int fd_;
  std::string buf_;
};

// Writes `j` as one line. Callers serialise writers themselves (one writer at a time per socket).
Status write_json(int fd, const nlohmann::json& j, Deadline deadline);

}  // namespace tandem::link

#include "link/protocol.h"
#include "link/secret.h"

namespace tandem::link {

// Connects to a worker, authenticates as `control`, sends {"id": 1, "op": op} and returns the
// response's "result". Every step has `options.step_timeout`. Errors name the worker.
Result<nlohmann::json> control_request(const Endpoint& worker, const Secret& secret, const std::string& op,
                                       const HandshakeOptions& options);

}  // namespace tandem::link
