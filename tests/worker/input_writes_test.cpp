// The RPC child's queued input writes (worker/input_writes.h). Without a GPU nothing is queued:
// writes into host memory must take ggml's own path. With a GPU (the benchmark machine runs this
// binary too) every queued write must be on the device before ggml reads it back or computes.
#include "worker/input_writes.h"

#include <gtest/gtest.h>

#include <vector>

#include "ggml-alloc.h"
#include "ggml-backend.h"
#include "ggml.h"

namespace tandem::worker {
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

ggml_backend_dev_t first_gpu() {
  for (size_t i = 0; i < ggml_backend_dev_count(); ++i) {
    ggml_backend_dev_t d = ggml_backend_dev_get(i);
    if (ggml_backend_dev_type(d) == GGML_BACKEND_DEVICE_TYPE_GPU) return d;
  }
  return nullptr;
}

TEST(InputWrites, WritesIntoHostMemoryTakeGgmlsOwnPath) {
  ASSERT_TRUE(install_input_writes().is_ok());
  ggml_backend_dev_t cpu = ggml_backend_dev_by_type(GGML_BACKEND_DEVICE_TYPE_CPU);
  Tensors ts(ggml_backend_dev_buffer_type(cpu));
  ASSERT_NE(ts.buffer, nullptr);
  const uint64_t before = queued_input_writes();
  for (int i = 0; i < kTensors; ++i) ggml_backend_tensor_set(ts.t[i], values(i).data(), 0, sizeof(float) * kFloats);
  EXPECT_EQ(queued_input_writes(), before);
  for (int i = 0; i < kTensors; ++i) EXPECT_EQ(read(ts.t[i]), values(i)) << "tensor " << i;
}

TEST(InputWrites, QueuedWritesAreOnTheGpuBeforeItIsReadOrComputes) {
  ggml_backend_dev_t gpu = first_gpu();
  if (gpu == nullptr) GTEST_SKIP() << "no GPU here: nothing is queued";
  ASSERT_TRUE(install_input_writes().is_ok());
  Tensors ts(ggml_backend_dev_buffer_type(gpu));
  ASSERT_NE(ts.buffer, nullptr);
  ggml_backend_t backend = ggml_backend_dev_init(gpu, nullptr);
  ASSERT_NE(backend, nullptr);

  const uint64_t before = queued_input_writes();
  for (int i = 0; i < kTensors; ++i) ggml_backend_tensor_set(ts.t[i], values(i).data(), 0, sizeof(float) * kFloats);
  // Interleaved with writes that fill the page-locked staging more than once.
  std::vector<std::vector<float>> big(kBig, std::vector<float>(kBigFloats));
  for (int i = 0; i < kBig; ++i) {
    for (int j = 0; j < kBigFloats; ++j) big[i][j] = static_cast<float>(i * 7 + j % 1000);
    ggml_backend_tensor_set(ts.big[i], big[i].data(), 0, sizeof(float) * kBigFloats);
  }
  EXPECT_EQ(queued_input_writes() - before, static_cast<uint64_t>(kTensors + kBig));
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

}  // namespace
}  // namespace tandem::worker
