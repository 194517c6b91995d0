// The prompt cache's index: the longest shared prefix wins, states that a longer one supersedes
// are replaced, the byte bound holds by evicting the least recently used, and the counts say so.
#include "engine/prompt_cache.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>

#include "fake_shares.h"
#include "test_util.h"

namespace tandem::engine {
namespace {

using testing::FakeShares;

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
// cache but through take() is dropped through its StateShares, so that its workers free their shares.
TEST(PromptCache, EachWorkersSharesAreBoundedOnThatWorkerAndDroppedWithTheirState) {
  FakeShares shares;
  PromptCache c(250, &shares);
  const auto dropped = [&] { return shares.dropped(); };
  c.put(seq(0, 10), state(50, 1, {{"b:1", 100}}));
  c.put(seq(100, 10), state(50, 2, {{"c:1", 200}}));
  EXPECT_EQ(c.stats().bytes, 100u);
  EXPECT_EQ(c.stats().worker_bytes, 300u) << "each worker within its own bound";
  EXPECT_EQ(c.stats().per_worker.at("b:1"), 100u);
  EXPECT_EQ(c.stats().per_worker.at("c:1"), 200u);
  EXPECT_TRUE(dropped().empty());
  c.put(seq(200, 10), state(50, 3, {{"b:1", 100}}));  // b holds 200 of 250: nothing goes
  EXPECT_EQ(c.stats().entries, 3u);
  // c would hold 300: the least recently used go until it fits, whoever holds them (b's first).
  c.put(seq(300, 10), state(50, 4, {{"c:1", 100}}));
  EXPECT_EQ(dropped(), std::vector<uint64_t>({1, 2}));
  c.put(seq(400, 10), state(50, 5, {{"c:1", 100}}));
  EXPECT_EQ(dropped(), std::vector<uint64_t>({1, 2})) << "c holds 200 of 250";
  EXPECT_EQ(c.stats().per_worker.count("b:1"), 1u);
  EXPECT_EQ(c.stats().per_worker.at("c:1"), 200u);
  EXPECT_EQ(c.stats().evictions, 2u);
  // A state one worker could never hold is not kept; its shares are dropped at once.
  c.put(seq(500, 10), state(10, 6, {{"b:1", 251}}));
  EXPECT_EQ(dropped().back(), 6u);
  // Taken states are the caller's: they are not dropped.
  PromptCache::Taken t;
  ASSERT_TRUE(c.take(seq(400, 10), 0, &t));
  EXPECT_EQ(t.state.key, 5u);
  EXPECT_EQ(t.state.worker_bytes(), 100u);
  EXPECT_EQ(dropped().back(), 6u);
  // A longer state of a conversation replaces the shorter one, whose shares are dropped.
  c.put(seq(200, 20), state(50, 7, {{"b:1", 10}}));
  EXPECT_EQ(dropped().back(), 3u);
  EXPECT_EQ(c.stats().saves, 6u) << "the state not kept is not counted";
  EXPECT_EQ(c.stats().saved_worker_bytes, 100u + 200 + 100 + 100 + 100 + 10);
}

TEST(PromptCache, WhatIsStillHeldIsDroppedWhenTheCacheGoes) {
  FakeShares shares;
  {
    PromptCache c(1000, &shares);
    c.put(seq(0, 10), state(50, 1, {{"b:1", 100}}));
    c.put(seq(100, 10), state(50, 2));
  }
  EXPECT_EQ(shares.dropped().size(), 2u);
}

// A state with a real buffer: `head` bytes of a pattern on the head around one hole of `worker`
// bytes that the worker "b:1" keeps.
SavedState buffered(uint64_t head, uint64_t worker, uint64_t key) {
  SavedState s;
  s.key = key;
  s.size = head + worker;
  s.buffer = std::make_unique<StateBuffer>(s.size);
  s.holes.push_back({head / 2, worker});
  s.shares.push_back({"b:1", worker, nullptr});
  for (uint64_t i = 0; i < head / 2; ++i) s.buffer->data()[i] = static_cast<uint8_t>(key + i);
  for (uint64_t i = head / 2 + worker; i < s.size; ++i) s.buffer->data()[i] = static_cast<uint8_t>(key * 3 + i);
  return s;
}

bool same_head_part(const SavedState& s, uint64_t head, uint64_t worker, uint64_t key) {
  for (uint64_t i = 0; i < head / 2; ++i)
    if (s.buffer->data()[i] != static_cast<uint8_t>(key + i)) return false;
  for (uint64_t i = head / 2 + worker; i < s.size; ++i)
    if (s.buffer->data()[i] != static_cast<uint8_t>(key * 3 + i)) return false;
  return true;
}

size_t files_in(const std::string& dir) {
  size_t n = 0;
  for (const auto& e : std::filesystem::directory_iterator(dir)) n += e.path().extension() == ".state";
  return n;
}

// With a disk tier, what memory cannot hold goes to disk instead of away (the workers told to
// spill their parts), is bounded there on every node too, and comes back whole when taken.
TEST(PromptCache, StatesMemoryCannotHoldGoToDiskAndComeBackWhole) {
  tandem::testing::ScratchDir dir;
  const std::string disk = dir.file("prompts");
  std::filesystem::create_directories(disk);
  std::ofstream(disk + "/999-1.state") << "an earlier engine's state";
  FakeShares shares;
  const auto dropped = [&] { return shares.dropped(); };
  const auto spilled = [&] { return shares.spilled(); };
  PromptCacheOptions o;
  o.max_bytes = 5000;  // one state of 3000 head bytes in memory
  o.disk_dir = disk;
  o.disk_max_bytes = 5000;  // and one on disk (each state: 4000 on the worker)
  o.shares = &shares;
  auto made = PromptCache::create(o);
  ASSERT_TRUE(made.is_ok()) << made.status().to_string();
  PromptCache& c = *made.value();
  EXPECT_EQ(files_in(disk), 0u) << "an earlier engine's files stay";

  c.put(seq(0, 10), buffered(3000, 4000, 1));
  c.put(seq(100, 10), buffered(3000, 4000, 2));  // 1 goes to disk
  EXPECT_EQ(spilled(), std::vector<uint64_t>({1}));
  EXPECT_TRUE(dropped().empty());
  PromptCacheStats st = c.stats();
  EXPECT_EQ(st.bytes, 3000u);
  EXPECT_EQ(st.disk_bytes, 3000u);
  EXPECT_EQ(st.per_worker.at("b:1"), 4000u);
  EXPECT_EQ(st.per_worker_disk.at("b:1"), 4000u);
  EXPECT_EQ(st.spills, 1u);
  EXPECT_EQ(st.evictions, 0u);
  EXPECT_EQ(files_in(disk), 1u);

  c.put(seq(200, 10), buffered(3000, 4000, 3));  // 2 to disk, where 1 makes room for it
  EXPECT_EQ(spilled(), std::vector<uint64_t>({1, 2}));
  EXPECT_EQ(dropped(), std::vector<uint64_t>({1}));
  EXPECT_EQ(c.stats().evictions, 1u);
  EXPECT_EQ(c.stats().entries, 2u);
  EXPECT_EQ(files_in(disk), 1u) << "the dropped state's file went with it";

  PromptCache::Taken t;
  ASSERT_TRUE(c.take(seq(100, 10), 0, &t));  // from disk
  EXPECT_EQ(t.state.key, 2u);
  ASSERT_NE(t.state.buffer, nullptr);
  EXPECT_TRUE(same_head_part(t.state, 3000, 4000, 2)) << "the head's part came back changed";
  EXPECT_EQ(files_in(disk), 0u);
  EXPECT_EQ(c.stats().disk_bytes, 0u);
  EXPECT_EQ(c.stats().per_worker_disk.count("b:1"), 0u);
  ASSERT_TRUE(c.take(seq(200, 10), 0, &t));  // from memory
  EXPECT_TRUE(same_head_part(t.state, 3000, 4000, 3));

  // A file that is gone: the state is dropped and the restore counted as failed.
  c.put(seq(300, 10), buffered(3000, 4000, 4));
  c.put(seq(400, 10), buffered(3000, 4000, 5));
  ASSERT_EQ(files_in(disk), 1u);
  for (const auto& e : std::filesystem::directory_iterator(disk)) std::filesystem::remove(e.path());
  EXPECT_FALSE(c.take(seq(300, 10), 0, &t));
  EXPECT_EQ(dropped().back(), 4u);
  EXPECT_EQ(c.stats().failed_restores, 1u);
}

TEST(PromptCache, WithoutADiskTierStatesLeavingMemoryAreDropped) {
  FakeShares shares;
  PromptCacheOptions o;
  o.max_bytes = 5000;
  o.shares = &shares;
  auto c = PromptCache::create(o);
  ASSERT_TRUE(c.is_ok());
  c.value()->put(seq(0, 10), buffered(3000, 100, 1));
  c.value()->put(seq(100, 10), buffered(3000, 100, 2));
  EXPECT_EQ(shares.dropped(), std::vector<uint64_t>({1}));
  EXPECT_TRUE(shares.spilled().empty()) << "spilled without a disk tier";
  EXPECT_EQ(c.value()->stats().max_disk_bytes, 0u);
}

TEST(PromptCache, AFolderThatCannotBeMadeIsAnError) {
  tandem::testing::ScratchDir dir;
  std::ofstream(dir.file("file")) << "x";
  PromptCacheOptions o;
  o.max_bytes = 5000;
  o.disk_dir = dir.file("file") + "/prompts";
  auto c = PromptCache::create(o);
  ASSERT_FALSE(c.is_ok());
  EXPECT_NE(c.status().message().find("prompt-cache folder " + o.disk_dir), std::string::npos) << c.status().message();
}

}  // namespace
}  // namespace tandem::engine
