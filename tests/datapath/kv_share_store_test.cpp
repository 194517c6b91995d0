// The worker's side of the prompt cache's shares (datapath/kv_share_store.h), on CPU tensors in
// this process: the head's markers arrive as the data of ordinary tensor writes and never land in
// the tensor; saves copy regions into the share, restores copy them back anywhere in the tensor,
// and everything the head cannot be trusted to get right (regions out of order or out of bounds,
// a share that is gone, another session) is counted, never crashes and never writes.
#include "datapath/kv_share_store.h"

#include "datapath/rpc_child_session.h"

#include <gtest/gtest.h>

#include <unistd.h>

#include <cstring>
#include <filesystem>
#include <vector>

#include "ggml-alloc.h"
#include "ggml-backend.h"
#include "ggml-cpu.h"
#include "ggml.h"
#include "link/protocol.h"

namespace tandem::datapath {
namespace {

using link::KvShareMarker;
using link::KvShareOp;

constexpr size_t kBytes = 4096;

class KvShareStore : public ::testing::Test {
 protected:
  void SetUp() override {
    open_child("");
    ASSERT_NE(child_, nullptr);
    ggml_init_params p{ggml_tensor_overhead() * 2, nullptr, true};
    ctx_ = ggml_init(p);
    kv_ = ggml_new_tensor_1d(ctx_, GGML_TYPE_I8, kBytes);
    buffer_ = ggml_backend_alloc_ctx_tensors_from_buft(ctx_, ggml_backend_cpu_buffer_type());
    for (size_t i = 0; i < kBytes; ++i) original_.push_back(static_cast<uint8_t>(i * 7 + 3));
    ggml_backend_tensor_set(kv_, original_.data(), 0, kBytes);
  }
  void TearDown() override {
    ggml_backend_buffer_free(buffer_);
    ggml_free(ctx_);
    child_.reset();
  }
  // The RPC child's data path, as its RPC server opens it, spilling into `spill_dir`.
  void open_child(const std::string& spill_dir) {
    child_.reset();
    RpcChildOptions o;
    o.spill_dir = spill_dir;
    auto s = RpcChildSession::open(o);
    EXPECT_TRUE(s.is_ok()) << s.status().message();
    if (s.is_ok()) child_ = std::move(s.value());
  }
  ShareStore& store() { return child_->kv_shares(); }

  void send(KvShareOp op, uint64_t key, uint64_t stream = 0, uint64_t offset = 0, uint64_t bytes = 0,
            uint64_t session = 11) {
    const auto m = link::encode_kv_share_marker(KvShareMarker{op, key, session, stream, offset, bytes});
    ggml_backend_tensor_set(kv_, m.data(), 0, m.size());
  }
  link::KvShareAnswer query(uint64_t key, uint64_t session = 11) {
    send(KvShareOp::query, key, 0, 0, 0, session);
    uint8_t answer[link::kKvShareAnswerSize];
    ggml_backend_tensor_get(kv_, answer, 0, sizeof answer);
    const auto a = link::parse_kv_share_answer(answer, sizeof answer);
    EXPECT_TRUE(a.has_value()) << "a query must make the next 32-byte read an answer";
    return a.value_or(link::KvShareAnswer{});
  }
  std::unique_ptr<RpcChildSession> child_;
  std::vector<uint8_t> contents() {
    std::vector<uint8_t> v(kBytes);
    ggml_backend_tensor_get(kv_, v.data(), 0, kBytes);
    return v;
  }
  void zero() {
    const std::vector<uint8_t> z(kBytes, 0);
    ggml_backend_tensor_set(kv_, z.data(), 0, kBytes);
  }

