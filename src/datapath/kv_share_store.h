// The worker's side of the prompt cache's shares (datapath/kv_shares.h): the KV rows of saved
// sequence states, kept in this process's memory under the head's keys.
//
// The RPC child's first hooks (datapath/interpose.h, through datapath/rpc_child_session.h) take the
// head's `tandem-kvshare1` markers (link/protocol.h) out of SET_TENSOR data: a save copies a region
// of a KV tensor from the device into the share, a restore copies it back, a drop frees the share,
// and a query makes the next 32-byte GET_TENSOR answer whether the share is whole. Nothing here can
// fail a command (ggml's server has no way to): a save this process cannot hold, for want of
// memory, leaves the share marked as not held, and a restore it cannot carry out is counted as a
// fault; the head's queries see both, and the head then evaluates the prompt instead. A spill
// writes a share to the spill folder and frees its memory; its next restore reads it back. The
// shares, and their files, go with the head's session.
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <unordered_map>
#include <vector>

#include "common/status.h"
#include "link/protocol.h"

struct ggml_tensor;

namespace tandem::datapath {

class InputWrites;

struct KvShareStoreStats {
  uint64_t shares = 0, bytes = 0, disk_bytes = 0;  // held now: shares, and their bytes in memory and spilled
  // Since start; refused: shares not kept (no memory, or a spill that could not be written).
  uint64_t saved_bytes = 0, restored_bytes = 0, faults = 0, refused = 0, spills = 0;
};

class ShareStore {
 public:
  // Spills into `spill_dir` ("" = none: a spilled share is dropped), which open() creates and
  // empties of an earlier process's files. `writes`: the child's queued input writes, which a save
  // or restore waits for (the rows a queued write still changes).
  static Result<std::unique_ptr<ShareStore>> open(const std::string& spill_dir, InputWrites& writes);
  ~ShareStore();
  ShareStore(const ShareStore&) = delete;
  ShareStore& operator=(const ShareStore&) = delete;

  // The first hooks: a marker taken out of a tensor set, the answer to a query as a tensor get.
  // True when it was one.
  bool on_set(ggml_tensor* tensor, const void* data, size_t offset, size_t size);
  bool on_get(const ggml_tensor* tensor, void* data, size_t offset, size_t size);

  KvShareStoreStats stats();
  // The head session whose shares this process holds (0: none yet). Async-signal-safe.
  uint64_t session() const { return session_.load(); }
  // Frees every share if they still belong to `session`; returns what was freed (shares and bytes).
  KvShareStoreStats release(uint64_t session);

 private:
  struct Share {
    std::unordered_map<const void*, std::vector<uint8_t>> streams;  // by the KV tensor's device address
    uint64_t bytes = 0;                                             // what the saves put in, in memory or not
    uint32_t faults = 0;
    bool refused = false;  // a save it could not hold, or a spill it could not write: not whole
    bool spilled = false;  // the streams are in the spill file, not in memory
  };
  ShareStore(std::string spill_dir, InputWrites& writes) : spill_dir_(std::move(spill_dir)), writes_(writes) {}

  std::string spill_path(uint64_t key) const;
  void free_share(uint64_t key, Share& s);
  void drop_all_locked();
  void refuse(uint64_t key, Share& s);
  bool write_spill(uint64_t key, Share& s);
  bool read_spill(uint64_t key, Share& s);
  void save(uint64_t key, const ggml_tensor* tensor, const link::KvShareMarker& m);
  void restore(uint64_t key, ggml_tensor* tensor, const link::KvShareMarker& m);
  void spill(uint64_t key);

  const std::string spill_dir_;  // "" = none
  InputWrites& writes_;
  std::mutex mutex_;
  std::unordered_map<uint64_t, Share> shares_;  // guarded by mutex_
  std::atomic<uint64_t> session_{0};
  uint64_t bytes_ = 0, disk_bytes_ = 0;        // guarded by mutex_: the shares' bytes in memory, and in spill files
  std::optional<link::KvShareAnswer> answer_;  // guarded by mutex_: for the next 32-byte read
  KvShareStoreStats totals_;                   // guarded by mutex_: the since-start counts
  bool told_no_spill_ = false;                 // guarded by mutex_
};

}  // namespace tandem::datapath
