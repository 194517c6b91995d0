// Little-endian integers in the byte formats tandem sends to its workers (the markers of
// link/protocol.h), whatever the host's byte order.
#pragma once

#include <cstdint>

namespace tandem {

// Writes the low `n` bytes of `v` at `p`, least significant first.
inline void put_le(uint8_t* p, uint64_t v, int n) {
  for (int i = 0; i < n; ++i) p[i] = static_cast<uint8_t>(v >> (8 * i));
}

// Reads `n` bytes at `p`, least significant first.
inline uint64_t get_le(const uint8_t* p, int n) {
  uint64_t v = 0;
  for (int i = n - 1; i >= 0; --i) v = (v << 8) | p[i];
  return v;
}

}  // namespace tandem
