#include "link/splice.h"

#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <thread>
#include <vector>

namespace tandem::link {
namespace {

// 1 MiB: weight uploads are tens of MiB per message; small RPC messages are unaffected.
constexpr size_t kBuffer = 1 << 20;

void pump(int from, int to, std::atomic<uint64_t>* counter) {
  std::vector<char> buf(kBuffer);
  for (;;) {
    const ssize_t r = ::recv(from, buf.data(), buf.size(), 0);
    if (r < 0 && errno == EINTR) continue;
    if (r <= 0) break;
    size_t done = 0;
    while (done < static_cast<size_t>(r)) {
      const ssize_t w = ::send(to, buf.data() + done, static_cast<size_t>(r) - done, MSG_NOSIGNAL);
      if (w < 0 && errno == EINTR) continue;
      if (w <= 0) goto out;
      done += static_cast<size_t>(w);
      if (counter != nullptr) counter->fetch_add(static_cast<uint64_t>(w), std::memory_order_relaxed);
    }
  }
out:
  // Either side ending ends the session: ggml's RPC protocol has no half-closed state.
  ::shutdown(from, SHUT_RDWR);
  ::shutdown(to, SHUT_RDWR);
}

}  // namespace

void splice(int a, int b, std::atomic<uint64_t>* a_to_b, std::atomic<uint64_t>* b_to_a) {
  std::thread back(pump, b, a, b_to_a);
  pump(a, b, a_to_b);
  back.join();
}

}  // namespace tandem::link
