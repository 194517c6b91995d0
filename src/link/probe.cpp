#include "link/probe.h"

#include <algorithm>
#include <chrono>
#include <vector>

#include "common/units.h"
#include "link/protocol.h"

namespace tandem::link {
namespace {

constexpr size_t kHeader = 9;
constexpr size_t kChunk = 1 << 20;

void put_u64(uint8_t* p, uint64_t v) {
  for (int i = 7; i >= 0; --i, v >>= 8) p[i] = static_cast<uint8_t>(v);
}
uint64_t get_u64(const uint8_t* p) {
  uint64_t v = 0;
  for (int i = 0; i < 8; ++i) v = (v << 8) | p[i];
  return v;
}

// Moves `count` bytes through `fd`: reads them (and drops them) or writes zeros.
Io stream(int fd, uint64_t count, bool read, Deadline deadline) {
  std::vector<uint8_t> buf(std::min<uint64_t>(count, kChunk));
  while (count > 0) {
    const size_t n = static_cast<size_t>(std::min<uint64_t>(count, buf.size()));
    const Io io = read ? read_exact(fd, buf.data(), n, deadline) : write_all(fd, buf.data(), n, deadline);
    if (io != Io::ok) return io;
    count -= n;
  }
  return Io::ok;
}

double ms_since(Clock::time_point t0) { return std::chrono::duration<double, std::milli>(Clock::now() - t0).count(); }

// A transfer may take long on a slow cable: the deadline grows with the size (at least 1 MB/s).
Deadline transfer_deadline(uint64_t bytes, Millis step) { return deadline_in(step + Millis(bytes / 1000)); }

// The worker's side of an exchange or reduce request, once its round count is read.
Io serve_rounds(int fd, ProbeOp op, uint64_t count, uint64_t rounds, Millis idle, uint64_t* done) {
  Io io = Io::ok;
  std::vector<uint8_t> mine(count, 0x5a), theirs(count);
  for (*done = 0; *done < rounds && io == Io::ok; ++*done) {
    if (op == ProbeOp::exchange) {
      io = exchange_all(fd, mine.data(), theirs.data(), count, deadline_in(idle));
    } else {
      io = read_exact(fd, theirs.data(), count, deadline_in(idle));
      if (io == Io::ok) io = write_all(fd, theirs.data(), count, deadline_in(idle));
    }
  }
  return io;
}

}  // namespace

std::string serve_probe(int fd, Millis idle) {
  uint64_t requests = 0, in = 0, out = 0;
  std::string end = "closed";
  for (;;) {
    uint8_t h[kHeader];
    const Io io = read_exact(fd, h, kHeader, deadline_in(idle));
    if (io != Io::ok) {
      end = io == Io::closed ? "closed" : io_name(io);
      break;
    }
    const auto op = static_cast<ProbeOp>(h[0]);
    const uint64_t count = get_u64(h + 1);
    const bool rounds = op == ProbeOp::exchange || op == ProbeOp::reduce;
    if (count > (rounds ? kMaxExchangeBytes : kMaxProbeBytes) ||
        (!rounds && op != ProbeOp::echo && op != ProbeOp::upload && op != ProbeOp::download)) {
      end = "malformed request";
      break;
    }
    ++requests;
    Io r = Io::ok;
    if (rounds) {
      uint8_t r8[8];
      r = read_exact(fd, r8, sizeof r8, deadline_in(idle));
      if (r == Io::ok && get_u64(r8) > kMaxProbeRounds) {
        end = "malformed request";
        break;
      }
      uint64_t done = 0;
      if (r == Io::ok) r = serve_rounds(fd, op, count, get_u64(r8), idle, &done);
      in += done * count;
      out += done * count;
    } else if (op == ProbeOp::echo) {
      r = write_all(fd, h, kHeader, deadline_in(idle));
    } else if (op == ProbeOp::upload) {
      r = stream(fd, count, true, transfer_deadline(count, idle));
      if (r == Io::ok) {
        in += count;
        uint8_t ack[8];
        put_u64(ack, count);
        r = write_all(fd, ack, sizeof ack, deadline_in(idle));
      }
    } else {
      r = stream(fd, count, false, transfer_deadline(count, idle));
      if (r == Io::ok) out += count;
    }
    if (r != Io::ok) {
      end = io_name(r);
      break;
    }
  }
  return "probe ended after " + std::to_string(requests) + " requests, " + format_bytes(in) + " in, " +
         format_bytes(out) + " out (" + end + ")";
}

Result<ProbeMeasurement> run_probe(int fd, int pings, uint64_t bytes, Millis step) {
  if (bytes > kMaxProbeBytes)
    return Status::invalid_argument("probe: at most " + format_bytes(kMaxProbeBytes) + " each way");
  ProbeMeasurement m;
  std::vector<double> rtts;
  uint8_t h[kHeader] = {};
  for (int i = 0; i < pings; ++i) {
    h[0] = static_cast<uint8_t>(ProbeOp::echo);
    put_u64(h + 1, static_cast<uint64_t>(i));
    const auto t0 = Clock::now();
    uint8_t back[kHeader];
    Io io = write_all(fd, h, kHeader, deadline_in(step));
    if (io == Io::ok) io = read_exact(fd, back, kHeader, deadline_in(step));
    if (io != Io::ok) return Status::unavailable(std::string("probe echo: ") + io_name(io));
    if (get_u64(back + 1) != static_cast<uint64_t>(i))
      return Status::internal("probe echo: the worker answered another request");
    rtts.push_back(ms_since(t0));
  }
  if (!rtts.empty()) {
    std::sort(rtts.begin(), rtts.end());
    m.rtt_median_ms = rtts[rtts.size() / 2];
    m.rtt_min_ms = rtts.front();
    m.rtt_max_ms = rtts.back();
  }
  if (bytes == 0) return m;

  h[0] = static_cast<uint8_t>(ProbeOp::upload);
  put_u64(h + 1, bytes);
  auto t0 = Clock::now();
  Io io = write_all(fd, h, kHeader, deadline_in(step));
  if (io == Io::ok) io = stream(fd, bytes, false, transfer_deadline(bytes, step));
  uint8_t ack[8];
  if (io == Io::ok) io = read_exact(fd, ack, sizeof ack, deadline_in(step));
  if (io != Io::ok) return Status::unavailable(std::string("probe upload: ") + io_name(io));
  if (get_u64(ack) != bytes) return Status::internal("probe upload: the worker counted other bytes");
  m.upload_bytes_per_s = static_cast<double>(bytes) / (ms_since(t0) / 1000.0);

  h[0] = static_cast<uint8_t>(ProbeOp::download);
  t0 = Clock::now();
  io = write_all(fd, h, kHeader, deadline_in(step));
  if (io == Io::ok) io = stream(fd, bytes, true, transfer_deadline(bytes, step));
  if (io != Io::ok) return Status::unavailable(std::string("probe download: ") + io_name(io));
  m.download_bytes_per_s = static_cast<double>(bytes) / (ms_since(t0) / 1000.0);
  return m;
}

Result<ExchangeMeasurement> run_exchange(int fd, ProbeOp op, uint64_t bytes, uint64_t rounds, Millis step) {
  if ((op != ProbeOp::exchange && op != ProbeOp::reduce) || bytes == 0 || bytes > kMaxExchangeBytes || rounds == 0 ||
      rounds > kMaxProbeRounds) {
    return Status::invalid_argument("exchange: 1 B to " + format_bytes(kMaxExchangeBytes) + " per message and 1 to " +
                                    std::to_string(kMaxProbeRounds) + " rounds");
  }
  const char* what = op == ProbeOp::exchange ? "exchange" : "reduce";
  uint8_t h[kHeader + 8];
  h[0] = static_cast<uint8_t>(op);
  put_u64(h + 1, bytes);
  put_u64(h + kHeader, rounds);
  Io io = write_all(fd, h, sizeof h, deadline_in(step));
  std::vector<uint8_t> mine(bytes, 0xa5), theirs(bytes);
  std::vector<double> us;
  us.reserve(rounds);
  for (uint64_t i = 0; i < rounds && io == Io::ok; ++i) {
    const auto t0 = Clock::now();
    if (op == ProbeOp::exchange) {
      io = exchange_all(fd, mine.data(), theirs.data(), bytes, deadline_in(step));
    } else {
      io = write_all(fd, mine.data(), bytes, deadline_in(step));
      if (io == Io::ok) io = read_exact(fd, theirs.data(), bytes, deadline_in(step));
    }
    us.push_back(ms_since(t0) * 1000);
  }
  if (io != Io::ok)
    return Status::unavailable(std::string(what) + ": " + io_name(io) + " after " + std::to_string(us.size()) +
                               " rounds");
  if (op == ProbeOp::reduce && theirs != mine) return Status::internal("reduce: the worker sent other bytes back");
  us.erase(us.begin(), us.begin() + static_cast<std::ptrdiff_t>(us.size() / 10));
  std::sort(us.begin(), us.end());
  ExchangeMeasurement m;
  const auto at = [&](double q) {
    return us[std::min(us.size() - 1, static_cast<size_t>(q * static_cast<double>(us.size())))];
  };
  m.rounds = us.size();
  m.median_us = at(0.5);
  m.p10_us = at(0.1);
  m.p90_us = at(0.9);
  m.min_us = us.front();
  m.max_us = us.back();
  return m;
}

Result<ExchangeMeasurement> measure_exchange(const Endpoint& to, const Secret& secret, ProbeOp op, uint64_t bytes,
                                             uint64_t rounds, Millis step) {
  const std::string ctx = "worker " + to.to_string();
  auto fd = connect_tcp(to, deadline_in(step));
  if (!fd.is_ok()) return fd.status().with_context(ctx);
  auto peer = client_handshake(fd->get(), secret, Role::probe, default_handshake_options(), ctx);
  if (!peer.is_ok()) return peer.status();
  auto m = run_exchange(fd->get(), op, bytes, rounds, step);
  if (!m.is_ok()) return m.status().with_context(ctx);
  return m;
}

}  // namespace tandem::link
