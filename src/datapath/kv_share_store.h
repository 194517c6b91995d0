// The worker's side of the prompt cache's shares (datapath/kv_shares.h): the KV rows of saved
// sequence states, kept in this process's memory under the head's keys.
//
// The RPC child's first hooks (datapath/interpose.h) take the head's `tandem-kvshare1` markers
// (link/protocol.h) out of SET_TENSOR data: a save copies a region of a KV tensor from the device
// into the share, a restore copies it back, a drop frees the share, and a query makes the next
// 32-byte GET_TENSOR answer whether the share is whole. Nothing here can fail a command (ggml's
// server has no way to): a save this process cannot hold, for want of memory, leaves the share
// marked as not held, and a restore it cannot carry out is counted as a fault; the head's queries
// see both, and the head then evaluates the prompt instead. A spill writes a share to the spill
// folder and frees its memory; its next restore reads it back. The shares, and their files, go
// with the head's session.
#pragma once

#include <cstdint>
#include <string>

#include "common/status.h"

namespace tandem::datapath {

// Installs the hooks for this process, spilling into `spill_dir` ("" = none: a spilled share is
// dropped), which is created and emptied of an earlier process's files. Errors: this executable
// does not interpose ggml's calls, or the folder cannot be created.
Status install_kv_share_store(const std::string& spill_dir = "");

struct KvShareStoreStats {
  uint64_t shares = 0, bytes = 0, disk_bytes = 0;  // held now: shares, and their bytes in memory and spilled
  // Since start; refused: shares not kept (no memory, or a spill that could not be written).
  uint64_t saved_bytes = 0, restored_bytes = 0, faults = 0, refused = 0, spills = 0;
};
KvShareStoreStats kv_share_store_stats();

// The head session whose shares this process holds (0: none yet). Async-signal-safe.
uint64_t kv_share_session();
// Frees every share if they still belong to `session`; returns what was freed (shares and bytes).
KvShareStoreStats release_kv_shares(uint64_t session);

}  // namespace tandem::datapath
