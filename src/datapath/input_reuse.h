// Step inputs that the head writes to a worker several times, sent over the link once.
//
// MiniMax-M3's sparse attention reads its per-step inputs (the position mask, the block bias, the
// position-to-cell map) through a reshaped view in every layer, and ggml's scheduler copies each
// layer's view into the worker's compute buffer on its own: the same bytes once per worker layer.
// For a 512-token prompt chunk the position mask is 512 × positions × 4 bytes, 1 MiB at 512
// positions and 64 MiB at 32k, and 30 worker layers send it 30 times. With input reuse the head
// (datapath/rpc_writes.h) sends such bytes once, followed by a "keep" marker: the worker's RPC child
// (datapath/input_writes.h) copies what was just written into a slot of its own device memory.
// Every later write of the same bytes goes as a "copy" marker, and the child copies the slot into
// the destination on the device. A marker travels as the data of an ordinary SET_TENSOR to the
// destination, so it stays in order with everything else on the connection. Only a tandem worker
// of this build may receive one (docs/protocol.md): a stock RPC server would store the marker.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <optional>
#include <vector>

#include "link/protocol.h"

namespace tandem::datapath {

// Writes smaller than this are sent as they are: a marker saves little and costs a device copy.
constexpr size_t kReuseMinBytes = 16 * 1024;
// Bytes the slots of one worker connection hold at most, on the head (for comparison) and on the
// worker's device; one input may take at most half. Covers a 512-token chunk's position mask up to
// 64k positions.
constexpr uint64_t kReuseBudget = 256ull << 20;
// The most the input slots (datapath/rpc_writes.h, datapath/local_inputs.h) take on one device.
constexpr uint64_t kInputSlotBytes = 64ull << 20;
// Bytes of the input slots on one device: one copy of each of a step's inputs, room for the hidden
// state (`tokens` rows of `n_embd` f32), three masks over `kv_per_stream` cells and 256 KiB of small
// inputs, at most kInputSlotBytes. The planner counts them on every device that reads a step's
// inputs other than the head's CPU; inputs beyond them are copied as without slots.
uint64_t input_slot_bytes(uint64_t n_embd, uint64_t tokens, uint64_t kv_per_stream);

// The head's view of one worker connection's slots: which bytes each holds (kept here too, so that
// a match is exact, not a hash). Not thread-safe.
class ReuseTable {
 public:
  explicit ReuseTable(uint64_t session, uint64_t budget = kReuseBudget);

  // What the caller knows the bytes to be, when it knows: the same tensor (the viewed tensor and
  // the offset into it) at the same address, within one run of the scheduler, in which nothing
  // rewrites its inputs. Two writes with equal identities carry equal bytes without comparing.
  struct Identity {
    const void* tensor = nullptr;
    size_t offset = 0;
    const void* data = nullptr;
    uint64_t epoch = 0;
    bool operator==(const Identity& o) const {
      return tensor == o.tensor && offset == o.offset && data == o.data && epoch == o.epoch;
    }
  };

  struct Route {
    bool send_data = false;   // write the bytes first (then `marker` keeps them), or only `marker`
    bool identified = false;  // a copy recognised by its identity, without comparing bytes
    link::ReuseMarker marker;
  };
  // How to send a write of `size` bytes from `data`: nullopt for a plain write (too small, or too
  // large for the slots). Otherwise the table assumes the caller sends exactly what it says.
  // `identity` (may be null) lets a repeat be recognised without comparing the bytes.
  std::optional<Route> route(const void* data, size_t size, const Identity* identity = nullptr);

  uint64_t session() const { return session_; }
  uint64_t copies() const { return copies_; }          // writes sent as copy markers
  uint64_t identified() const { return identified_; }  // ... of which recognised by identity
  uint64_t bytes_not_sent() const { return saved_; }   // their bytes
  uint64_t held_bytes() const { return held_; }

 private:
  struct Slot {
    std::vector<uint8_t> bytes;
    const void* source = nullptr;  // where the kept bytes came from: checked first
    Identity identity;             // the last identity seen with these bytes
    uint64_t last_use = 0;
    bool used = false;
  };
  uint64_t session_, budget_;
  std::vector<Slot> slots_;
  uint64_t clock_ = 0, held_ = 0, copies_ = 0, identified_ = 0, saved_ = 0;
};

// The bytes a scheduler copy reads, as a key within one run (ReuseTable::Identity without the run,
// and with the length): equal keys in one run are equal bytes.
struct CopyKey {
  const void* tensor = nullptr;
  uint64_t offset = 0;
  const void* data = nullptr;
  uint64_t bytes = 0;
  bool operator==(const CopyKey& o) const {
    return tensor == o.tensor && offset == o.offset && data == o.data && bytes == o.bytes;
  }
};
struct CopyKeyHash {
  size_t operator()(const CopyKey& k) const {
    return std::hash<const void*>()(k.data) ^ (std::hash<uint64_t>()(k.bytes) * 31) ^
           (std::hash<uint64_t>()(k.offset) * 131);
  }
};

}  // namespace tandem::datapath
