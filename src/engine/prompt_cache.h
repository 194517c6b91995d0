// The engine's prompt cache: sequence states of prompts that left their slot, kept so that a
// returning conversation restores its prefix instead of evaluating it again. An index of token
// sequences to saved states, least recently used out first, bounded in bytes on every node: the
// head's part of the states in the head's memory, and each worker's part in that worker's. The
// cache reaches the nodes that keep parts of its states only through its own interface,
// StateShares (the head's data path implements it: engine/worker_shares.h). Private to the engine;
// the scheduler's decode thread is its only user.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <list>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "common/status.h"
#include "datapath/kv_shares.h"  // StateHole, WorkerShare: what a state's parts are
#include "engine/protocol.h"

namespace tandem::engine {

// Anonymous memory of a whole state's size. llama.cpp writes and reads a state through one
// contiguous buffer; the pages of its holes (what the workers keep) are never touched, so they
// cost no memory. Null data() when the mapping failed.
class StateBuffer {
 public:
  explicit StateBuffer(size_t size);
  ~StateBuffer();
  StateBuffer(const StateBuffer&) = delete;
  StateBuffer& operator=(const StateBuffer&) = delete;
  uint8_t* data() const { return data_; }
  size_t size() const { return size_; }

 private:
  size_t size_;
  uint8_t* data_;
};

// One sequence's state as llama.cpp serialises it; the regions in the holes are on the workers.
struct SavedState {
  uint64_t key = 0;                     // names the workers' shares
  uint64_t size = 0;                    // the whole state's bytes, holes included
  std::unique_ptr<StateBuffer> buffer;  // the state, holes untouched; null in tests of the index
  std::vector<datapath::StateHole> holes;
  std::vector<datapath::WorkerShare> shares;
  uint64_t head_bytes() const;    // what the head holds: the state less its holes
  uint64_t worker_bytes() const;  // what the workers hold, together
};

// Where the parts of the cache's states that other nodes keep are made, restored, dropped and
// spilled: the prompt cache's one way to the data path, owned here. The head's data path implements
// it over the tandem workers (engine/worker_shares.h, datapath/kv_shares.h); WholeStates, where
// there is none, keeps every state whole in the head's memory. The decode thread is its only caller.
class StateShares {
 public:
  virtual ~StateShares() = default;
  // Runs `write`, which has llama.cpp write a state into `state.buffer` (`state.size` bytes): the
  // regions other nodes keep stay there under `state.key`, and are listed in `state.holes` and
  // `state.shares`, also on error. An error names a node that did not keep all of its part; the
  // caller then drops the state's parts (drop) and keeps nothing.
  virtual Status save(SavedState& state, const std::function<void()>& write) = 0;
  // Runs `read`, which has llama.cpp read `state` from its buffer, the nodes' parts from where they
  // keep them. Errors: a node no longer holds its part whole (`read` then does not run), or did not
  // restore all of it. The parts stay where they are; the caller drops them after.
  virtual Status restore(const SavedState& state, const std::function<void()>& read) = 0;
  // Frees what other nodes keep of `state`.
  virtual void drop(const SavedState& state) = 0;
  // `state` goes to the disk tier: the nodes move their parts to their disks (one without a disk
  // tier drops its part; the restore then finds it gone).
  virtual void spill(const SavedState& state) = 0;
};

// Every state whole in the head's memory: llama.cpp reads and writes all of it, over the link
// where the KV lies on RPC servers.
class WholeStates final : public StateShares {
 public:
  Status save(SavedState&, const std::function<void()>& write) override {
    write();
    return Status::ok();
  }
  Status restore(const SavedState&, const std::function<void()>& read) override {
    read();
    return Status::ok();
  }
  void drop(const SavedState&) override {}
  void spill(const SavedState&) override {}
};

struct PromptCacheOptions {
  uint64_t max_bytes = 0;  // memory on each node; 0: the cache is off
  // A folder for states that memory no longer holds ("" = none: they are dropped), bounded on
  // each node by `disk_max_bytes`. The head writes its part there, each worker its own into its
  // spill folder (datapath/kv_share_store.h). One head per folder: it is emptied at start.
  std::string disk_dir;
  uint64_t disk_max_bytes = 0;
  // The nodes' parts of the states (borrowed: it outlives the cache); null: WholeStates.
  StateShares* shares = nullptr;
};

class PromptCache {
 public:
  // Errors: the disk folder cannot be created.
  static Result<std::unique_ptr<PromptCache>> create(PromptCacheOptions options);
  explicit PromptCache(uint64_t max_bytes, StateShares* shares = nullptr);
  ~PromptCache();
  PromptCache(const PromptCache&) = delete;
  PromptCache& operator=(const PromptCache&) = delete;

  bool enabled() const { return o_.max_bytes > 0; }

  // Keeps `state`, the state of a sequence holding `tokens`, in memory. A state whose tokens are
  // a prefix of these, or equal, is replaced (this one knows more); one larger than the memory
  // bound on some node is not kept. Least recently used states leave memory until every node's
  // bound holds: to disk where there is one, else dropped.
  void put(std::vector<int32_t> tokens, SavedState state);

  // The state sharing the longest prefix with `prompt`, if that prefix is longer than `at_least`
  // tokens: removed from the cache and returned in memory, read back from disk if it was there
  // (its slot saves it again when it is taken over). Counts a hit or a miss; a state on disk that
  // cannot be read is dropped and counts as a failed restore.
  struct Taken {
    std::vector<int32_t> tokens;
    SavedState state;
    size_t prefix = 0;  // tokens in common with the prompt
  };
  bool take(const std::vector<int32_t>& prompt, size_t at_least, Taken* out);

  // Drops every state (their workers' shares and files with them); the counts since start stay.
  void clear();

  // Moves the least recently used state in memory out of it (to disk, or dropped); false when
  // memory holds none.
  bool evict_one();

  // Through what the slots save and restore the states they put and take.
  StateShares& shares() { return *shares_; }
  // A state the cache does not keep (taken and restored, or not; or never put): what other nodes
  // keep of it is freed.
  void discard(const SavedState& state) { shares_->drop(state); }

  // After a restore: `n` prompt tokens were not evaluated; or the restore failed.
  void count_restored(size_t n) { stats_.restored_tokens += n; }
  void count_failed_restore() { ++stats_.failed_restores; }

  PromptCacheStats stats() const;

 private:
  struct Entry {
    std::vector<int32_t> tokens;
    SavedState state;
    bool on_disk = false;  // the head's part in its file, the workers' in theirs
  };
  using Iter = std::list<Entry>::iterator;
  explicit PromptCache(PromptCacheOptions options);
  // What one tier holds on each node: the head's part in the stats' bytes, the workers' per endpoint.
  void account(const SavedState& s, bool on_disk, bool add);
  bool over(const SavedState& extra, bool on_disk) const;
  bool fits_alone(const SavedState& s, uint64_t bound) const;
  void release(Iter it);  // out of the cache, dropped
  bool spill(Entry& e);
  std::string path(const SavedState& s) const;

  const PromptCacheOptions o_;
  WholeStates whole_;
  StateShares* const shares_;  // o_.shares, or whole_
  std::list<Entry> entries_;   // most recently used first
  PromptCacheStats stats_;
};

}  // namespace tandem::engine
