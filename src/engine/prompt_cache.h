// The engine's prompt cache: sequence states of prompts that left their slot, kept in host
// memory so that a returning conversation restores its prefix instead of evaluating it again.
// An index of token sequences to opaque state bytes, bounded in bytes, least recently used out
// first. Private to the engine; the scheduler's decode thread is its only user.
#pragma once

#include <cstddef>
#include <cstdint>
#include <list>
#include <vector>

namespace tandem::engine {

struct PromptCacheStats {
  uint64_t bytes = 0, max_bytes = 0;  // held now, the bound
  uint64_t entries = 0;
  uint64_t hits = 0, misses = 0;  // lookups that found a longer prefix than the slots hold, or not
  uint64_t evictions = 0;         // states dropped to stay within the bound
  uint64_t restored_tokens = 0;   // prompt tokens restored instead of evaluated, since start
};

class PromptCache {
 public:
  explicit PromptCache(uint64_t max_bytes) : max_bytes_(max_bytes) {}

  bool enabled() const { return max_bytes_ > 0; }

  // Keeps `state`, the state of a sequence holding `tokens`. A state whose tokens are a prefix of
  // these, or equal, is replaced (this one knows more); one larger than the whole bound is not kept.
  // Least recently used states are evicted until the bound holds.
  void put(std::vector<int32_t> tokens, std::vector<uint8_t> state);

  // The state sharing the longest prefix with `prompt`, if that prefix is longer than `at_least`
  // tokens: removed from the cache and returned (its slot saves it again when it is taken over).
  // Counts a hit or a miss.
  struct Taken {
    std::vector<int32_t> tokens;
    std::vector<uint8_t> state;
    size_t prefix = 0;  // tokens in common with the prompt
  };
  bool take(const std::vector<int32_t>& prompt, size_t at_least, Taken* out);

  // After a restore: `n` prompt tokens were not evaluated.
  void count_restored(size_t n) { stats_.restored_tokens += n; }

  PromptCacheStats stats() const;

 private:
  struct Entry {
    std::vector<int32_t> tokens;
    std::vector<uint8_t> state;
  };
  void evict_to(uint64_t bytes);

  const uint64_t max_bytes_;
  std::list<Entry> entries_;  // most recently used first
  PromptCacheStats stats_;
};

}  // namespace tandem::engine
