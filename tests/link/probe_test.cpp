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

}  // namespace
}  // namespace tandem::link
