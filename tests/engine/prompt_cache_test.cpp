// The prompt cache's index: the longest shared prefix wins, states that a longer one supersedes
// are replaced, the byte bound holds by evicting the least recently used, and the counts say so.
#include "engine/prompt_cache.h"

#include <gtest/gtest.h>

namespace tandem::engine {
namespace {

std::vector<int32_t> seq(int32_t first, size_t n) {
  std::vector<int32_t> t(n);
  for (size_t i = 0; i < n; ++i) t[i] = first + static_cast<int32_t>(i);
  return t;
}

// A state of `n` bytes on the head, named `key`, with `on_workers` of them kept by the workers
// named there (endpoint, bytes).
SavedState state(uint64_t n, uint64_t key, std::vector<std::pair<std::string, uint64_t>> on_workers = {}) {
  SavedState s;
  s.key = key;
  s.size = n;
  for (const auto& [endpoint, bytes] : on_workers) {
    s.holes.push_back({s.size, bytes});
    s.size += bytes;
    s.shares.push_back({endpoint, bytes, nullptr});
  }
  return s;
}

TEST(PromptCache, TheLongestSharedPrefixIsTakenAndLeavesTheCache) {
  PromptCache c(1000);
  c.put(seq(0, 10), state(100, 1));
  c.put(seq(100, 20), state(100, 2));
  std::vector<int32_t> prompt = seq(100, 12);
  prompt.push_back(-1);  // leaves the cached one after 12 tokens
  PromptCache::Taken t;
  ASSERT_TRUE(c.take(prompt, 0, &t));
  EXPECT_EQ(t.prefix, 12u);
  EXPECT_EQ(t.tokens, seq(100, 20));
  EXPECT_EQ(t.state.key, 2u);
  EXPECT_EQ(c.stats().entries, 1u);
  EXPECT_EQ(c.stats().bytes, 100u);
  EXPECT_EQ(c.stats().hits, 1u);
  // Not longer than what the slots already hold: a miss, and nothing leaves.
  EXPECT_FALSE(c.take(seq(0, 10), 10, &t));
  EXPECT_EQ(c.stats().misses, 1u);
  EXPECT_EQ(c.stats().entries, 1u);
  EXPECT_FALSE(c.take(seq(500, 5), 0, &t));
  EXPECT_EQ(c.stats().misses, 2u);
}

TEST(PromptCache, ALongerStateOfTheSameConversationReplacesTheShorter) {
  PromptCache c(1000);
  c.put(seq(0, 10), state(100, 1));
  c.put(seq(0, 30), state(300, 2));  // the same conversation, a turn later
  EXPECT_EQ(c.stats().entries, 1u);
  EXPECT_EQ(c.stats().bytes, 300u);
  c.put(seq(0, 20), state(200, 3));  // a shorter branch is another state
  EXPECT_EQ(c.stats().entries, 2u);
  EXPECT_EQ(c.stats().evictions, 0u);
}

TEST(PromptCache, TheBoundHoldsByEvictingTheLeastRecentlyUsed) {
  PromptCache c(250);
  c.put(seq(0, 10), state(100, 1));
  c.put(seq(100, 10), state(100, 2));
  c.put(seq(200, 10), state(100, 3));  // the first goes
  EXPECT_EQ(c.stats().bytes, 200u);
  EXPECT_EQ(c.stats().evictions, 1u);
  PromptCache::Taken t;
  EXPECT_FALSE(c.take(seq(0, 10), 0, &t));
  ASSERT_TRUE(c.take(seq(100, 10), 0, &t));
  c.put(t.tokens, std::move(t.state));  // used again: now the most recent
  c.put(seq(300, 10), state(100, 4));
  EXPECT_TRUE(c.take(seq(100, 10), 0, &t)) << "the recently used state was evicted";
  EXPECT_FALSE(c.take(seq(200, 10), 0, &t));
  // A state larger than the whole bound is not kept, and nothing else goes for it.
  c.put(seq(400, 10), state(251, 5));
  EXPECT_EQ(c.stats().entries, 1u);
}

TEST(PromptCache, ZeroBytesTurnsItOff) {
  PromptCache c(0);
  EXPECT_FALSE(c.enabled());
  c.put(seq(0, 10), state(1, 1));
  PromptCache::Taken t;
  EXPECT_FALSE(c.take(seq(0, 10), 0, &t));
  EXPECT_EQ(c.stats().entries, 0u);
  EXPECT_EQ(c.stats().misses, 0u);
}

// Each worker's shares count against the bound on that worker, and only there: a state that
// would take one worker past it evicts the least recently used, and every state that leaves the
// cache but through take() reaches the drop callback, so that its workers free their shares.
TEST(PromptCache, EachWorkersSharesAreBoundedOnThatWorkerAndDroppedWithTheirState) {
  std::vector<uint64_t> dropped;
  PromptCache c(250, [&](SavedState& s) { dropped.push_back(s.key); });
  c.put(seq(0, 10), state(50, 1, {{"b:1", 100}}));
  c.put(seq(100, 10), state(50, 2, {{"c:1", 200}}));
  EXPECT_EQ(c.stats().bytes, 100u);
  EXPECT_EQ(c.stats().worker_bytes, 300u) << "each worker within its own bound";
  EXPECT_EQ(c.stats().per_worker.at("b:1"), 100u);
  EXPECT_EQ(c.stats().per_worker.at("c:1"), 200u);
  EXPECT_TRUE(dropped.empty());
  c.put(seq(200, 10), state(50, 3, {{"b:1", 100}}));  // b holds 200 of 250: nothing goes
  EXPECT_EQ(c.stats().entries, 3u);
  // c would hold 300: the least recently used go until it fits, whoever holds them (b's first).
  c.put(seq(300, 10), state(50, 4, {{"c:1", 100}}));
  EXPECT_EQ(dropped, std::vector<uint64_t>({1, 2}));
  c.put(seq(400, 10), state(50, 5, {{"c:1", 100}}));
  EXPECT_EQ(dropped, std::vector<uint64_t>({1, 2})) << "c holds 200 of 250";
  EXPECT_EQ(c.stats().per_worker.count("b:1"), 1u);
  EXPECT_EQ(c.stats().per_worker.at("c:1"), 200u);
  EXPECT_EQ(c.stats().evictions, 2u);
  // A state one worker could never hold is not kept; its shares are dropped at once.
  c.put(seq(500, 10), state(10, 6, {{"b:1", 251}}));
  EXPECT_EQ(dropped.back(), 6u);
  // Taken states are the caller's: they do not reach the callback.
  PromptCache::Taken t;
  ASSERT_TRUE(c.take(seq(400, 10), 0, &t));
  EXPECT_EQ(t.state.key, 5u);
  EXPECT_EQ(t.state.worker_bytes(), 100u);
  EXPECT_EQ(dropped.back(), 6u);
  // A longer state of a conversation replaces the shorter one, whose shares are dropped.
  c.put(seq(200, 20), state(50, 7, {{"b:1", 10}}));
  EXPECT_EQ(dropped.back(), 3u);
  EXPECT_EQ(c.stats().saves, 6u) << "the state not kept is not counted";
  EXPECT_EQ(c.stats().saved_worker_bytes, 100u + 200 + 100 + 100 + 100 + 10);
}

TEST(PromptCache, WhatIsStillHeldIsDroppedWhenTheCacheGoes) {
  std::vector<uint64_t> dropped;
  {
    PromptCache c(1000, [&](SavedState& s) { dropped.push_back(s.key); });
    c.put(seq(0, 10), state(50, 1, {{"b:1", 100}}));
    c.put(seq(100, 10), state(50, 2));
  }
  EXPECT_EQ(dropped.size(), 2u);
}

}  // namespace
}  // namespace tandem::engine
