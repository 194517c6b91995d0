#include "link/probe.h"

#include <algorithm>
#include <chrono>
#include <vector>

#include "common/units.h"

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
    if (count > kMaxProbeBytes || (op != ProbeOp::echo && op != ProbeOp::upload && op != ProbeOp::download)) {
      end = "malformed request";
      break;
    }
    ++requests;
    Io r = Io::ok;
    if (op == ProbeOp::echo) {
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

}  // namespace tandem::link
