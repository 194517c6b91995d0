#include "common/cached_tensor.h"

#include <cstdio>
#include <cstring>
#include <fstream>

namespace tandem {
namespace {

constexpr char kMagic[16] = {'t', 'a', 'n', 'd', 'e', 'm', '-', 'c', 'a', 'c', 'h', 'e', 'd', '-', 'v', '1'};

void put_u64(uint8_t* p, uint64_t v) {
  for (int i = 0; i < 8; ++i) p[i] = static_cast<uint8_t>(v >> (8 * i));
}

uint64_t get_u64(const uint8_t* p) {
  uint64_t v = 0;
  for (int i = 7; i >= 0; --i) v = (v << 8) | p[i];
  return v;
}

}  // namespace

uint64_t fnv1a(const void* data, size_t n, uint64_t hash) {
  const auto* p = static_cast<const uint8_t*>(data);
  for (size_t i = 0; i < n; ++i) {
    hash ^= p[i];
    hash *= 0x100000001b3ULL;
  }
  return hash;
}

std::string hash_name(uint64_t hash) {
  char buf[17];
  std::snprintf(buf, sizeof buf, "%016llx", static_cast<unsigned long long>(hash));
  return buf;
}

std::optional<uint64_t> parse_hash_name(const std::string& name) {
  if (name.size() != 16 || name.find_first_not_of("0123456789abcdef") != std::string::npos) return std::nullopt;
  return std::stoull(name, nullptr, 16);
}

std::array<uint8_t, kCachedMarkerSize> encode_cached_marker(const CachedMarker& m) {
  std::array<uint8_t, kCachedMarkerSize> out{};
  std::memcpy(out.data(), kMagic, sizeof kMagic);
  put_u64(out.data() + 16, m.hash);
  put_u64(out.data() + 24, m.bytes);
  return out;
}

std::optional<CachedMarker> parse_cached_marker(const uint8_t* data, size_t n) {
  if (n != kCachedMarkerSize || std::memcmp(data, kMagic, sizeof kMagic) != 0) return std::nullopt;
  return CachedMarker{get_u64(data + 16), get_u64(data + 24)};
}

Result<CacheListing> read_cache_listing(const std::string& path) {
  std::ifstream in(path);
  if (!in) return Status::not_found(path + ": cannot read the worker's cache listing");
  CacheListing out;
  std::string name;
  uint64_t bytes = 0;
  int line = 0;
  while (in >> name >> bytes) {
    ++line;
    auto h = parse_hash_name(name);
    if (!h) return Status::invalid_argument(path + ":" + std::to_string(line) + ": '" + name + "' is not a cache entry name");
    out[*h] = bytes;
  }
  if (!in.eof()) return Status::invalid_argument(path + ":" + std::to_string(line + 1) + ": expected 'HASH BYTES'");
  return out;
}

Status write_cache_listing(const std::string& path, const CacheListing& listing) {
  std::ofstream out(path, std::ios::trunc);
  for (const auto& [hash, bytes] : listing) out << hash_name(hash) << ' ' << bytes << '\n';
  out.close();
  if (!out) return Status::unavailable(path + ": cannot write the worker's cache listing");
  return Status::ok();
}

}  // namespace tandem
