// The engine's prompt cache: sequence states of prompts that left their slot, kept so that a
// returning conversation restores its prefix instead of evaluating it again. An index of token
// sequences to saved states, least recently used out first, bounded in bytes on every node: the
// head's part of the states in the head's memory, and each worker's part (datapath/kv_shares.h) in
// that worker's. Private to the engine; the scheduler's decode thread is its only user.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <list>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "datapath/kv_shares.h"
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

class PromptCache {
 public:
  // `on_drop` gets each state that leaves the cache other than through take(): evicted, replaced,
  // or not kept (the workers' shares go with it).
  explicit PromptCache(uint64_t max_bytes, std::function<void(SavedState&)> on_drop = {})
      : max_bytes_(max_bytes), on_drop_(std::move(on_drop)) {}
  ~PromptCache();
  PromptCache(const PromptCache&) = delete;
  PromptCache& operator=(const PromptCache&) = delete;

  bool enabled() const { return max_bytes_ > 0; }

  // Keeps `state`, the state of a sequence holding `tokens`. A state whose tokens are a prefix of
  // these, or equal, is replaced (this one knows more); one larger than the bound on some node is
  // not kept. Least recently used states are evicted until every node's bound holds.
  void put(std::vector<int32_t> tokens, SavedState state);

  // The state sharing the longest prefix with `prompt`, if that prefix is longer than `at_least`
  // tokens: removed from the cache and returned (its slot saves it again when it is taken over).
  // Counts a hit or a miss.
  struct Taken {
    std::vector<int32_t> tokens;
    SavedState state;
    size_t prefix = 0;  // tokens in common with the prompt
  };
  bool take(const std::vector<int32_t>& prompt, size_t at_least, Taken* out);

  // Drops every state (their workers' shares with them); the counts since start stay.
  void clear();

  // Evicts the least recently used state; false when there is none.
  bool evict_one();

  // After a restore: `n` prompt tokens were not evaluated; or the restore failed.
  void count_restored(size_t n) { stats_.restored_tokens += n; }
  void count_failed_restore() { ++stats_.failed_restores; }

  PromptCacheStats stats() const;

 private:
  struct Entry {
    std::vector<int32_t> tokens;
    SavedState state;
  };
  void account(const SavedState& s, bool add);
  bool over(const SavedState& extra) const;
  void drop(SavedState& s);

  const uint64_t max_bytes_;
  std::function<void(SavedState&)> on_drop_;
  std::list<Entry> entries_;  // most recently used first
  PromptCacheStats stats_;    // per_worker: a worker's endpoint -> its shares' bytes
};

}  // namespace tandem::engine
