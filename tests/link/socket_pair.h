// A connected pair of Unix stream sockets for the link's tests: one end each for the two sides.
#pragma once

#include <gtest/gtest.h>
#include <sys/socket.h>

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

}  // namespace tandem::link
