// The head's side of the prompt cache's shares: a saved sequence state whose KV lies partly in
// the workers' KV caches keeps those parts on the workers.
//
// llama.cpp saves one sequence (llama_state_seq_get_data) by reading every layer's KV rows with
// `ggml_backend_tensor_get`, and restores it with `ggml_backend_tensor_set`: over RPC both carry a
// worker's KV over the link, for an 8k-token prompt of MiniMax-M3 hundreds of MiB each way. While
// KvShares::save runs its caller's serialisation, each such read of a tandem worker's KV into the
// state's buffer, on the saving thread, is sent as a `save` marker (link/protocol.h) instead: the
// worker copies the rows into its own memory under the state's key (datapath/kv_share_store.h),
// and the head's copy of the state leaves a hole there. KvShares::restore turns the writes back
// into `restore` markers. What crosses the link per save or restore is one marker per region and
// one query per worker, whatever the prompt's length.
//
// A KvShares owns all of this: its workers, its session's id, the save or restore in progress and
// its counts. It is the process's first hooks (datapath/interpose.h) while it lives, because ggml's
// tensor reads and writes carry no context; the prompt cache reaches it only through its own
// interface (engine/prompt_cache.h's StateShares, engine/worker_shares.h).
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <mutex>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "common/status.h"
#include "datapath/interpose.h"

struct ggml_tensor;

namespace tandem::link {
struct KvShareMarker;
struct KvShareAnswer;
enum class KvShareOp : uint32_t;
}  // namespace tandem::link

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

// What a KvShares did since it was made (tests and the benchmark).
struct KvShareStats {
  uint64_t saves = 0, restores = 0, drops = 0;  // states, not markers
  uint64_t markers = 0;                         // sent, queries included
  uint64_t kept_bytes = 0;                      // KV bytes saved into shares instead of read
  uint64_t restored_bytes = 0;                  // KV bytes restored from shares instead of written
};

// Shares on the tandem workers of this build at `endpoints` ("host:port"; never a stock RPC server,
// which would store a marker as data) while it lives. Installs itself as the process's first hooks;
// where others hold them (an RPC child's session: not in an engine) it does nothing, and states move
// whole, as llama.cpp does. Save and restore: one at a time, from any one thread each.
class KvShares final : public FirstHooks {
 public:
  explicit KvShares(std::set<std::string> endpoints);
  ~KvShares();
  KvShares(const KvShares&) = delete;
  KvShares& operator=(const KvShares&) = delete;

  // What a save left on the workers.
  struct Saved {
    std::vector<StateHole> holes;
    std::vector<WorkerShare> shares;
  };
  // Runs `write`, which has llama.cpp write a state into the `size` bytes at `base`, with the
  // worker KV it reads into them kept on the workers under `key` (`out`). Then asks every worker
  // that got a share whether it kept all of it (a worker short of memory keeps nothing). An error
  // names the worker; the caller then drops the key (drop) and keeps nothing.
  Status save(uint64_t key, const uint8_t* base, size_t size, const std::function<void()>& write, Saved* out);

  // Restores a state saved under `key` with `shares`: checks that every worker still holds its
  // share whole (else an error, and `read` does not run), runs `read`, which has llama.cpp read the
  // state from the `size` bytes at `base`, with its writes of the shares' regions sent as restore
  // markers, then checks that every worker carried out every restore and was asked for its whole
  // share.
  Status restore(uint64_t key, const std::vector<WorkerShare>& shares, const uint8_t* base, size_t size,
                 const std::function<void()>& read);

  // Frees the workers' shares of `key`.
  void drop(uint64_t key, const std::vector<WorkerShare>& shares);
  // Moves the workers' shares of `key` to their disks (a worker without a spill folder drops its
  // share; the restore's check then finds it gone).
  void spill(uint64_t key, const std::vector<WorkerShare>& shares);

  KvShareStats stats() const;

  // FirstHooks (datapath/interpose.h), for the interposers: reads and writes of a worker's KV
  // inside the buffer of the save or restore in progress, on its thread.
  bool get(const ggml_tensor* tensor, void* data, size_t offset, size_t size) override;
  bool set(ggml_tensor* tensor, const void* data, size_t offset, size_t size) override;

 private:
  // The save or restore in progress.
  struct Op {
    bool save = false;
    uint64_t key = 0;
    const uint8_t* base = nullptr;
    size_t size = 0;
    std::vector<StateHole> holes;                           // a save's
    std::vector<WorkerShare> shares;                        // a save's as found; a restore's as given
    std::vector<uint64_t> restored;                         // a restore's, per share
    std::vector<std::pair<const void*, uint64_t>> streams;  // a tensor's data, the bytes moved from it
  };
  // The operation whose buffer holds [data, data + size), when the calling thread runs it.
  Op* op_for(const void* data, size_t size) const;
  // The endpoint of this object's worker whose memory holds `tensor`; "" for anything else.
  std::string worker_of(const ggml_tensor* tensor) const;
  void send(const ggml_tensor* tensor, link::KvShareMarker m);
  Result<link::KvShareAnswer> query(uint64_t key, const WorkerShare& share);
  Status held_whole(uint64_t key, const WorkerShare& share, const std::string& what);
  void send_to_each(link::KvShareOp op, uint64_t key, const std::vector<WorkerShare>& shares);

  const std::set<std::string> endpoints_;
  const uint64_t session_;
  bool installed_ = false;
  std::mutex ops_;  // one save or restore at a time
  // The one in progress, and its thread: the hooks of other threads read only the thread.
  std::atomic<std::thread::id> op_thread_{};
  Op* op_ = nullptr;
  std::atomic<uint64_t> saves_{0}, restores_{0}, drops_{0}, markers_{0}, kept_{0}, restored_{0};
};

}  // namespace tandem::datapath
