#include "link/splice.h"

#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <limits>
#include <thread>
#include <vector>

namespace tandem::link {
namespace {

// 1 MiB: weight uploads are tens of MiB per message; small RPC messages are unaffected.
constexpr size_t kChunk = 1 << 20;

bool send_all(int to, const char* p, size_t n, uint64_t* moved, std::atomic<uint64_t>* counter) {
  while (n > 0) {
    const ssize_t w = ::send(to, p, n, MSG_NOSIGNAL);
    if (w < 0 && errno == EINTR) continue;
    if (w <= 0) return false;
    p += w, n -= static_cast<size_t>(w), *moved += static_cast<uint64_t>(w);
    if (counter != nullptr) counter->fetch_add(static_cast<uint64_t>(w), std::memory_order_relaxed);
  }
  return true;
}

uint64_t relay_buffered(int from, int to, uint64_t limit, std::atomic<uint64_t>* counter) {
  std::vector<char> buf(static_cast<size_t>(std::min<uint64_t>(kChunk, limit)));
  uint64_t moved = 0;
  while (moved < limit) {
    const ssize_t r = ::recv(from, buf.data(), static_cast<size_t>(std::min<uint64_t>(buf.size(), limit - moved)), 0);
    if (r < 0 && errno == EINTR) continue;
    if (r <= 0 || !send_all(to, buf.data(), static_cast<size_t>(r), &moved, counter)) break;
  }
  return moved;
}

class Pipe {
 public:
  Pipe() {
    if (::pipe2(fd_, O_CLOEXEC) != 0) fd_[0] = fd_[1] = -1;
    // A larger pipe moves a chunk per system call; the default (64 KiB) works too.
    else
      (void)::fcntl(fd_[1], F_SETPIPE_SZ, static_cast<int>(kChunk));
  }
  ~Pipe() {
    for (int fd : fd_) {
      if (fd >= 0) ::close(fd);
    }
  }
  bool ok() const { return fd_[0] >= 0; }
  int read_end() const { return fd_[0]; }
  int write_end() const { return fd_[1]; }

 private:
  int fd_[2];
};

// Writes the `n` bytes waiting in `pipe` to `to`; through a buffer if `to` refuses splice(2).
bool drain(const Pipe& pipe, int to, size_t n, uint64_t* moved, std::atomic<uint64_t>* counter) {
  while (n > 0) {
    const ssize_t w = ::splice(pipe.read_end(), nullptr, to, nullptr, n, SPLICE_F_MOVE);
    if (w < 0 && errno == EINTR) continue;
    if (w < 0 && errno == EINVAL) {
      std::vector<char> buf(n);
      size_t got = 0;
      while (got < n) {
        const ssize_t r = ::read(pipe.read_end(), buf.data() + got, n - got);
        if (r < 0 && errno == EINTR) continue;
        if (r <= 0) return false;
        got += static_cast<size_t>(r);
      }
      return send_all(to, buf.data(), n, moved, counter);
    }
    if (w <= 0) return false;
    n -= static_cast<size_t>(w), *moved += static_cast<uint64_t>(w);
    if (counter != nullptr) counter->fetch_add(static_cast<uint64_t>(w), std::memory_order_relaxed);
  }
  return true;
}

// splice(2) has no MSG_NOSIGNAL: a peer gone raises SIGPIPE at the writing thread. Blocked here
// for the relay's duration and taken back if it came, so that a closed socket ends the relay with
// EPIPE whatever the process does with SIGPIPE.
class NoSigpipe {
 public:
  NoSigpipe() {
    sigemptyset(&pipe_);
    sigaddset(&pipe_, SIGPIPE);
    sigset_t pending;
    sigpending(&pending);
    was_pending_ = sigismember(&pending, SIGPIPE) == 1;
    pthread_sigmask(SIG_BLOCK, &pipe_, &old_);
  }
  ~NoSigpipe() {
    sigset_t pending;
    sigpending(&pending);
    if (!was_pending_ && sigismember(&pending, SIGPIPE) == 1) {
      const struct timespec zero { 0, 0 };
      while (sigtimedwait(&pipe_, nullptr, &zero) < 0 && errno == EINTR) {}
    }
    pthread_sigmask(SIG_SETMASK, &old_, nullptr);
  }

 private:
  sigset_t pipe_, old_;
  bool was_pending_ = false;
};

void pump(int from, int to, std::atomic<uint64_t>* counter) {
  relay(from, to, std::numeric_limits<uint64_t>::max(), counter);
  // Either side ending ends the session: ggml's RPC protocol has no half-closed state.
  ::shutdown(from, SHUT_RDWR);
  ::shutdown(to, SHUT_RDWR);
}

}  // namespace

uint64_t relay(int from, int to, uint64_t limit, std::atomic<uint64_t>* counter, RelayPath path) {
  if (path == RelayPath::buffer) return relay_buffered(from, to, limit, counter);
  Pipe pipe;
  if (!pipe.ok()) return relay_buffered(from, to, limit, counter);
  const NoSigpipe no_sigpipe;
  uint64_t moved = 0;
  while (moved < limit) {
    const size_t want = static_cast<size_t>(std::min<uint64_t>(kChunk, limit - moved));
    const ssize_t r = ::splice(from, nullptr, pipe.write_end(), nullptr, want, SPLICE_F_MOVE);
    if (r < 0 && errno == EINTR) continue;
    // Nothing is in the pipe when the read side refuses: the buffer takes over from here.
    if (r < 0 && errno == EINVAL) return moved + relay_buffered(from, to, limit - moved, counter);
    if (r <= 0 || !drain(pipe, to, static_cast<size_t>(r), &moved, counter)) break;
  }
  return moved;
}

void splice(int a, int b, std::atomic<uint64_t>* a_to_b, std::atomic<uint64_t>* b_to_a) {
  std::thread back(pump, b, a, b_to_a);
  pump(a, b, a_to_b);
  back.join();
}

}  // namespace tandem::link
