// The data path's markers (link/protocol.h): the bytes the head sends a tandem worker inside
// SET_TENSOR data.
#include <cstring>

#include "common/le_bytes.h"
#include "link/protocol.h"

namespace tandem::link {
namespace {

constexpr char kCachedMagic[16] = {'t', 'a', 'n', 'd', 'e', 'm', '-', 'c', 'a', 'c', 'h', 'e', 'd', '-', 'v', '1'};
constexpr char kReuseMagic[16] = {'t', 'a', 'n', 'd', 'e', 'm', '-', 'r', 'e', 'u', 's', 'e', '-', 'v', '1', '\n'};
constexpr char kKvShareMagic[16] = {'t', 'a', 'n', 'd', 'e', 'm', '-', 'k', 'v', 's', 'h', 'a', 'r', 'e', '1', '\n'};
constexpr char kKvAnswerMagic[16] = {'t', 'a', 'n', 'd', 'e', 'm', '-', 'k', 'v', 'h', 'e', 'l', 'd', '-', '1', '\n'};
constexpr char kRunsMagic[16] = {'t', 'a', 'n', 'd', 'e', 'm', '-', 'r', 'u', 'n', 's', '-', 'v', '1', '\n', '\0'};

// The header's run count, when `data` starts with a header whose runs fill the rest exactly.
std::optional<uint32_t> runs_of(const uint8_t* p, size_t n) {
  if (n < kWordRunsHeader || std::memcmp(p, kRunsMagic, sizeof kRunsMagic) != 0 || get_le(p + 28, 4) != 0)
    return std::nullopt;
  const uint64_t runs = get_le(p + 24, 4);
  if ((n - kWordRunsHeader) % 8 != 0 || (n - kWordRunsHeader) / 8 != runs) return std::nullopt;
  return static_cast<uint32_t>(runs);
}

}  // namespace

std::array<uint8_t, kCachedMarkerSize> encode_cached_marker(const CachedMarker& m) {
  std::array<uint8_t, kCachedMarkerSize> out{};
  std::memcpy(out.data(), kCachedMagic, sizeof kCachedMagic);
  put_le(out.data() + 16, m.hash, 8);
  put_le(out.data() + 24, m.bytes, 8);
  return out;
}

std::optional<CachedMarker> parse_cached_marker(const uint8_t* data, size_t n) {
  if (n != kCachedMarkerSize || std::memcmp(data, kCachedMagic, sizeof kCachedMagic) != 0) return std::nullopt;
  return CachedMarker{get_le(data + 16, 8), get_le(data + 24, 8)};
}

std::array<uint8_t, kReuseMarkerSize> encode_reuse_marker(const ReuseMarker& m) {
  std::array<uint8_t, kReuseMarkerSize> out{};
  std::memcpy(out.data(), kReuseMagic, sizeof kReuseMagic);
  put_le(out.data() + 16, static_cast<uint32_t>(m.op), 4);
  put_le(out.data() + 20, m.slot, 4);
  put_le(out.data() + 24, m.bytes, 8);
  put_le(out.data() + 32, m.session, 8);
  put_le(out.data() + 40, m.drop, 4);
  return out;
}

std::optional<ReuseMarker> parse_reuse_marker(const void* data, size_t n) {
  const auto* p = static_cast<const uint8_t*>(data);
  if (n != kReuseMarkerSize || std::memcmp(p, kReuseMagic, sizeof kReuseMagic) != 0 || get_le(p + 44, 4) != 0)
    return std::nullopt;
  ReuseMarker m;
  const uint64_t op = get_le(p + 16, 4);
  if (op != static_cast<uint32_t>(ReuseOp::keep) && op != static_cast<uint32_t>(ReuseOp::copy)) return std::nullopt;
  m.op = static_cast<ReuseOp>(op);
  m.slot = static_cast<uint32_t>(get_le(p + 20, 4));
  m.bytes = get_le(p + 24, 8);
  m.session = get_le(p + 32, 8);
  m.drop = static_cast<uint32_t>(get_le(p + 40, 4));
  if (m.slot >= kReuseSlots || m.bytes == 0 || (m.drop >> kReuseSlots) != 0) return std::nullopt;
  return m;
}

std::array<uint8_t, kKvShareMarkerSize> encode_kv_share_marker(const KvShareMarker& m) {
  std::array<uint8_t, kKvShareMarkerSize> out{};
  std::memcpy(out.data(), kKvShareMagic, sizeof kKvShareMagic);
  put_le(out.data() + 16, static_cast<uint32_t>(m.op), 4);
  put_le(out.data() + 24, m.key, 8);
  put_le(out.data() + 32, m.session, 8);
  put_le(out.data() + 40, m.stream, 8);
  put_le(out.data() + 48, m.offset, 8);
  put_le(out.data() + 56, m.bytes, 8);
  return out;
}

std::optional<KvShareMarker> parse_kv_share_marker(const void* data, size_t n) {
  const auto* p = static_cast<const uint8_t*>(data);
  if (n != kKvShareMarkerSize || std::memcmp(p, kKvShareMagic, sizeof kKvShareMagic) != 0 || get_le(p + 20, 4) != 0)
    return std::nullopt;
  const uint64_t op = get_le(p + 16, 4);
  if (op < static_cast<uint32_t>(KvShareOp::save) || op > static_cast<uint32_t>(KvShareOp::spill)) return std::nullopt;
  KvShareMarker m;
  m.op = static_cast<KvShareOp>(op);
  m.key = get_le(p + 24, 8);
  m.session = get_le(p + 32, 8);
  m.stream = get_le(p + 40, 8);
  m.offset = get_le(p + 48, 8);
  m.bytes = get_le(p + 56, 8);
  if ((m.op == KvShareOp::save || m.op == KvShareOp::restore) && m.bytes == 0) return std::nullopt;
  return m;
}

std::array<uint8_t, kKvShareAnswerSize> encode_kv_share_answer(const KvShareAnswer& a) {
  std::array<uint8_t, kKvShareAnswerSize> out{};
  std::memcpy(out.data(), kKvAnswerMagic, sizeof kKvAnswerMagic);
  put_le(out.data() + 16, a.held ? 1 : 0, 4);
  put_le(out.data() + 20, a.faults, 4);
  put_le(out.data() + 24, a.bytes, 8);
  return out;
}

std::optional<KvShareAnswer> parse_kv_share_answer(const void* data, size_t n) {
  const auto* p = static_cast<const uint8_t*>(data);
  if (n != kKvShareAnswerSize || std::memcmp(p, kKvAnswerMagic, sizeof kKvAnswerMagic) != 0) return std::nullopt;
  const uint64_t held = get_le(p + 16, 4);
  if (held > 1) return std::nullopt;
  return KvShareAnswer{held == 1, static_cast<uint32_t>(get_le(p + 20, 4)), get_le(p + 24, 8)};
}

std::optional<std::vector<uint8_t>> encode_word_runs(const void* data, size_t n) {
  if (n < kWordRunsMinBytes || n % 4 != 0) return std::nullopt;
  const size_t limit = n / 8;
  const size_t words = n / 4;
  const auto* p = static_cast<const uint8_t*>(data);
  std::vector<uint8_t> out(kWordRunsHeader);
  out.reserve(limit);
  uint32_t runs = 0;
  for (size_t i = 0; i < words;) {
    uint32_t w;
    std::memcpy(&w, p + 4 * i, 4);
    size_t j = i + 1;
    // Compared as words, not values: a NaN or -0.0 goes through as it was.
    while (j < words && j - i < UINT32_MAX && std::memcmp(p + 4 * j, &w, 4) == 0) ++j;
    if (out.size() + 8 > limit) return std::nullopt;
    const size_t at = out.size();
    out.resize(at + 8);
    put_le(out.data() + at, j - i, 4);
    std::memcpy(out.data() + at + 4, &w, 4);
    ++runs;
    i = j;
  }
  std::memcpy(out.data(), kRunsMagic, sizeof kRunsMagic);
  put_le(out.data() + 16, n, 8);
  put_le(out.data() + 24, runs, 4);
  put_le(out.data() + 28, 0, 4);
  return out;
}

std::optional<uint64_t> word_runs_size(const void* data, size_t n) {
  const auto* p = static_cast<const uint8_t*>(data);
  const auto runs = runs_of(p, n);
  if (!runs) return std::nullopt;
  const uint64_t size = get_le(p + 16, 8);
  if (size % 4 != 0) return std::nullopt;
  uint64_t words = 0;
  for (uint32_t r = 0; r < *runs; ++r) {
    const uint64_t len = get_le(p + kWordRunsHeader + 8 * r, 4);
    if (len == 0) return std::nullopt;
    words += len;
    if (words > size / 4) return std::nullopt;
  }
  if (words != size / 4) return std::nullopt;
  return size;
}

bool decode_word_runs(const void* data, size_t n, void* out, size_t out_n) {
  const auto size = word_runs_size(data, n);
  if (!size || *size != out_n) return false;
  const auto* p = static_cast<const uint8_t*>(data);
  auto* o = static_cast<uint8_t*>(out);
  const uint32_t runs = static_cast<uint32_t>(get_le(p + 24, 4));
  for (uint32_t r = 0; r < runs; ++r) {
    const uint8_t* run = p + kWordRunsHeader + 8 * r;
    const uint64_t len = get_le(run, 4);
    uint32_t w;
    std::memcpy(&w, run + 4, 4);
    if (w == 0 || ((w & 0xff) * 0x01010101u) == w) {
      std::memset(o, static_cast<int>(w & 0xff), len * 4);  // one byte repeated: zeros above all
      o += len * 4;
    } else {
      for (uint64_t k = 0; k < len; ++k, o += 4) std::memcpy(o, &w, 4);
    }
  }
  return true;
}

}  // namespace tandem::link
