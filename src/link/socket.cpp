#include "link/socket.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

namespace tandem::link {

void Fd::reset(int fd) {
  if (fd_ >= 0) ::close(fd_);
  fd_ = fd;
}

std::string Endpoint::to_string() const {
  const bool v6 = host.find(':') != std::string::npos;
  return (v6 ? "[" + host + "]" : host) + ":" + std::to_string(port);
}

Result<Endpoint> parse_endpoint(const std::string& text, bool allow_port_zero) {
  const size_t colon = text.rfind(':');
  if (colon == std::string::npos || colon == 0 || colon + 1 == text.size()) {
    return Status::invalid_argument("'" + text + "': expected HOST:PORT");
  }
  Endpoint ep;
  ep.host = text.substr(0, colon);
  if (ep.host.size() > 2 && ep.host.front() == '[' && ep.host.back() == ']')
    ep.host = ep.host.substr(1, ep.host.size() - 2);
  const std::string port = text.substr(colon + 1);
  if (port.size() > 5 || port.find_first_not_of("0123456789") != std::string::npos) {
    return Status::invalid_argument("'" + text + "': port '" + port + "' is not a number");
  }
  const long p = std::stol(port);
  if (p > 65535 || (p == 0 && !allow_port_zero)) {
    return Status::invalid_argument("'" + text + "': port " + port + " is out of range");
  }
  ep.port = static_cast<uint16_t>(p);
  return ep;
}

bool is_loopback_host(const std::string& host) {
  return host == "localhost" || host == "::1" || host.rfind("127.", 0) == 0;
}

namespace {

Result<addrinfo*> resolve(const Endpoint& ep, bool passive) {
  addrinfo hints{};
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = passive ? AI_PASSIVE : 0;
  addrinfo* res = nullptr;
  const std::string port = std::to_string(ep.port);
  if (int rc = ::getaddrinfo(ep.host.c_str(), port.c_str(), &hints, &res); rc != 0) {
    return Status::unavailable(ep.to_string() + ": cannot resolve: " + gai_strerror(rc));
  }
  return res;
}

int remaining_ms(Deadline deadline) {
  const auto left = std::chrono::duration_cast<Millis>(deadline - Clock::now()).count();
  return left <= 0 ? 0 : static_cast<int>(left);
}

}  // namespace

Result<Fd> listen_tcp(const Endpoint& ep, int backlog) {
  auto res = resolve(ep, true);
  if (!res.is_ok()) return res.status();
  std::string why = "no address";
  for (addrinfo* a = res.value(); a != nullptr; a = a->ai_next) {
    Fd fd(::socket(a->ai_family, a->ai_socktype | SOCK_CLOEXEC, a->ai_protocol));
    if (!fd.valid()) continue;
    const int one = 1;
    ::setsockopt(fd.get(), SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    if (::bind(fd.get(), a->ai_addr, a->ai_addrlen) == 0 && ::listen(fd.get(), backlog) == 0) {
      ::freeaddrinfo(res.value());
      return fd;
    }
    why = std::strerror(errno);
  }
  ::freeaddrinfo(res.value());
  return Status::unavailable("cannot listen on " + ep.to_string() + ": " + why);
}

uint16_t local_port(int fd) {
  sockaddr_storage ss{};
  socklen_t len = sizeof ss;
  if (::getsockname(fd, reinterpret_cast<sockaddr*>(&ss), &len) != 0) return 0;
  if (ss.ss_family == AF_INET) return ntohs(reinterpret_cast<sockaddr_in*>(&ss)->sin_port);
  if (ss.ss_family == AF_INET6) return ntohs(reinterpret_cast<sockaddr_in6*>(&ss)->sin6_port);
  return 0;
}

std::string peer_address(int fd) {
  sockaddr_storage ss{};
  socklen_t len = sizeof ss;
  if (::getpeername(fd, reinterpret_cast<sockaddr*>(&ss), &len) != 0) return "?";
  char host[NI_MAXHOST], serv[NI_MAXSERV];
  if (::getnameinfo(reinterpret_cast<sockaddr*>(&ss), len, host, sizeof host, serv, sizeof serv,
                    NI_NUMERICHOST | NI_NUMERICSERV) != 0) {
    return "?";
  }
  return Endpoint{host, static_cast<uint16_t>(std::atoi(serv))}.to_string();
}

void tune_socket(int fd) {
  const int one = 1;
  ::setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
  ::setsockopt(fd, SOL_SOCKET, SO_KEEPALIVE, &one, sizeof one);
  const int idle = 10, interval = 5, count = 3;
  ::setsockopt(fd, IPPROTO_TCP, TCP_KEEPIDLE, &idle, sizeof idle);
  ::setsockopt(fd, IPPROTO_TCP, TCP_KEEPINTVL, &interval, sizeof interval);
  ::setsockopt(fd, IPPROTO_TCP, TCP_KEEPCNT, &count, sizeof count);
  // Data unacknowledged for 30 s ends the connection: keepalive alone does not cover a peer that
  // vanished while we were sending.
  const unsigned user_timeout_ms = 30000;
  ::setsockopt(fd, IPPROTO_TCP, TCP_USER_TIMEOUT, &user_timeout_ms, sizeof user_timeout_ms);
}

Result<Fd> connect_tcp(const Endpoint& ep, Deadline deadline) {
  auto res = resolve(ep, false);
  if (!res.is_ok()) return res.status();
  std::string why = "no address";
  for (addrinfo* a = res.value(); a != nullptr; a = a->ai_next) {
    Fd fd(::socket(a->ai_family, a->ai_socktype | SOCK_CLOEXEC | SOCK_NONBLOCK, a->ai_protocol));
    if (!fd.valid()) continue;
    bool ok = ::connect(fd.get(), a->ai_addr, a->ai_addrlen) == 0;
    if (!ok && errno == EINPROGRESS) {
      pollfd pfd{fd.get(), POLLOUT, 0};
      const int timeout = remaining_ms(deadline);
      if (::poll(&pfd, 1, timeout) == 1) {
        int err = 0;
        socklen_t len = sizeof err;
        ::getsockopt(fd.get(), SOL_SOCKET, SO_ERROR, &err, &len);
        ok = err == 0;
        if (!ok) why = std::strerror(err);
      } else {
        why = "no answer within the deadline";
      }
    } else if (!ok) {
      why = std::strerror(errno);
    }
    if (ok) {
      ::freeaddrinfo(res.value());
      ::fcntl(fd.get(), F_SETFL, ::fcntl(fd.get(), F_GETFL) & ~O_NONBLOCK);
      tune_socket(fd.get());
      return fd;
    }
  }
  ::freeaddrinfo(res.value());
  return Status::unavailable(ep.to_string() + ": cannot connect: " + why);
}

const char* io_name(Io io) {
  switch (io) {
    case Io::ok:
      return "ok";
    case Io::closed:
      return "connection closed by the peer";
    case Io::timed_out:
      return "timed out";
    case Io::failed:
      return "socket error";
  }
  return "?";
}

bool wait_readable(int fd, Deadline deadline) {
  for (;;) {
    pollfd pfd{fd, POLLIN, 0};
    const int r = ::poll(&pfd, 1, remaining_ms(deadline));
    if (r > 0) return true;
    if (r == 0) return false;
    if (errno != EINTR) return true;  // let the read report the error
  }
}

Io read_exact(int fd, void* buf, size_t n, Deadline deadline, size_t* got) {
  auto* p = static_cast<uint8_t*>(buf);
  size_t done = 0;
  Io result = Io::ok;
  while (done < n) {
    if (!wait_readable(fd, deadline)) {
      result = Io::timed_out;
      break;
    }
    const ssize_t r = ::recv(fd, p + done, n - done, MSG_DONTWAIT);
    if (r > 0) {
      done += static_cast<size_t>(r);
    } else if (r == 0) {
      result = Io::closed;
      break;
    } else if (errno != EAGAIN && errno != EINTR) {
      result = errno == ECONNRESET ? Io::closed : Io::failed;
      break;
    }
  }
  if (got != nullptr) *got = done;
  return result;
}

Io exchange_all(int fd, const void* out, void* in, size_t n, Deadline deadline) {
  const auto* o = static_cast<const uint8_t*>(out);
  auto* p = static_cast<uint8_t*>(in);
  size_t sent = 0, got = 0;
  while (sent < n || got < n) {
    bool moved = false;
    if (sent < n) {
      const ssize_t w = ::send(fd, o + sent, n - sent, MSG_DONTWAIT | MSG_NOSIGNAL);
      if (w > 0) sent += static_cast<size_t>(w), moved = true;
      if (w < 0 && errno != EAGAIN && errno != EINTR)
        return errno == EPIPE || errno == ECONNRESET ? Io::closed : Io::failed;
    }
    if (got < n) {
      const ssize_t r = ::recv(fd, p + got, n - got, MSG_DONTWAIT);
      if (r > 0) got += static_cast<size_t>(r), moved = true;
      if (r == 0) return Io::closed;
      if (r < 0 && errno != EAGAIN && errno != EINTR) return errno == ECONNRESET ? Io::closed : Io::failed;
    }
    if (moved) continue;
    pollfd pfd{fd, static_cast<short>((sent < n ? POLLOUT : 0) | (got < n ? POLLIN : 0)), 0};
    const int r = ::poll(&pfd, 1, remaining_ms(deadline));
    if (r == 0) return Io::timed_out;
    if (r < 0 && errno != EINTR) return Io::failed;
  }
  return Io::ok;
}

Io write_all(int fd, const void* buf, size_t n, Deadline deadline) {
  const auto* p = static_cast<const uint8_t*>(buf);
  size_t done = 0;
  while (done < n) {
    pollfd pfd{fd, POLLOUT, 0};
    const int r = ::poll(&pfd, 1, remaining_ms(deadline));
    if (r == 0) return Io::timed_out;
    if (r < 0 && errno != EINTR) return Io::failed;
    const ssize_t w = ::send(fd, p + done, n - done, MSG_DONTWAIT | MSG_NOSIGNAL);
    if (w > 0) {
      done += static_cast<size_t>(w);
    } else if (w < 0 && errno != EAGAIN && errno != EINTR) {
      return errno == EPIPE || errno == ECONNRESET ? Io::closed : Io::failed;
    }
  }
  return Io::ok;
}

}  // namespace tandem::link
