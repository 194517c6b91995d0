#include "datapath/input_reuse.h"

#include <algorithm>
#include <cstring>

#include "common/le_bytes.h"

namespace tandem::datapath {

using link::kReuseSlots;
using link::ReuseOp;

uint64_t input_slot_bytes(uint64_t n_embd, uint64_t tokens, uint64_t kv_per_stream) {
  const uint64_t f32 = 4;
  return std::min<uint64_t>(kInputSlotBytes, tokens * n_embd * f32 + 3 * kv_per_stream * tokens * f32 + (256u << 10));
}

ReuseTable::ReuseTable(uint64_t session, uint64_t budget) : session_(session), budget_(budget), slots_(kReuseSlots) {}

std::optional<ReuseTable::Route> ReuseTable::route(const void* data, size_t size, const Identity* identity) {
  if (size < kReuseMinBytes || size > budget_ / 2) return std::nullopt;
  ++clock_;
  int hit = -1;
  if (identity != nullptr) {
    for (size_t i = 0; i < slots_.size() && hit < 0; ++i) {
      const Slot& s = slots_[i];
      if (s.used && s.bytes.size() == size && s.identity == *identity) hit = static_cast<int>(i);
    }
    if (hit >= 0) ++identified_;
  }
  const bool identified = hit >= 0;
  // The slot kept from the same address is the likely match; any slot of that size may be one.
  for (int pass = 0; pass < 2 && hit < 0; ++pass) {
    for (size_t i = 0; i < slots_.size() && hit < 0; ++i) {
      const Slot& s = slots_[i];
      if (!s.used || s.bytes.size() != size || (s.source == data) != (pass == 0)) continue;
      if (std::memcmp(s.bytes.data(), data, size) == 0) hit = static_cast<int>(i);
    }
  }
  Route r;
  r.marker.session = session_;
  r.marker.bytes = size;
  if (hit >= 0) {
    Slot& s = slots_[hit];
    s.last_use = clock_;
    s.source = data;
    if (identity != nullptr) s.identity = *identity;
    ++copies_;
    saved_ += size;
    r.identified = identified;
    r.marker.op = ReuseOp::copy;
    r.marker.slot = static_cast<uint32_t>(hit);
    return r;
  }
  // An empty slot if any, else the least recently used; `used_only` skips empty ones.
  auto lru = [&](int except, bool used_only) {
    int best = -1;
    for (size_t i = 0; i < slots_.size(); ++i) {
      if (static_cast<int>(i) == except) continue;
      if (!slots_[i].used) {
        if (used_only) continue;
        return static_cast<int>(i);
      }
      if (best < 0 || slots_[i].last_use < slots_[best].last_use) best = static_cast<int>(i);
    }
    return best;
  };
  const int victim = lru(-1, false);
  Slot& v = slots_[victim];
  held_ -= v.bytes.size();
  uint32_t drop = 0;
  // size <= budget / 2, so while this holds some other slot still holds bytes.
  while (held_ + size > budget_) {
    const int old = lru(victim, true);
    Slot& o = slots_[old];
    held_ -= o.bytes.size();
    o = Slot{};
    drop |= 1u << old;
  }
  const auto* p = static_cast<const uint8_t*>(data);
  v.bytes.assign(p, p + size);
  v.source = data;
  v.identity = identity != nullptr ? *identity : Identity{};
  v.last_use = clock_;
  v.used = true;
  held_ += size;
  r.send_data = true;
  r.marker.op = ReuseOp::keep;
  r.marker.slot = static_cast<uint32_t>(victim);
  r.marker.drop = drop;
  return r;
}

}  // namespace tandem::datapath
