// The head-side forwarder against a real worker: the splice works, and a stalled worker is cut.
#include "link/forwarder.h"

#include <gtest/gtest.h>
#include <signal.h>
#include <sys/socket.h>

#include <algorithm>
#include <atomic>
#include <cstdio>

#include "common/build_info.h"

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
  // The splice counts a chunk after writing it: the reader may be a moment ahead of the counter.
  ForwarderStats s = f.stats();
  for (int i = 0; i < 200 && s.bytes_from_worker < 36u; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
    s = f.stats();
  }
  EXPECT_EQ(s.bytes_to_worker, 33u);
  EXPECT_EQ(s.bytes_from_worker, 36u);
  EXPECT_EQ(s.worker_name, "box-b");
}

TEST(Forwarder, SplicesToANonIsolatedRpcServerToo) {
  ScratchDir dir;
  const Secret secret = make_secret(dir.file("cluster.key"));
  WorkerProcess w(dir, "box-b", dir.file("cluster.key"), {"--no-private-netns"});
  ASSERT_TRUE(w.up()) << w.log();
  ForwarderOptions o;
  o.worker = w.ep();
  Forwarder f(o, secret);
  ASSERT_TRUE(f.start().is_ok());
  ASSERT_TRUE(f.wait_until_up(Millis(10000)));
  auto local = connect_tcp({"127.0.0.1", f.port()}, deadline_in(Millis(5000)));
  ASSERT_TRUE(local.is_ok());
  EXPECT_TRUE(ggml_hello_round_trip(local->get())) << w.log();
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
  for (int i = 0; i < 500 && lost.load() == 0; ++i) std::this_thread::sleep_for(std::chrono::milliseconds(10));
  EXPECT_EQ(lost.load(), 1);  // the callback runs just after the cut
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

namespace tandem::link {
namespace {

using namespace tandem::testing;

// Median time of `n` ggml RPC GET_ALIGNMENT round trips (9 + 4 bytes out, 8 + 8 back) on `fd`,
// after the HELLO; 0 on failure.
double median_round_trip_us(int fd, int n) {
  if (!ggml_hello_round_trip(fd)) return 0;
  const uint8_t req[13] = {1, 4, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0};  // command 1, size 4, device 0
  std::vector<double> us;
  for (int i = 0; i < n; ++i) {
    const auto t0 = Clock::now();
    uint8_t rsp[16];
    if (write_all(fd, req, sizeof req, deadline_in(Millis(5000))) != Io::ok ||
        read_exact(fd, rsp, sizeof rsp, deadline_in(Millis(5000))) != Io::ok) {
      return 0;
    }
    us.push_back(std::chrono::duration<double, std::micro>(Clock::now() - t0).count());
  }
  std::nth_element(us.begin(), us.begin() + n / 2, us.end());
  return us[n / 2];
}

// Reports (does not judge: timings depend on the machine) the round trip through forwarder and
// worker against a direct connection to a stock ggml-rpc-server.
TEST(Forwarder, RoundTripLatencyAgainstADirectRpcServer) {
  ScratchDir dir;
  const int port = free_port();
  ChildProcess rpc({TANDEM_LLAMA_RPC_SERVER_EXE, "-H", "127.0.0.1", "-p", std::to_string(port), "-t", "1"},
                   dir.file("rpc.log"));
  ASSERT_TRUE(wait_for_port(port, 10000));
  double direct = 0;
  {
    auto fd = connect_tcp({"127.0.0.1", static_cast<uint16_t>(port)}, deadline_in(Millis(5000)));
    ASSERT_TRUE(fd.is_ok());
    direct = median_round_trip_us(fd->get(), 2000);
  }
  const Secret secret = make_secret(dir.file("cluster.key"));
  WorkerProcess w(dir, "box-b", dir.file("cluster.key"));
  ASSERT_TRUE(w.up()) << w.log();
  ForwarderOptions o;
  o.worker = w.ep();
  Forwarder f(o, secret);
  ASSERT_TRUE(f.start().is_ok());
  ASSERT_TRUE(f.wait_until_up(Millis(10000)));
  auto fd = connect_tcp({"127.0.0.1", f.port()}, deadline_in(Millis(5000)));
  ASSERT_TRUE(fd.is_ok());
  const double forwarded = median_round_trip_us(fd->get(), 2000);
  ASSERT_GT(direct, 0);
  ASSERT_GT(forwarded, 0);
  std::printf("median RPC round trip (2000 x GET_ALIGNMENT): direct %.1f us, forwarder + worker %.1f us (+%.1f us)\n",
              direct, forwarded, forwarded - direct);
}

}  // namespace
}  // namespace tandem::link
