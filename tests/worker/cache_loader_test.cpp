// The RPC child's cache loader, on a CPU buffer: it fills a weight from `<cache>/<hash>` in
// parallel chunks, straight into host memory or through staging buffers (the path a GPU takes),
// leaves the file out of the page cache once loaded, and refuses a file that is missing or of the
// wrong size.
#include "worker/cache_loader.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <string>
#include <vector>

#include "common/cached_tensor.h"
#include "ggml-backend.h"
#include "ggml.h"
#include "link/protocol.h"
#include "page_cache.h"
#include "test_util.h"

using tandem::link::CachedMarker;
using tandem::link::encode_cached_marker;
using tandem::link::kCachedMarkerSize;

namespace tandem::worker {
namespace {

using namespace tandem::testing;

// One I8 tensor of `bytes` in a CPU buffer, zeroed.
class CpuWeight {
 public:
  explicit CpuWeight(size_t bytes) {
    ggml_init_params p{ggml_tensor_overhead() * 2, nullptr, true};
    ctx_ = ggml_init(p);
    tensor_ = ggml_new_tensor_1d(ctx_, GGML_TYPE_I8, static_cast<int64_t>(bytes));
    ggml_set_name(tensor_, "blk.0.ffn_up_exps.weight");
    ggml_backend_dev_t cpu = ggml_backend_dev_by_type(GGML_BACKEND_DEVICE_TYPE_CPU);
    buffer_ = ggml_backend_buft_alloc_buffer(ggml_backend_dev_buffer_type(cpu), bytes + 64);
    ggml_backend_tensor_alloc(buffer_, tensor_, ggml_backend_buffer_get_base(buffer_));
    ggml_backend_buffer_clear(buffer_, 0);
  }
  ~CpuWeight() {
    ggml_backend_buffer_free(buffer_);
    ggml_free(ctx_);
  }
  ggml_tensor* tensor() { return tensor_; }
  std::string bytes() {
    std::string out(ggml_nbytes(tensor_), '\0');
    ggml_backend_tensor_get(tensor_, out.data(), 0, out.size());
    return out;
  }

