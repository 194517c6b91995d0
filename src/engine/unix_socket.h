// Unix stream sockets carrying newline-terminated lines: the transport of the engine protocol.
#pragma once

#include <string>

#include "common/status.h"

namespace tandem::engine {

// Binds and listens on `path` (a stale socket file there is replaced), mode 0600.
Result<int> listen_unix(const std::string& path);
// Connects to `path`, retrying until `timeout_ms` has passed (the engine may still be starting).
Result<int> connect_unix(const std::string& path, int timeout_ms);
// Writes all of `data`; false when the peer is gone. Never raises SIGPIPE.
bool write_all(int fd, const std::string& data);

// Reads lines from a socket it does not own. Not thread-safe; one reader per socket.
class LineReader {
 public:
  explicit LineReader(int fd) : fd_(fd) {}
  // The next line without its newline. False at end of stream, on an error or on a line longer
  // than kMaxLineBytes (then error() says so).
  bool next(std::string* line);
  const std::string& error() const { return error_; }

 private:
  int fd_;
  std::string buffer_;
  size_t scanned_ = 0;  // bytes of buffer_ known to hold no newline
  std::string error_;
};

}  // namespace tandem::engine
