// The head's side of the prompt cache's shares: a saved sequence state whose KV lies partly in
// the workers' KV caches keeps those parts on the workers.
//
// llama.cpp saves one sequence (llama_state_seq_get_data) by reading every layer's KV rows with
// `ggml_backend_tensor_get`, and restores it with `ggml_backend_tensor_set`: over RPC both carry a
// worker's KV over the link, for an 8k-token prompt of MiniMax-M3 hundreds of MiB each way. While a
// ShareSave lives on a thread, each such read of a tandem worker's KV is sent as a `save` marker
// (link/protocol.h) instead: the worker copies the rows into its own memory under the state's key
// (datapath/kv_share_store.h), and the head's copy of the state leaves a hole there. A ShareRestore
// turns the writes back into `restore` markers. What crosses the link per save or restore is one
// marker per region and one query per worker, whatever the prompt's length.
#pragma once

#include <cstddef>
#include <cstdint>
#include <set>
#include <string>
#include <vector>

#include "common/status.h"

struct ggml_tensor;

namespace tandem::datapath {

// Bytes [at, at + bytes) of a state, as llama.cpp lays it out, that a worker keeps.
struct StateHole {
  uint64_t at = 0, bytes = 0;
};

// What one worker keeps of a state.
struct WorkerShare {
  std::string endpoint;                 // "host:port" of its RPC server
  uint64_t bytes = 0;                   // the share's size there
  const ggml_tensor* anchor = nullptr;  // a tensor of that worker's, to address drops and queries
};

// Enables shares on the tandem workers of this build at `endpoints` ("host:port"; never a stock
// RPC server, which would store a marker as data) for the process while it lives; at most one
// lives at a time. Without one, states move whole, as llama.cpp does.
class KvShares {
 public:
  explicit KvShares(std::set<std::string> endpoints);
  ~KvShares();
  KvShares(const KvShares&) = delete;
  KvShares& operator=(const KvShares&) = delete;

 private:
  bool live_ = false, installed_ = false;
};

// One state's save, on this thread, into the `size` bytes at `base` that llama.cpp writes it to.
class ShareSave {
 public:
  ShareSave(uint64_t key, const uint8_t* base, size_t size);
  ~ShareSave();
  ShareSave(const ShareSave&) = delete;
  ShareSave& operator=(const ShareSave&) = delete;

  // After llama.cpp wrote the state: asks every worker that got a share whether it kept all of it
  // (a worker short of memory keeps nothing). An error names the worker; the caller then drops the
  // key (drop_shares) and keeps nothing.
  Status finish();
  const std::vector<StateHole>& holes() const { return holes_; }
  const std::vector<WorkerShare>& shares() const { return shares_; }

 private:
  friend struct ShareHooks;
  uint64_t key_;
  const uint8_t* base_;
  size_t size_;
  std::vector<StateHole> holes_;
  std::vector<WorkerShare> shares_;
  std::vector<std::pair<const void*, uint64_t>> streams_;  // a tensor's data, the bytes saved from it
};

// One state's restore, on this thread, from the `size` bytes at `base` that llama.cpp reads.
class ShareRestore {
 public:
  ShareRestore(uint64_t key, const std::vector<WorkerShare>& shares, const uint8_t* base, size_t size);
  ~ShareRestore();
  ShareRestore(const ShareRestore&) = delete;
  ShareRestore& operator=(const ShareRestore&) = delete;

  // Before llama.cpp reads: every worker still holds its share, whole.
  Status check();
  // After: every worker carried out every restore, and was asked for its whole share.
  Status finish();

 private:
  friend struct ShareHooks;
  uint64_t key_;
  std::vector<WorkerShare> shares_;
  std::vector<uint64_t> restored_;  // per share
  const uint8_t* base_;
  size_t size_;
  std::vector<std::pair<const void*, uint64_t>> streams_;
};

// Frees the workers' shares of `key`.
void drop_shares(uint64_t key, const std::vector<WorkerShare>& shares);
// Moves the workers' shares of `key` to their disks (a worker without a spill folder drops its
// share; the restore's check then finds it gone).
void spill_shares(uint64_t key, const std::vector<WorkerShare>& shares);

// Since the process started (tests and the benchmark).
struct KvShareStats {
  uint64_t saves = 0, restores = 0, drops = 0;  // states, not markers
  uint64_t markers = 0;                         // sent, queries included
  uint64_t kept_bytes = 0;                      // KV bytes saved into shares instead of read
  uint64_t restored_bytes = 0;                  // KV bytes restored from shares instead of written
};
KvShareStats kv_share_stats();

}  // namespace tandem::datapath
