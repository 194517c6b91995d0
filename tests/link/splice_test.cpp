// link::relay and link::splice: every byte through, in order, both ways, on Unix and TCP sockets,
// through the kernel and through a buffer; a relay stops exactly at its limit; a peer gone ends a
// relay with no SIGPIPE.
#include "link/splice.h"

#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <thread>
#include <vector>

#include "socket_pair.h"

namespace tandem::link {
namespace {

using Bytes = std::vector<uint8_t>;

Bytes pattern(size_t n, uint8_t seed) {
  Bytes b(n);
  for (size_t i = 0; i < n; ++i) b[i] = static_cast<uint8_t>(i * 131 + seed + (i >> 16));
  return b;
}

void put(int fd, const Bytes& b) {
  size_t done = 0;
  while (done < b.size()) {
    const ssize_t w = ::send(fd, b.data() + done, b.size() - done, MSG_NOSIGNAL);
    ASSERT_GT(w, 0);
    done += static_cast<size_t>(w);
  }
}

// A connected pair of TCP sockets on loopback, as the forwarder and the worker have.
struct TcpPair {
  Fd a, b;
  TcpPair() {
    Fd l(::socket(AF_INET, SOCK_STREAM, 0));
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    socklen_t len = sizeof addr;
    EXPECT_EQ(::bind(l.get(), reinterpret_cast<sockaddr*>(&addr), len), 0);
    EXPECT_EQ(::listen(l.get(), 1), 0);
    EXPECT_EQ(::getsockname(l.get(), reinterpret_cast<sockaddr*>(&addr), &len), 0);
    a.reset(::socket(AF_INET, SOCK_STREAM, 0));
    EXPECT_EQ(::connect(a.get(), reinterpret_cast<sockaddr*>(&addr), len), 0);
    b.reset(::accept(l.get(), nullptr, nullptr));
  }
};

template <typename P>
void both_ways_through_a_splice() {
  // left.a <-> [left.b  splice  right.a] <-> right.b
  P left, right;
  std::atomic<uint64_t> to_right{0}, to_left{0};
  std::thread spliced([&] { splice(left.b.get(), right.a.get(), &to_right, &to_left); });
  const Bytes out = pattern(24 << 20, 1), back = pattern((9 << 20) + 7, 2);
  std::thread writer_out([&] { put(left.a.get(), out); });
  std::thread writer_back([&] { put(right.b.get(), back); });
  EXPECT_EQ(take(right.b.get(), out.size()), out);
  EXPECT_EQ(take(left.a.get(), back.size()), back);
  writer_out.join();
  writer_back.join();
  ::shutdown(left.a.get(), SHUT_RDWR);  // one side ending ends both directions
  spliced.join();
  EXPECT_EQ(to_right.load(), out.size());
  EXPECT_EQ(to_left.load(), back.size());
  EXPECT_EQ(take(right.b.get(), 1).size(), 0u);  // the other side sees the end
}

TEST(Splice, MovesEveryByteBothWaysOnUnixSockets) { both_ways_through_a_splice<Pair>(); }
TEST(Splice, MovesEveryByteBothWaysOnTcpSockets) { both_ways_through_a_splice<TcpPair>(); }

class Relay : public ::testing::TestWithParam<RelayPath> {};

TEST_P(Relay, StopsAtItsLimitAndLeavesTheRestInTheSocket) {
  TcpPair from, to;
  const Bytes frame = pattern((3 << 20) + 5, 3), next = pattern(100, 4);
  std::thread writer([&] {
    put(from.a.get(), frame);
    put(from.a.get(), next);
  });
  std::atomic<uint64_t> counted{0};
  Bytes got;
  std::thread reader([&] { got = take(to.b.get(), frame.size()); });
  EXPECT_EQ(relay(from.b.get(), to.a.get(), frame.size(), &counted, GetParam()), frame.size());
  reader.join();
  writer.join();
  EXPECT_EQ(got, frame);
  EXPECT_EQ(counted.load(), frame.size());
  EXPECT_EQ(take(from.b.get(), next.size()), next);  // the next frame is still the caller's to read
}

TEST_P(Relay, APeerGoneEndsItWithoutASignal) {
  // With SIGPIPE at its default action this process would die at the first write to `to`.
  TcpPair from, to;
  to.b.reset();
  std::thread writer([&] {  // fails part-way, once the relay has given up and the socket is shut
    const Bytes data = pattern(8 << 20, 5);
    size_t done = 0;
    for (ssize_t w = 0; done < data.size() && w >= 0; done += static_cast<size_t>(std::max<ssize_t>(w, 0))) {
      w = ::send(from.a.get(), data.data() + done, data.size() - done, MSG_NOSIGNAL);
    }
  });
  const uint64_t moved = relay(from.b.get(), to.a.get(), 8 << 20, nullptr, GetParam());
  EXPECT_LT(moved, 8u << 20);
  // Closed, not shut down: a close with unread data resets the connection, which ends a writer
  // blocked on a full window; a shutdown(SHUT_RD) tells the writer nothing and it would wait forever.
  from.b.reset();
  writer.join();
}

TEST_P(Relay, EndsWhenTheSenderCloses) {
  Pair from, to;
  const Bytes data = pattern(300000, 6);
  std::thread writer([&] {
    put(from.a.get(), data);
    from.a.reset();
  });
  Bytes got;
  std::thread reader([&] { got = take(to.b.get(), data.size()); });
  EXPECT_EQ(relay(from.b.get(), to.a.get(), UINT64_MAX, nullptr, GetParam()), data.size());
  writer.join();
  reader.join();
  EXPECT_EQ(got, data);
}

INSTANTIATE_TEST_SUITE_P(Paths, Relay, ::testing::Values(RelayPath::kernel, RelayPath::buffer),
                         [](const auto& info) { return info.param == RelayPath::kernel ? "Kernel" : "Buffer"; });

}  // namespace
}  // namespace tandem::link
