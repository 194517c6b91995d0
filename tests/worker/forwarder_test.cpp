// The head-side forwarder against a real worker: the splice works, and a stalled worker is cut.
#include "link/forwarder.h"

#include <gtest/gtest.h>
#include <signal.h>
#include <sys/socket.h>

#include <atomic>

#include "worker_env.h"

namespace tandem::link {
namespace {

using namespace tandem::testing;

// ggml RPC HELLO (command 14, size 24, 24 bytes of capabilities) and its 8 + 28-byte answer.
bool ggml_hello_round_trip(int fd) {
  std::vector<uint8_t> hello = {14, 24, 0, 0, 0, 0, 0, 0, 0};
  hello.resize(9 + 24, 0);
  if (write_all(fd, hello.data(), hello.size(), deadline_in(Millis(5000))) != Io::ok) return false;
  uint8_t rsp[8 + 28];
  if (read_exact(fd, rsp, sizeof rsp, deadline_in(Millis(10000))) != Io::ok) return false;
  return rsp[0] == 28 && rsp[8] == 7;  // size 28; protocol major 7
}

TEST(Forwarder, SplicesRawGgmlRpcToTheWorkersServer) {
  ScratchDir dir;
  const Secret secret = make_secret(dir.file("cluster.key"));
  WorkerProcess w(dir, "box-b", dir.file("cluster.key"));
  ASSERT_TRUE(w.up()) << w.log();
  ForwarderOptions o;
  o.worker = w.ep();
  Forwarder f(o, secret);
  ASSERT_TRUE(f.start().is_ok());
  ASSERT_TRUE(f.wait_until_up(Millis(10000)));
  auto local = connect_tcp({"127.0.0.1", f.port()}, deadline_in(Millis(5000)));
  ASSERT_TRUE(local.is_ok());
  EXPECT_TRUE(ggml_hello_round_trip(local->get())) << w.log();
  const auto s = f.stats();
  EXPECT_EQ(s.bytes_to_worker, 33u);
  EXPECT_EQ(s.bytes_from_worker, 36u);
  EXPECT_EQ(s.worker_name, "box-b");
  EXPECT_GE(s.heartbeat.samples, 0u);
}

TEST(Forwarder, AStalledWorkerIsCutWithinTheDeadline) {
  ScratchDir dir;
  const Secret secret = make_secret(dir.file("cluster.key"));
  WorkerProcess w(dir, "box-b", dir.file("cluster.key"));
  ASSERT_TRUE(w.up()) << w.log();
  ForwarderOptions o;
  o.worker = w.ep();
  o.heartbeat_interval = Millis(200);
  o.heartbeat_deadline = Millis(1500);
  Forwarder f(o, secret);
  std::atomic<int> lost{0};
  f.on_link_lost([&](const std::string&) { ++lost; });
  ASSERT_TRUE(f.start().is_ok());
  ASSERT_TRUE(f.wait_until_up(Millis(10000)));
  auto local = connect_tcp({"127.0.0.1", f.port()}, deadline_in(Millis(5000)));
  ASSERT_TRUE(local.is_ok());
  ASSERT_TRUE(ggml_hello_round_trip(local->get())) << w.log();

  ASSERT_TRUE(w.process().signal(SIGSTOP));
  // The engine's RPC client would now wait forever on the worker; the forwarder closes its socket.
  char c;
  EXPECT_TRUE(wait_readable(local->get(), deadline_in(Millis(1500 + 5000))));
  EXPECT_LE(::recv(local->get(), &c, 1, MSG_DONTWAIT), 0);
  EXPECT_EQ(f.state(), LinkState::lost);
  EXPECT_EQ(lost.load(), 1);
  EXPECT_NE(f.stats().last_error.find("no heartbeat for 1500 ms"), std::string::npos) << f.stats().last_error;
  // New local connections are closed at once while the link is lost.
  auto again = connect_tcp({"127.0.0.1", f.port()}, deadline_in(Millis(5000)));
  ASSERT_TRUE(again.is_ok());
  EXPECT_FALSE(ggml_hello_round_trip(again->get()));

  ASSERT_TRUE(w.process().signal(SIGCONT));
  EXPECT_TRUE(f.wait_until_up(Millis(15000)));
}

}  // namespace
}  // namespace tandem::link