  ggml_context* ctx_ = nullptr;
  ggml_tensor* kv_ = nullptr;
  ggml_backend_buffer_t buffer_ = nullptr;
  std::vector<uint8_t> original_;
};

TEST_F(KvShareStore, SavedRegionsComeBackWhereTheHeadAsksAndMarkersNeverLand) {
  send(KvShareOp::save, 1, 0, 128, 256);
  send(KvShareOp::save, 1, 256, 1024, 512);
  EXPECT_EQ(contents(), original_) << "a marker was written into the tensor";
  link::KvShareAnswer a = query(1);
  EXPECT_TRUE(a.held);
  EXPECT_EQ(a.bytes, 768u);
  EXPECT_EQ(a.faults, 0u);
  EXPECT_EQ(store().stats().shares, 1u);
  EXPECT_EQ(store().stats().bytes, 768u);

  zero();
  send(KvShareOp::restore, 1, 0, 0, 256);       // the first region, to the tensor's start
  send(KvShareOp::restore, 1, 256, 2048, 512);  // the second, elsewhere
  const std::vector<uint8_t> after = contents();
  EXPECT_EQ(std::memcmp(after.data(), original_.data() + 128, 256), 0);
  EXPECT_EQ(std::memcmp(after.data() + 2048, original_.data() + 1024, 512), 0);
  EXPECT_EQ(after[256], 0) << "a restore wrote beyond its region";
  EXPECT_EQ(query(1).faults, 0u);

  send(KvShareOp::drop, 1);
  a = query(1);
  EXPECT_FALSE(a.held);
  EXPECT_EQ(a.bytes, 0u);
  EXPECT_EQ(store().stats().bytes, 0u);
}

TEST_F(KvShareStore, WhatTheHeadGetsWrongIsCountedAndNeitherCrashesNorWrites) {
  send(KvShareOp::save, 2, 0, 0, 256);
  send(KvShareOp::save, 2, 999, 0, 256);                // out of order in the share's stream
  send(KvShareOp::save, 2, 256, kBytes - 10, 256);      // beyond the tensor
  send(KvShareOp::save, 2, 256, UINT64_MAX - 10, 256);  // an offset that overflows
  EXPECT_EQ(query(2).faults, 3u);
  zero();
  send(KvShareOp::restore, 2, 128, 0, 256);              // beyond what the share holds
  send(KvShareOp::restore, 2, UINT64_MAX - 10, 0, 256);  // a stream position that overflows
  send(KvShareOp::restore, 3, 0, 0, 256);                // a share that does not exist
  EXPECT_EQ(contents(), std::vector<uint8_t>(kBytes, 0)) << "a refused restore wrote";
  const link::KvShareAnswer a = query(2);
  EXPECT_EQ(a.faults, 5u);
  EXPECT_EQ(a.bytes, 256u);
  EXPECT_FALSE(query(3).held);
}

TEST_F(KvShareStore, ANewHeadSessionDropsTheLastOnesShares) {
  send(KvShareOp::save, 4, 0, 0, 512, /*session=*/11);
  EXPECT_TRUE(query(4, 11).held);
  EXPECT_EQ(store().session(), 11u);
  EXPECT_FALSE(query(4, 12).held) << "another head's query found this head's share";
  EXPECT_EQ(store().stats().shares, 0u);
  send(KvShareOp::save, 5, 0, 0, 512, 12);
  EXPECT_EQ(store().release(11).shares, 0u) << "a session that has ended must not free a newer one's shares";
  const KvShareStoreStats freed = store().release(12);
  EXPECT_EQ(freed.shares, 1u);
  EXPECT_EQ(freed.bytes, 512u);
}

TEST_F(KvShareStore, OrdinaryWritesAndReadsOfThoseSizesAreLeftAlone) {
  std::vector<uint8_t> data(link::kKvShareMarkerSize, 0xab);
  ggml_backend_tensor_set(kv_, data.data(), 64, data.size());
  std::vector<uint8_t> back(link::kKvShareAnswerSize);
  ggml_backend_tensor_get(kv_, back.data(), 64, back.size());  // no query pending: the tensor's bytes
  EXPECT_EQ(back, std::vector<uint8_t>(link::kKvShareAnswerSize, 0xab));
}

// A spilled share leaves memory for the spill folder, still counts as held, and comes back on its
// first restore; a worker without a folder drops it, and the head's query then says so.
TEST_F(KvShareStore, ASpilledShareLeavesMemoryAndComesBackOnItsRestore) {
  const std::string dir = std::string(TANDEM_TEST_TMP) + "/KvShareStore.spill." + std::to_string(::getpid());
  std::filesystem::remove_all(dir);
  open_child(dir);
  ASSERT_NE(child_, nullptr);
  send(KvShareOp::save, 6, 0, 0, 1024);
  send(KvShareOp::save, 6, 1024, 2048, 1024);
  send(KvShareOp::spill, 6);
  EXPECT_EQ(store().stats().bytes, 0u);
  EXPECT_EQ(store().stats().disk_bytes, 2048u);
  size_t files = 0;
  for (const auto& e : std::filesystem::directory_iterator(dir)) files += e.path().extension() == ".kv";
  EXPECT_EQ(files, 1u);
  const link::KvShareAnswer a = query(6);
  EXPECT_TRUE(a.held);
  EXPECT_EQ(a.bytes, 2048u);
  zero();
  send(KvShareOp::restore, 6, 1024, 0, 1024);
  EXPECT_EQ(std::memcmp(contents().data(), original_.data() + 2048, 1024), 0);
  EXPECT_EQ(store().stats().disk_bytes, 0u) << "read back into memory";
  EXPECT_EQ(store().stats().bytes, 2048u);
  EXPECT_TRUE(std::filesystem::is_empty(dir));
  send(KvShareOp::spill, 6);
  send(KvShareOp::drop, 6);
  EXPECT_TRUE(std::filesystem::is_empty(dir)) << "a dropped share's file stays";
  EXPECT_EQ(store().stats().disk_bytes, 0u);

  open_child("");
  ASSERT_NE(child_, nullptr);
  send(KvShareOp::save, 7, 0, 0, 512);
  send(KvShareOp::spill, 7);
  EXPECT_FALSE(query(7).held) << "spilled with nowhere to go, yet still held";
  std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace tandem::datapath
