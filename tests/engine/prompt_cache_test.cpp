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

std::vector<uint8_t> bytes(size_t n, uint8_t v) { return std::vector<uint8_t>(n, v); }

TEST(PromptCache, TheLongestSharedPrefixIsTakenAndLeavesTheCache) {
  PromptCache c(1000);
  c.put(seq(0, 10), bytes(100, 1));
  c.put(seq(100, 20), bytes(100, 2));
  std::vector<int32_t> prompt = seq(100, 12);
  prompt.push_back(-1);  // leaves the cached one after 12 tokens
  PromptCache::Taken t;
  ASSERT_TRUE(c.take(prompt, 0, &t));
  EXPECT_EQ(t.prefix, 12u);
  EXPECT_EQ(t.tokens, seq(100, 20));
  EXPECT_EQ(t.state, bytes(100, 2));
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
  c.put(seq(0, 10), bytes(100, 1));
  c.put(seq(0, 30), bytes(300, 2));  // the same conversation, a turn later
  EXPECT_EQ(c.stats().entries, 1u);
  EXPECT_EQ(c.stats().bytes, 300u);
  c.put(seq(0, 20), bytes(200, 3));  // a shorter branch is another state
  EXPECT_EQ(c.stats().entries, 2u);
  EXPECT_EQ(c.stats().evictions, 0u);
}

TEST(PromptCache, TheBoundHoldsByEvictingTheLeastRecentlyUsed) {
  PromptCache c(250);
  c.put(seq(0, 10), bytes(100, 1));
  c.put(seq(100, 10), bytes(100, 2));
  c.put(seq(200, 10), bytes(100, 3));  // the first goes
  EXPECT_EQ(c.stats().bytes, 200u);
  EXPECT_EQ(c.stats().evictions, 1u);
  PromptCache::Taken t;
  EXPECT_FALSE(c.take(seq(0, 10), 0, &t));
  ASSERT_TRUE(c.take(seq(100, 10), 0, &t));
  c.put(t.tokens, t.state);  // used again: now the most recent
  c.put(seq(300, 10), bytes(100, 4));
  EXPECT_TRUE(c.take(seq(100, 10), 0, &t)) << "the recently used state was evicted";
  EXPECT_FALSE(c.take(seq(200, 10), 0, &t));
  // A state larger than the whole bound is not kept, and nothing else goes for it.
  c.put(seq(400, 10), bytes(251, 5));
  EXPECT_EQ(c.stats().entries, 1u);
}

TEST(PromptCache, ZeroBytesTurnsItOff) {
  PromptCache c(0);
  EXPECT_FALSE(c.enabled());
  c.put(seq(0, 10), bytes(1, 1));
  PromptCache::Taken t;
  EXPECT_FALSE(c.take(seq(0, 10), 0, &t));
  EXPECT_EQ(c.stats().entries, 0u);
  EXPECT_EQ(c.stats().misses, 0u);
}

}  // namespace
}  // namespace tandem::engine
