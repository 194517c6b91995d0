// A connected pair of Unix stream sockets for the link's tests: one end each for the two sides;
// and a blocking read of a known number of bytes.
#pragma once

#include <gtest/gtest.h>
#include <sys/socket.h>

#include <cstdint>
#include <vector>

#include "link/socket.h"

namespace tandem::link {

struct Pair {
  Fd a, b;
  Pair() {
    int fds[2];
    EXPECT_EQ(::socketpair(AF_UNIX, SOCK_STREAM, 0, fds), 0);
    a.reset(fds[0]);
    b.reset(fds[1]);
  }
};

// Reads `n` bytes from `fd`, fewer if the peer ends first.
inline std::vector<uint8_t> take(int fd, size_t n) {
  std::vector<uint8_t> b(n);
  size_t got = 0;
  while (got < n) {
    const ssize_t r = ::recv(fd, b.data() + got, n - got, 0);
    if (r <= 0) break;
    got += static_cast<size_t>(r);
  }
  b.resize(got);
  return b;
}

}  // namespace tandem::link
