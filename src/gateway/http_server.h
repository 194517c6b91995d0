// Private to the gateway: the HTTP server the API runs on.
#pragma once

#include <httplib.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>

namespace tandem::gateway {

// Debian's cpp-httplib 0.11 is a compiled library that listens with a backlog of 5
// (CPPHTTPLIB_LISTEN_BACKLOG, fixed when the library was built). When more connections than that
// arrive while the accept thread is not running (a burst of clients on a busy machine), the kernel
// drops handshakes and falls back to SYN cookies, and some connections, whose clients have already
// sent a request, are reset about a second later: those requests get no answer at all, and the
// gateway never sees them. Listening again on the bound socket only raises the queue's length.
class HttpServer : public httplib::Server {
 public:
  // 0 on success, else errno. The kernel caps `backlog` at net.core.somaxconn.
  int set_listen_backlog(int backlog) { return ::listen(svr_sock_, backlog) == 0 ? 0 : errno; }
  // Closes the listening socket of a server that never started listening.
  void close_listener() { ::close(svr_sock_.exchange(INVALID_SOCKET)); }
};

}  // namespace tandem::gateway
