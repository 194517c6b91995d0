// The `probe` role of the link: measures the cable between a head and a worker (used by
// `tandem doctor`). After the handshake the client sends requests, each a 9-byte header
// (op u8, count u64 big-endian), and the worker answers:
//
//   1 echo      the same 9 bytes back at once                      (round-trip latency)
//   2 upload    the client then sends `count` bytes; the worker reads and drops them, then answers
//               8 bytes: the count received                          (head -> worker throughput)
//   3 download  the worker sends `count` bytes                        (worker -> head throughput)
//   4 exchange  the client then sends a round count (u64 big-endian, at most kMaxProbeRounds);
//               `rounds` times both ends send `count` bytes and receive the other's at once
//               (two boxes swapping partial sums: one-way latency and one message per round)
//   5 reduce    the same round count; `rounds` times the client sends `count` bytes and the worker
//               sends `count` bytes back once it has them (a sum made on one box: a round trip)
//
// `count` is at most kMaxProbeBytes (kMaxExchangeBytes for 4 and 5); anything else ends the
// connection. Nothing here reaches the
// RPC server, and the worker serves a probe beside a running head session.
#pragma once

#include <cstdint>

#include "common/status.h"
#include "link/secret.h"
#include "link/socket.h"

namespace tandem::link {

constexpr uint64_t kMaxProbeBytes = uint64_t{1} << 30;
constexpr uint64_t kMaxExchangeBytes = uint64_t{64} << 20;
constexpr uint64_t kMaxProbeRounds = 10000000;
enum class ProbeOp : uint8_t { echo = 1, upload = 2, download = 3, exchange = 4, reduce = 5 };

// Worker side, after the handshake: serves requests until the peer closes, a request is
// malformed, or no request comes for `idle`. Returns a sentence for the log
// ("probe ended after 3 requests, 64.0 MiB in, 64.0 MiB out (closed)").
std::string serve_probe(int fd, Millis idle);

struct ProbeMeasurement {
  double rtt_median_ms = 0, rtt_min_ms = 0, rtt_max_ms = 0;
  double upload_bytes_per_s = 0;    // head -> worker
  double download_bytes_per_s = 0;  // worker -> head
};

// Client side, after the handshake as `probe`: `pings` echoes (median, min, max), then `bytes`
// each way. Every step has `step` as deadline. `bytes` 0 skips the throughput part.
Result<ProbeMeasurement> run_probe(int fd, int pings, uint64_t bytes, Millis step);

// Each round's time in microseconds, the first tenth (the connection warming up) left out.
struct ExchangeMeasurement {
  double median_us = 0, p10_us = 0, p90_us = 0, min_us = 0, max_us = 0;
  uint64_t rounds = 0;  // measured
};

// Client side, after the handshake as `probe`: `rounds` rounds of `op` (exchange or reduce) with
// messages of `bytes`. Every round has `step` as deadline.
Result<ExchangeMeasurement> run_exchange(int fd, ProbeOp op, uint64_t bytes, uint64_t rounds, Millis step);

// The same from connecting: to the worker at `to`, authenticated with `secret` as `probe`.
// Errors name the worker and what failed (connecting, the handshake, a round).
Result<ExchangeMeasurement> measure_exchange(const Endpoint& to, const Secret& secret, ProbeOp op, uint64_t bytes,
                                             uint64_t rounds, Millis step);

}  // namespace tandem::link
