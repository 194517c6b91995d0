// The RPC child's queued input writes (datapath/input_writes.h). Without a GPU nothing is queued:
// writes into host memory must take ggml's own path. With a GPU (the benchmark machine runs this
// binary too) every queued write must be on the device before ggml reads it back or computes.
#include "datapath/input_writes.h"

#include "datapath/rpc_child_session.h"

#include <gtest/gtest.h>

#include <memory>
#include <vector>

#include "datapath/input_reuse.h"
#include "ggml-alloc.h"
#include "ggml-backend.h"
#include "ggml.h"
#include "link/protocol.h"

using tandem::link::encode_reuse_marker;
using tandem::link::ReuseOp;

namespace tandem::datapath {
namespace {

constexpr int kTensors = 200;
constexpr int kFloats = 64;
constexpr int kBig = 12, kBigFloats = 1 << 18;  // 12 MiB of 1 MiB writes: more than the staging holds

// kTensors small F32 tensors plus the sum of the first two, all in one buffer of `buft`.
struct Tensors {
  explicit Tensors(ggml_backend_buffer_type_t buft) {
    ggml_init_params p{ggml_tensor_overhead() * (kTensors + kBig + 8) + ggml_graph_overhead(), nullptr, true};
    ctx = ggml_init(p);
    for (int i = 0; i < kTensors; ++i) t.push_back(ggml_new_tensor_1d(ctx, GGML_TYPE_F32, kFloats));
    for (int i = 0; i < kBig; ++i) big.push_back(ggml_new_tensor_1d(ctx, GGML_TYPE_F32, kBigFloats));
    sum = ggml_add(ctx, t[0], t[1]);
    graph = ggml_new_graph(ctx);
    ggml_build_forward_expand(graph, sum);
    buffer = ggml_backend_alloc_ctx_tensors_from_buft(ctx, buft);
  }
  ~Tensors() {
    ggml_backend_buffer_free(buffer);
    ggml_free(ctx);
  }
  ggml_context* ctx = nullptr;
  std::vector<ggml_tensor*> t, big;
  ggml_tensor* sum = nullptr;
  ggml_cgraph* graph = nullptr;
  ggml_backend_buffer_t buffer = nullptr;
};

std::vector<float> values(int seed) {
  std::vector<float> v(kFloats);
  for (int j = 0; j < kFloats; ++j) v[j] = static_cast<float>(seed * 1000 + j);
  return v;
}

std::vector<float> read(const ggml_tensor* tensor) {
  std::vector<float> v(kFloats);
  ggml_backend_tensor_get(tensor, v.data(), 0, sizeof(float) * kFloats);
  return v;
}

// The RPC child's data path, as its RPC server opens it; nullptr, failing the test, when it cannot.
std::unique_ptr<RpcChildSession> open_child() {
  auto s = RpcChildSession::open({});
  EXPECT_TRUE(s.is_ok()) << s.status().message();
  return s.is_ok() ? std::move(s.value()) : nullptr;
}

ggml_backend_dev_t first_gpu() {
  for (size_t i = 0; i < ggml_backend_dev_count(); ++i) {
    ggml_backend_dev_t d = ggml_backend_dev_get(i);
    if (ggml_backend_dev_type(d) == GGML_BACKEND_DEVICE_TYPE_GPU) return d;
  }
  return nullptr;
}

TEST(InputWrites, WritesIntoHostMemoryTakeGgmlsOwnPath) {
  auto child = open_child();
  ASSERT_NE(child, nullptr);
  ggml_backend_dev_t cpu = ggml_backend_dev_by_type(GGML_BACKEND_DEVICE_TYPE_CPU);
  Tensors ts(ggml_backend_dev_buffer_type(cpu));
  ASSERT_NE(ts.buffer, nullptr);
  for (int i = 0; i < kTensors; ++i) ggml_backend_tensor_set(ts.t[i], values(i).data(), 0, sizeof(float) * kFloats);
  EXPECT_EQ(child->input_writes().queued(), 0u);
  for (int i = 0; i < kTensors; ++i) EXPECT_EQ(read(ts.t[i]), values(i)) << "tensor " << i;
}

TEST(InputWrites, QueuedWritesAreOnTheGpuBeforeItIsReadOrComputes) {
  ggml_backend_dev_t gpu = first_gpu();
  if (gpu == nullptr) GTEST_SKIP() << "no GPU here: nothing is queued";
  auto child = open_child();
  ASSERT_NE(child, nullptr);
  Tensors ts(ggml_backend_dev_buffer_type(gpu));
  ASSERT_NE(ts.buffer, nullptr);
  ggml_backend_t backend = ggml_backend_dev_init(gpu, nullptr);
  ASSERT_NE(backend, nullptr);

  for (int i = 0; i < kTensors; ++i) ggml_backend_tensor_set(ts.t[i], values(i).data(), 0, sizeof(float) * kFloats);
  // Interleaved with writes that fill the page-locked staging more than once.
  std::vector<std::vector<float>> big(kBig, std::vector<float>(kBigFloats));
  for (int i = 0; i < kBig; ++i) {
    for (int j = 0; j < kBigFloats; ++j) big[i][j] = static_cast<float>(i * 7 + j % 1000);
    ggml_backend_tensor_set(ts.big[i], big[i].data(), 0, sizeof(float) * kBigFloats);
  }
  EXPECT_EQ(child->input_writes().queued(), static_cast<uint64_t>(kTensors + kBig));
  for (int i = 0; i < kTensors; ++i) EXPECT_EQ(read(ts.t[i]), values(i)) << "tensor " << i;
  for (int i = 0; i < kBig; ++i) {
    std::vector<float> got(kBigFloats);
    ggml_backend_tensor_get(ts.big[i], got.data(), 0, sizeof(float) * kBigFloats);
    EXPECT_EQ(got, big[i]) << "big tensor " << i;
  }

  // Written again, then straight into a graph on another stream.
  for (int round = 1; round <= 20; ++round) {
    const std::vector<float> a = values(round), b = values(round + 500);
    ggml_backend_tensor_set(ts.t[0], a.data(), 0, sizeof(float) * kFloats);
    ggml_backend_tensor_set(ts.t[1], b.data(), 0, sizeof(float) * kFloats);
    ASSERT_EQ(ggml_backend_graph_compute(backend, ts.graph), GGML_STATUS_SUCCESS);
    std::vector<float> want(kFloats);
    for (int j = 0; j < kFloats; ++j) want[j] = a[j] + b[j];
    ASSERT_EQ(read(ts.sum), want) << "round " << round;
  }
  // A write ggml makes itself (into a part of the buffer) comes after the queued ones.
  const std::vector<float> first = values(7);
  ggml_backend_tensor_set(ts.t[5], first.data(), 0, sizeof(float) * kFloats);
  ggml_backend_tensor_memset(ts.t[5], 0, 0, sizeof(float) * 4);
  std::vector<float> want = first;
  for (int j = 0; j < 4; ++j) want[j] = 0;
  EXPECT_EQ(read(ts.t[5]), want);
  ggml_backend_free(backend);
}

// Input reuse (datapath/input_reuse.h): a keep marker copies what was just written into a slot, a
// copy marker copies the slot into its destination; on the CPU here, on the GPU where there is one
// (queued on the child's stream, so reads and graphs must see it).
class RepeatedInputs : public ::testing::TestWithParam<bool> {
 protected:
  void SetUp() override {
    dev_ = GetParam() ? first_gpu() : ggml_backend_dev_by_type(GGML_BACKEND_DEVICE_TYPE_CPU);
    if (dev_ == nullptr) GTEST_SKIP() << "no GPU here";
    child_ = open_child();
    ASSERT_NE(child_, nullptr);
    ts_ = std::make_unique<Tensors>(ggml_backend_dev_buffer_type(dev_));
    ASSERT_NE(ts_->buffer, nullptr);
  }
  std::vector<float> big_values(int seed) const {
    std::vector<float> v(kBigFloats);
    for (int j = 0; j < kBigFloats; ++j) v[j] = static_cast<float>(seed * 13 + j % 977);
    return v;
  }
  std::vector<float> read_big(int i) const {
    std::vector<float> v(kBigFloats);
    ggml_backend_tensor_get(ts_->big[i], v.data(), 0, sizeof(float) * kBigFloats);
    return v;
  }
  void marker(int i, ReuseOp op, uint32_t slot, uint64_t bytes, uint64_t session, size_t offset = 0,
              uint32_t drop = 0) {
    const auto m = encode_reuse_marker({op, slot, bytes, session, drop});
    ggml_backend_tensor_set(ts_->big[i], m.data(), offset, m.size());
  }
  static constexpr uint64_t kBytes = sizeof(float) * kBigFloats;
  ggml_backend_dev_t dev_ = nullptr;
  std::unique_ptr<RpcChildSession> child_;  // outlives the tensors: their buffer's free is fenced
  std::unique_ptr<Tensors> ts_;
};

TEST_P(RepeatedInputs, AKeptInputIsCopiedWhereTheHeadSays) {
  const uint64_t session = 0x5e55'1001'0000'0000ULL + GetParam();
  const std::vector<float> a = big_values(1);
  ggml_backend_tensor_set(ts_->big[0], a.data(), 0, kBytes);
  marker(0, ReuseOp::keep, 3, kBytes, session);
  // The kept bytes are the slot's own: overwriting the source changes nothing.
  const std::vector<float> other = big_values(2);
  ggml_backend_tensor_set(ts_->big[0], other.data(), 0, kBytes);
  const uint64_t copies = child_->input_writes().reuse_copies();
  marker(1, ReuseOp::copy, 3, kBytes, session);
  marker(2, ReuseOp::copy, 3, kBytes, session);
  EXPECT_EQ(child_->input_writes().reuse_copies() - copies, 2u);
  EXPECT_EQ(read_big(1), a);
  EXPECT_EQ(read_big(2), a);
  EXPECT_EQ(read_big(0), other);

  // A keep at an offset takes that part only, and its copy lands at the copy's offset.
  marker(0, ReuseOp::keep, 4, kBytes / 2, session, kBytes / 2);
  marker(3, ReuseOp::copy, 4, kBytes / 2, session, kBytes / 4);
  const std::vector<float> got = read_big(3);
  for (int j = 0; j < kBigFloats / 2; ++j) ASSERT_EQ(got[kBigFloats / 4 + j], other[kBigFloats / 2 + j]) << j;

  // Slots outlive a release for another session, not one for theirs.
  child_->input_writes().release(session + 2);
  marker(4, ReuseOp::copy, 3, kBytes, session);
  EXPECT_EQ(read_big(4), a);
  EXPECT_EQ(child_->input_writes().session(), session);
  child_->input_writes().release(session);
  EXPECT_EXIT(marker(5, ReuseOp::copy, 3, kBytes, session), ::testing::ExitedWithCode(kInputReuseFailedExit),
              "slot 3 holds 0 B, the head asked for 1.00 MiB");
}

TEST_P(RepeatedInputs, AMarkerTheChildCannotServeStopsItWithTheReason) {
  const uint64_t session = 0x5e55'2002'0000'0000ULL + GetParam();
  const std::vector<float> a = big_values(3);
  ggml_backend_tensor_set(ts_->big[0], a.data(), 0, kBytes);
  marker(0, ReuseOp::keep, 1, kBytes, session);
  // Another session's copy, a slot never kept, a size the slot does not hold, bytes past the tensor.
  EXPECT_EXIT(marker(1, ReuseOp::copy, 1, kBytes, session + 1), ::testing::ExitedWithCode(kInputReuseFailedExit),
              "a copy from slot 1 of another session");
  EXPECT_EXIT(marker(1, ReuseOp::copy, 6, kBytes, session), ::testing::ExitedWithCode(kInputReuseFailedExit),
              "slot 6 holds 0 B");
  EXPECT_EXIT(marker(1, ReuseOp::copy, 1, kBytes / 2, session), ::testing::ExitedWithCode(kInputReuseFailedExit),
              "slot 1 holds 1.00 MiB, the head asked for 512 KiB");
  EXPECT_EXIT(marker(1, ReuseOp::copy, 1, kBytes, session, 4096), ::testing::ExitedWithCode(kInputReuseFailedExit),
              "a marker for 1.00 MiB at offset 4096 of tensor");
  // A keep that drops a slot frees it.
  marker(0, ReuseOp::keep, 2, kBytes, session, 0, 1u << 1);
  EXPECT_EXIT(marker(1, ReuseOp::copy, 1, kBytes, session), ::testing::ExitedWithCode(kInputReuseFailedExit),
              "slot 1 holds 0 B");
  marker(1, ReuseOp::copy, 2, kBytes, session);
  EXPECT_EQ(read_big(1), a);
}

INSTANTIATE_TEST_SUITE_P(Devices, RepeatedInputs, ::testing::Values(false, true),
                         [](const ::testing::TestParamInfo<bool>& p) { return p.param ? "Gpu" : "Cpu"; });

}  // namespace
}  // namespace tandem::datapath
