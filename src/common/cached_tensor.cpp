#include "common/cached_tensor.h"

#include <cstdio>
#include <cstring>
#include <fstream>

namespace tandem {

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
    if (!h)
      return Status::invalid_argument(path + ":" + std::to_string(line) + ": '" + name + "' is not a cache entry name");
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
