// The head's memo of weight hashes (engine/hash_memo.h): what it keeps, how a changed model file
// gets a new memo, and that a fingerprint notices changed bytes.
#include "engine/hash_memo.h"

#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/stat.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "test_util.h"

namespace tandem::engine {
namespace {

using tandem::testing::ScratchDir;

void write(const std::string& path, const std::string& text) { std::ofstream(path, std::ios::trunc) << text; }

TEST(HashMemo, WhatIsWrittenIsReadBackAndBadLinesAreLeftOut) {
  ScratchDir dir;
  const std::string file = dir.file("memo/sub/m");  // the folder is created
  HashMemo memo{{{0, 4096}, {0xfedcba9876543210ULL, 7}}, {{1u << 30, 11ull << 30}, {1, 0xffffffffffffffffULL}}};
  ASSERT_TRUE(write_hash_memo(file, memo).is_ok());
  EXPECT_EQ(read_hash_memo(file).size(), 2u);
  EXPECT_EQ(read_hash_memo(file).at({0, 4096}).hash, 0xfedcba9876543210ULL);
  EXPECT_EQ(read_hash_memo(file).at({1u << 30, 11ull << 30}).fingerprint, 0xffffffffffffffffULL);
  std::ofstream(file, std::ios::app) << "garbage\n12 34\n";
  EXPECT_EQ(read_hash_memo(file).size(), 2u);
  EXPECT_TRUE(read_hash_memo(dir.file("missing")).empty());
}

TEST(HashMemo, TheFolderKeepsTheMostRecentMemos) {
  ScratchDir dir;
  for (size_t i = 0; i < kKeptHashMemos + 5; ++i) {
    const std::string f = dir.file("memos/m" + std::to_string(i));
    ASSERT_TRUE(write_hash_memo(f, {{{i, 1}, {i, i}}}).is_ok());
    timespec times[2] = {{0, UTIME_OMIT}, {static_cast<time_t>(1000000 + i), 0}};  // m0 is the oldest
    ASSERT_EQ(::utimensat(AT_FDCWD, f.c_str(), times, 0), 0);
  }
  ASSERT_TRUE(write_hash_memo(dir.file("memos/newest"), {}).is_ok());
  size_t n = 0;
  for (const auto& e : std::filesystem::directory_iterator(dir.file("memos"))) n += e.is_regular_file() ? 1 : 0;
  EXPECT_EQ(n, kKeptHashMemos);
  EXPECT_FALSE(std::filesystem::exists(dir.file("memos/m5")));
  EXPECT_TRUE(std::filesystem::exists(dir.file("memos/m6")));
  EXPECT_TRUE(std::filesystem::exists(dir.file("memos/newest")));
}

TEST(HashMemo, AModelFileThatChangesGetsAnotherMemo) {
  ScratchDir dir;
  const std::string model = dir.file("m.gguf");
  write(model, "one");
  auto before = hash_memo_path(dir.file("memos"), model);
  ASSERT_TRUE(before.is_ok());
  EXPECT_EQ(before.value(), hash_memo_path(dir.file("memos"), model).value());
  timespec times[2] = {{0, UTIME_OMIT}, {1234567, 890}};
  write(model, "two");
  ASSERT_EQ(::utimensat(AT_FDCWD, model.c_str(), times, 0), 0);
  EXPECT_NE(before.value(), hash_memo_path(dir.file("memos"), model).value());
  EXPECT_FALSE(hash_memo_path(dir.file("memos"), dir.file("absent.gguf")).is_ok());
}

TEST(HashMemo, TheFingerprintSeesTheStartTheMiddleAndTheEnd) {
  std::vector<uint8_t> w(1 << 20, 7);
  const uint64_t fp = weight_fingerprint(w.data(), w.size());
  for (size_t at : {size_t{0}, w.size() / 2, w.size() - 1}) {
    std::vector<uint8_t> v = w;
    v[at] ^= 1;
    EXPECT_NE(weight_fingerprint(v.data(), v.size()), fp) << "byte " << at;
  }
  std::vector<uint8_t> small(100, 3);
  EXPECT_EQ(weight_fingerprint(small.data(), small.size()), weight_fingerprint(small.data(), small.size()));
}

TEST(HashMemo, TheDefaultFolderFollowsXdgThenHome) {
  ::setenv("XDG_CACHE_HOME", "/x/cache", 1);
  EXPECT_EQ(default_hash_memo_dir(), "/x/cache/tandem/weight-hashes");
  ::unsetenv("XDG_CACHE_HOME");
  ::setenv("HOME", "/home/u", 1);
  EXPECT_EQ(default_hash_memo_dir(), "/home/u/.cache/tandem/weight-hashes");
  ::unsetenv("HOME");
  EXPECT_EQ(default_hash_memo_dir(), "");
}

}  // namespace
}  // namespace tandem::engine
