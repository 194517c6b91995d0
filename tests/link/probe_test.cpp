// The link's probe role: echoes and bulk transfers measured over a real socket pair.
#include "link/probe.h"

#include <sys/socket.h>
#include <unistd.h>

#include <future>

#include <gtest/gtest.h>

#include "socket_pair.h"

namespace tandem::link {
namespace {

TEST(Probe, MeasuresRoundTripsAndBothDirections) {
  Pair p;
  auto server = std::async(std::launch::async, [&] { return serve_probe(p.b.get(), Millis(5000)); });
  auto m = run_probe(p.a.get(), 5, 3u << 20, Millis(5000));
  ASSERT_TRUE(m.is_ok()) << m.status().to_string();
  EXPECT_GT(m->rtt_median_ms, 0);
  EXPECT_LE(m->rtt_min_ms, m->rtt_median_ms);
  EXPECT_LE(m->rtt_median_ms, m->rtt_max_ms);
  EXPECT_GT(m->upload_bytes_per_s, 0);
  EXPECT_GT(m->download_bytes_per_s, 0);
  p.a.reset();
  const std::string log = server.get();
  EXPECT_NE(log.find("after 7 requests, 3.00 MiB in, 3.00 MiB out (closed)"), std::string::npos) << log;
}

TEST(Probe, WithoutBytesOnlyPings) {
  Pair p;
  auto server = std::async(std::launch::async, [&] { return serve_probe(p.b.get(), Millis(5000)); });
  auto m = run_probe(p.a.get(), 3, 0, Millis(5000));
  ASSERT_TRUE(m.is_ok()) << m.status().to_string();
  EXPECT_EQ(m->upload_bytes_per_s, 0);
  p.a.reset();
  EXPECT_NE(server.get().find("after 3 requests"), std::string::npos);
}

TEST(Probe, TheWorkerEndsAMalformedOrOversizedRequest) {
  for (uint8_t op : {uint8_t{9}, uint8_t{2}}) {
    Pair p;
    auto server = std::async(std::launch::async, [&] { return serve_probe(p.b.get(), Millis(5000)); });
    uint8_t h[9] = {op, 0xff, 0, 0, 0, 0, 0, 0, 0};  // op 2 with 2^63 bytes: over the limit
    if (op == 9) h[1] = 0;
    ASSERT_EQ(::write(p.a.get(), h, sizeof h), 9);
    EXPECT_NE(server.get().find("malformed request"), std::string::npos);
  }
}

TEST(Probe, AnIdlePeerIsCutAtTheDeadline) {
  Pair p;
  EXPECT_NE(serve_probe(p.b.get(), Millis(100)).find("timed"), std::string::npos);
}

TEST(Probe, AskingForMoreThanTheLimitIsRefusedLocally) {
  Pair p;
  EXPECT_FALSE(run_probe(p.a.get(), 1, kMaxProbeBytes + 1, Millis(100)).is_ok());
}

// Exchanges: both ends send at once, with messages larger than the socket buffers (a peer that
// waited for its whole message to leave before reading would deadlock), and reduces: the worker
// answers with what it received.
TEST(Probe, ExchangesAndReducesRunTheirRoundsAndTheWorkerCountsTheBytes) {
  Pair p;
  auto server = std::async(std::launch::async, [&] { return serve_probe(p.b.get(), Millis(5000)); });
  constexpr uint64_t kBytes = 3u << 20;
  auto ex = run_exchange(p.a.get(), ProbeOp::exchange, kBytes, 20, Millis(5000));
  ASSERT_TRUE(ex.is_ok()) << ex.status().to_string();
  EXPECT_EQ(ex->rounds, 18u) << "the first tenth is left out";
  EXPECT_GT(ex->median_us, 0);
  EXPECT_LE(ex->p10_us, ex->median_us);
  EXPECT_LE(ex->median_us, ex->p90_us);
  auto re = run_exchange(p.a.get(), ProbeOp::reduce, 24576, 100, Millis(5000));
  ASSERT_TRUE(re.is_ok()) << re.status().to_string();
  EXPECT_EQ(re->rounds, 90u);
  p.a.reset();
  const std::string log = server.get();
  EXPECT_NE(log.find("after 2 requests, 62.3 MiB in, 62.3 MiB out (closed)"), std::string::npos) << log;
}

TEST(Probe, ExchangeLimitsAreCheckedOnBothSides) {
  Pair p;
  EXPECT_FALSE(run_exchange(p.a.get(), ProbeOp::exchange, kMaxExchangeBytes + 1, 10, Millis(100)).is_ok());
  EXPECT_FALSE(run_exchange(p.a.get(), ProbeOp::exchange, 1024, 0, Millis(100)).is_ok());
  EXPECT_FALSE(run_exchange(p.a.get(), ProbeOp::echo, 1024, 10, Millis(100)).is_ok());
  auto server = std::async(std::launch::async, [&] { return serve_probe(p.b.get(), Millis(5000)); });
  uint8_t h[17] = {4, 0, 0, 0, 0, 0, 0, 4, 0, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff};  // 1 KiB, 2^64-1 rounds
  ASSERT_EQ(::write(p.a.get(), h, sizeof h), 17);
  EXPECT_NE(server.get().find("malformed request"), std::string::npos);
}

}  // namespace
}  // namespace tandem::link
