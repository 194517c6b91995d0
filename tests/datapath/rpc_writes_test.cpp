// The head's writes into its workers (datapath/rpc_writes.h), on the CPU, through a real ggml
// scheduler and RPC servers in child processes: ggml's own, and tandem's RPC child, which takes the
// head's markers. Each mechanism must give the results of ggml's own path while sending less:
// a step input read through several views crosses once (input slots on any server, reuse markers
// to a tandem worker), a worker's result goes on to the next worker read once, a mask goes as runs.
#include "datapath/rpc_writes.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <vector>

#include "datapath/views_of_an_input.h"

namespace tandem::datapath {
namespace {

using namespace test_support;

constexpr int kRuns = 5;
constexpr int64_t kElements = 8192;  // 32 KiB per full view: above the reuse markers' minimum

// What the views of one run repeat: every full view but the first, every half view but the first.
constexpr uint64_t repeated_bytes(int64_t n) {
  return sizeof(float) * ((kFullViews - 1) * n + (kHalfViews - 1) * (n / 2));
}

TEST(RpcWrites, EveryViewOfAStepInputOnAServerReadsOneCopyInItsSlots) {
  CpuRpcServer server;
  ggml_backend_dev_t worker = rpc_worker(server);
  ASSERT_NE(worker, nullptr) << "ggml's RPC server did not start on " << server.endpoint();
  AsyncRpcWrites writes({}, /*slot_bytes=*/1 << 20);
  ViewsOfAnInput g(worker, kElements);
  const uint64_t slotted = AsyncRpcWrites::slotted_inputs(), not_sent = AsyncRpcWrites::slot_bytes_not_sent();
  const uint64_t reused = AsyncRpcWrites::reused_writes();
  for (int seed = 0; seed < kRuns; ++seed) ASSERT_TRUE(g.run(seed));
  EXPECT_EQ(AsyncRpcWrites::slotted_inputs() - slotted, static_cast<uint64_t>(kRuns * (kFullViews + kHalfViews)));
  EXPECT_EQ(AsyncRpcWrites::slot_bytes_not_sent() - not_sent, kRuns * repeated_bytes(kElements));
  EXPECT_EQ(AsyncRpcWrites::reused_writes(), reused) << "a stock RPC server got a marker";
}

TEST(RpcWrites, ATandemWorkerGetsARepeatedInputOnceAndCopiesItForTheOtherViews) {
  CpuRpcServer server(/*tandem_child=*/true);
  ggml_backend_dev_t worker = rpc_worker(server);
  ASSERT_NE(worker, nullptr) << "tandem's RPC child did not start on " << server.endpoint();
  AsyncRpcWrites writes({server.endpoint()});
  ViewsOfAnInput g(worker, kElements);
  const uint64_t reused = AsyncRpcWrites::reused_writes(), identified = AsyncRpcWrites::identified_writes();
  const uint64_t not_sent = AsyncRpcWrites::bytes_not_sent();
  for (int seed = 0; seed < kRuns; ++seed) ASSERT_TRUE(g.run(seed));
  const uint64_t copies = static_cast<uint64_t>(kRuns * (kFullViews - 1 + kHalfViews - 1));
  EXPECT_EQ(AsyncRpcWrites::reused_writes() - reused, copies);
  // The scheduler copies one host tensor in one run: known equal without comparing the bytes.
  EXPECT_EQ(AsyncRpcWrites::identified_writes() - identified, copies);
  EXPECT_EQ(AsyncRpcWrites::bytes_not_sent() - not_sent, kRuns * repeated_bytes(kElements));
}

TEST(RpcWrites, AResultOneServerMadeGoesOnToTheNextReadOnceARun) {
  CpuRpcServer first, second;
  ggml_backend_dev_t a = rpc_worker(first), b = rpc_worker(second);
  ASSERT_NE(a, nullptr) << "ggml's RPC server did not start on " << first.endpoint();
  ASSERT_NE(b, nullptr) << "ggml's RPC server did not start on " << second.endpoint();
  AsyncRpcWrites writes;
  // u + x on the first server; every view of it read by additions on the second.
  ViewsOfAnInput g(b, kElements, a, /*views_of_result=*/true);
  const uint64_t relayed = AsyncRpcWrites::relayed_results(), not_read = AsyncRpcWrites::relayed_bytes_not_read();
  for (int seed = 0; seed < kRuns; ++seed) ASSERT_TRUE(g.run(seed));
  // Per run each view is a copy of its own; the first of each extent is read, the others are not.
  EXPECT_EQ(AsyncRpcWrites::relayed_results() - relayed,
            static_cast<uint64_t>(kRuns * (kFullViews - 1 + kHalfViews - 1)));
  EXPECT_EQ(AsyncRpcWrites::relayed_bytes_not_read() - not_read, kRuns * repeated_bytes(kElements));
}

// One tensor of `n` floats in a buffer of its own on `dev`, with `usage`.
struct OnDevice {
  OnDevice(ggml_backend_dev_t dev, int64_t n, ggml_backend_buffer_usage usage) {
    ggml_init_params p{ggml_tensor_overhead(), nullptr, true};
    ctx = ggml_init(p);
    t = ggml_new_tensor_1d(ctx, GGML_TYPE_F32, n);
    buffer = ggml_backend_alloc_ctx_tensors_from_buft(ctx, ggml_backend_dev_buffer_type(dev));
    ggml_backend_buffer_set_usage(buffer, usage);
  }
  ~OnDevice() {
    ggml_backend_buffer_free(buffer);
    ggml_free(ctx);
  }
  std::vector<float> read() const {
    std::vector<float> v(ggml_nelements(t));
    ggml_backend_tensor_get(t, v.data(), 0, ggml_nbytes(t));
    return v;
  }
  ggml_context* ctx = nullptr;
  ggml_tensor* t = nullptr;
  ggml_backend_buffer_t buffer = nullptr;
};

// A causal mask over 256 positions for 256 tokens: rows of 0 then -inf, 256 KiB.
std::vector<float> causal_mask() {
  std::vector<float> m(256 * 256);
  for (int r = 0; r < 256; ++r) {
    for (int c = 0; c < 256; ++c) m[r * 256 + c] = c <= r ? 0.0f : -std::numeric_limits<float>::infinity();
  }
  return m;
}

bool same_bits(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), sizeof(float) * a.size()) == 0;
}

