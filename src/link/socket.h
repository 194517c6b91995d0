// TCP plumbing for the link: endpoints, listening, connecting and exact reads/writes, each wait
// bounded by a deadline. Linux only (poll, TCP_NODELAY, TCP keepalive).
#pragma once

#include <chrono>
#include <cstdint>
#include <string>

#include "common/status.h"

namespace tandem::link {

using Clock = std::chrono::steady_clock;
using Deadline = Clock::time_point;
using Millis = std::chrono::milliseconds;

inline Deadline deadline_in(Millis d) { return Clock::now() + d; }

// An owned file descriptor, closed on destruction. Move-only.
class Fd {
 public:
  Fd() = default;
  explicit Fd(int fd) : fd_(fd) {}
  ~Fd() { reset(); }
  Fd(Fd&& o) noexcept : fd_(o.release()) {}
  Fd& operator=(Fd&& o) noexcept {
    if (this != &o) reset(o.release());
    return *this;
  }
  Fd(const Fd&) = delete;
  Fd& operator=(const Fd&) = delete;

  int get() const { return fd_; }
  bool valid() const { return fd_ >= 0; }
  int release() {
    const int f = fd_;
    fd_ = -1;
    return f;
  }
  void reset(int fd = -1);

 private:
  int fd_ = -1;
};

struct Endpoint {
  std::string host;  // name, IPv4 or IPv6 (without brackets)
  uint16_t port = 0;
  std::string to_string() const;  // "host:port", "[v6]:port"
};

// Parses "HOST:PORT" or "[V6]:PORT"; the port must be 1..65535 (0 too when `allow_port_zero`).
Result<Endpoint> parse_endpoint(const std::string& text, bool allow_port_zero = false);

// True for 127.0.0.0/8, ::1 and "localhost".
bool is_loopback_host(const std::string& host);

// A listening socket bound to `ep` (SO_REUSEADDR, close-on-exec). Port 0 picks a free port.
Result<Fd> listen_tcp(const Endpoint& ep, int backlog = 16);

// The local port of a bound socket; 0 on error.
uint16_t local_port(int fd);

// "addr:port" of the connected peer, or "?" when unknown.
std::string peer_address(int fd);

// Connects with a deadline (every resolved address is tried). The socket is blocking and tuned.
Result<Fd> connect_tcp(const Endpoint& ep, Deadline deadline);

// TCP_NODELAY (the RPC protocol is request/response with small messages: Nagle would add ~40 ms
// per round trip), keepalive probes (idle 10 s, then 3 every 5 s) and a 30 s TCP_USER_TIMEOUT, so a
// peer whose machine vanished is noticed whether the connection was idle or sending.
void tune_socket(int fd);

enum class Io { ok, closed, timed_out, failed };
const char* io_name(Io io);

// Reads exactly `n` bytes unless the peer closes, the deadline passes or an error occurs.
// `got` (optional) receives the bytes read before that.
Io read_exact(int fd, void* buf, size_t n, Deadline deadline, size_t* got = nullptr);

// Writes all `n` bytes unless the deadline passes or an error occurs.
Io write_all(int fd, const void* buf, size_t n, Deadline deadline);

// Sends `n` bytes of `out` and receives `n` bytes into `in` at the same time, as two peers that
// swap equal messages do (neither waits for the other's to end before sending its own, so no
// socket buffer size can deadlock them).
Io exchange_all(int fd, const void* out, void* in, size_t n, Deadline deadline);

// Waits until `fd` is readable or the deadline passes; true when readable (or hung up).
bool wait_readable(int fd, Deadline deadline);

}  // namespace tandem::link