 private:
  ggml_context* ctx_ = nullptr;
  ggml_tensor* tensor_ = nullptr;
  ggml_backend_buffer_t buffer_ = nullptr;
};

std::string pattern(size_t n) {
  std::string s(n, '\0');
  uint32_t x = 2463534242u;
  for (auto& c : s) {
    x ^= x << 13, x ^= x >> 17, x ^= x << 5;
    c = static_cast<char>(x);
  }
  return s;
}

// Writes `data` into the cache as ggml names it; returns its marker.
CachedMarker cache(const ScratchDir& dir, const std::string& data) {
  const uint64_t hash = fnv1a(data.data(), data.size());
  std::filesystem::create_directories(dir.file("cache"));
  write_file(dir.file("cache") + "/" + hash_name(hash), data);
  return {hash, data.size()};
}

CacheLoaderOptions options(const ScratchDir& dir, bool staged) {
  CacheLoaderOptions o;
  o.cache_dir = dir.file("cache");
  o.threads = 3;
  o.chunk_bytes = 1 << 20;
  o.stage_host_buffers = staged;
  return o;
}

// 3.5 MiB and 7 bytes: chunks of 1 MiB, the last one short, spread over 3 readers.
constexpr size_t kBytes = (7u << 19) + 7;

TEST(CacheLoader, FillsAWeightStraightIntoHostMemory) {
  ScratchDir dir;
  const std::string data = pattern(kBytes);
  const CachedMarker m = cache(dir, data);
  CpuWeight w(kBytes);
  CacheLoader loader(options(dir, false));
  ASSERT_TRUE(loader.load(w.tensor(), m).is_ok());
  EXPECT_TRUE(w.bytes() == data);
  const CacheLoaderStats st = loader.take_stats();
  EXPECT_EQ(st.weights, 1u);
  EXPECT_EQ(st.bytes, kBytes);
  EXPECT_EQ(loader.take_stats().weights, 0u);  // taken
}

TEST(CacheLoader, FillsAWeightThroughStagingBuffersAsForADevice) {
  ScratchDir dir;
  const std::string data = pattern(kBytes);
  const CachedMarker m = cache(dir, data);
  CpuWeight w(kBytes);
  CacheLoader loader(options(dir, true));
  ASSERT_TRUE(loader.load(w.tensor(), m).is_ok());
  EXPECT_TRUE(w.bytes() == data);
  loader.release();  // the next load allocates its staging again
  CpuWeight again(kBytes);
  ASSERT_TRUE(loader.load(again.tensor(), m).is_ok());
  EXPECT_TRUE(again.bytes() == data);
  EXPECT_EQ(loader.take_stats().weights, 2u);
}

TEST(CacheLoader, RefusesAMissingFileAFileOfAnotherSizeAndAMarkerForAnotherTensor) {
  ScratchDir dir;
  const std::string data = pattern(kBytes);
  const CachedMarker m = cache(dir, data);
  CpuWeight w(kBytes);
  CacheLoader loader(options(dir, false));

  const Status missing = loader.load(w.tensor(), {m.hash ^ 1, kBytes});
  EXPECT_FALSE(missing.is_ok());
  EXPECT_NE(missing.message().find(hash_name(m.hash ^ 1)), std::string::npos) << missing.message();

  write_file(dir.file("cache") + "/" + hash_name(m.hash), data.substr(0, kBytes - 1));  // truncated
  const Status shorter = loader.load(w.tensor(), m);
  EXPECT_FALSE(shorter.is_ok());
  EXPECT_NE(shorter.message().find("the weight"), std::string::npos) << shorter.message();

  CpuWeight bigger(kBytes + 1);
  const Status other = loader.load(bigger.tensor(), m);
  EXPECT_FALSE(other.is_ok());
  EXPECT_NE(other.message().find("blk.0.ffn_up_exps.weight"), std::string::npos) << other.message();
  EXPECT_EQ(loader.take_stats().weights, 0u);
  EXPECT_TRUE(w.bytes() == std::string(kBytes, 0));  // nothing written
}

// Once a weight is on the device its cache file leaves the page cache, which on a box whose GPU
// shares system memory would hold the weight a second time; with the switch off it stays.
TEST(CacheLoader, DropsTheFileFromThePageCacheOnceTheWeightIsOnTheDevice) {
  ScratchDir dir;
  const std::string data = pattern(kBytes);
  const CachedMarker m = cache(dir, data);
  const std::string file = dir.file("cache") + "/" + hash_name(m.hash);
  if (!has_page_cache(file)) GTEST_SKIP() << dir.file("") << " is on tmpfs: its files never leave memory";
  write_back(file);  // a seeded cache's pages are clean
  const size_t pages = file_pages(file);
  for (const bool staged : {false, true}) {
    read_through(file);
    ASSERT_EQ(resident_pages(file), pages) << "staged " << staged;
    CpuWeight w(kBytes);
    CacheLoader loader(options(dir, staged));
    ASSERT_TRUE(loader.load(w.tensor(), m).is_ok());
    EXPECT_TRUE(w.bytes() == data);
    EXPECT_EQ(resident_pages(file), 0u) << "staged " << staged;
  }
  CacheLoaderOptions keep = options(dir, false);
  keep.drop_page_cache = false;
  CpuWeight w(kBytes);
  CacheLoader loader(keep);
  ASSERT_TRUE(loader.load(w.tensor(), m).is_ok());
  EXPECT_EQ(resident_pages(file), pages);
}

// What ggml's RPC server does with a marker: hand it to ggml_backend_tensor_set as the weight's
// data. With the loader installed, the weight is filled from the cache instead.
TEST(CacheLoader, InstalledItTurnsAMarkerHandedToGgmlIntoTheWeight) {
  ScratchDir dir;
  const std::string data = pattern(kBytes);
  const CachedMarker m = cache(dir, data);
  ASSERT_TRUE(install_cache_loader(options(dir, false)).is_ok());
  CpuWeight w(kBytes);
  const auto marker = encode_cached_marker(m);
  ggml_backend_tensor_set(w.tensor(), marker.data(), 0, marker.size());
  EXPECT_TRUE(w.bytes() == data);
  // Anything else is written as given, a 32-byte write too.
  const std::string plain(kCachedMarkerSize, 'p');
  ggml_backend_tensor_set(w.tensor(), plain.data(), 64, plain.size());
  EXPECT_EQ(w.bytes().substr(64, kCachedMarkerSize), plain);
  EXPECT_EQ(take_cache_loader_stats().weights, 1u);
}

// ggml's server cannot fail a SET_TENSOR: a marker the loader cannot serve ends the process, with
// the reason, rather than leave the weight unfilled.
TEST(CacheLoaderDeathTest, AMarkerItCannotServeStopsTheProcessWithTheReason) {
  ScratchDir dir;
  const CachedMarker m = cache(dir, pattern(kBytes));
  const CacheLoaderOptions o = options(dir, false);
  EXPECT_EXIT(
      {
        (void)install_cache_loader(o);
        CpuWeight w(kBytes);
        const auto marker = encode_cached_marker({m.hash ^ 1, kBytes});
        ggml_backend_tensor_set(w.tensor(), marker.data(), 0, marker.size());
      },
      ::testing::ExitedWithCode(kCacheLoadFailedExit), "cannot load cached weight blk.0.ffn_up_exps.weight");
}

}  // namespace
}  // namespace tandem::worker