TEST(RpcWrites, AMaskReachesATandemWorkerAsRunsBitForBitAndNoiseGoesAsItIs) {
  CpuRpcServer server(/*tandem_child=*/true);
  ggml_backend_dev_t worker = rpc_worker(server);
  ASSERT_NE(worker, nullptr) << "tandem's RPC child did not start on " << server.endpoint();
  AsyncRpcWrites writes({}, 0, {server.endpoint()});
  const std::vector<float> mask = causal_mask();
  OnDevice input(worker, static_cast<int64_t>(mask.size()), GGML_BACKEND_BUFFER_USAGE_COMPUTE);
  const uint64_t runs = AsyncRpcWrites::run_inputs(), not_sent = AsyncRpcWrites::run_bytes_not_sent();
  ggml_backend_tensor_set(input.t, mask.data(), 0, sizeof(float) * mask.size());
  EXPECT_TRUE(same_bits(input.read(), mask));
  EXPECT_EQ(AsyncRpcWrites::run_inputs() - runs, 1u);
  EXPECT_GT(AsyncRpcWrites::run_bytes_not_sent() - not_sent, sizeof(float) * mask.size() * 7 / 8);

  std::vector<float> noise(mask.size());
  for (size_t i = 0; i < noise.size(); ++i) noise[i] = static_cast<float>((i * 2654435761u) % 1000003) * 0.5f;
  ggml_backend_tensor_set(input.t, noise.data(), 0, sizeof(float) * noise.size());
  EXPECT_TRUE(same_bits(input.read(), noise));
  EXPECT_EQ(AsyncRpcWrites::run_inputs() - runs, 1u) << "bytes that are no runs went as runs";
}

TEST(RpcWrites, WeightsKeepGgmlsPathAndNothingIsQueuedOnceTheWritesAreGone) {
  CpuRpcServer server;
  ggml_backend_dev_t worker = rpc_worker(server);
  ASSERT_NE(worker, nullptr) << "ggml's RPC server did not start on " << server.endpoint();
  std::vector<float> v(1024);
  for (size_t i = 0; i < v.size(); ++i) v[i] = static_cast<float>(i) * 0.25f;
  const std::vector<float> w = v;
  OnDevice weight(worker, 1024, GGML_BACKEND_BUFFER_USAGE_WEIGHTS),
      input(worker, 1024, GGML_BACKEND_BUFFER_USAGE_COMPUTE);
  {
    AsyncRpcWrites writes;
    const unsigned long long before = AsyncRpcWrites::writes();
    ggml_backend_tensor_set(weight.t, v.data(), 0, sizeof(float) * v.size());
    EXPECT_EQ(AsyncRpcWrites::writes(), before) << "a weight took the queued path";
    for (int k = 1; k <= 3; ++k) {
      for (float& x : v) x += 1.0f;
      ggml_backend_tensor_set(input.t, v.data(), 0, sizeof(float) * v.size());
    }
    EXPECT_EQ(AsyncRpcWrites::writes() - before, 3u);
    EXPECT_TRUE(same_bits(input.read(), v)) << "the last queued write is not what the server holds";
  }
  const unsigned long long after = AsyncRpcWrites::writes();
  ggml_backend_tensor_set(input.t, v.data(), 0, sizeof(float) * v.size());
  EXPECT_EQ(AsyncRpcWrites::writes(), after);
  EXPECT_TRUE(same_bits(weight.read(), w));
}

}  // namespace
}  // namespace tandem::datapath
