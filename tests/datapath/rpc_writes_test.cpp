// The head's writes into its workers (datapath/rpc_writes.h), on the CPU, through a real ggml
// scheduler and RPC servers in child processes: ggml's own, and tandem's RPC child, which takes the
// head's markers. Each mechanism must give the results of ggml's own path while sending less:
// a step input read through several views crosses once (input slots on any server, reuse markers
// to a tandem worker), a worker's result goes on to the next worker read once, a mask goes as runs.
#include "datapath/rpc_writes.h"

#include "datapath/head_session.h"

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
  auto session = open_session(rpc_writes({}, /*slot_bytes=*/1 << 20));
  ASSERT_NE(session, nullptr);
  ViewsOfAnInput g(worker, kElements);
  for (int seed = 0; seed < kRuns; ++seed) ASSERT_TRUE(g.run(seed));
  const RpcWriteStats seen = session->stats().rpc;
  EXPECT_EQ(seen.slotted_inputs, static_cast<uint64_t>(kRuns * (kFullViews + kHalfViews)));
  EXPECT_EQ(seen.slot_bytes_not_sent, kRuns * repeated_bytes(kElements));
  EXPECT_EQ(seen.reused_writes, 0u) << "a stock RPC server got a marker";
}

TEST(RpcWrites, ATandemWorkerGetsARepeatedInputOnceAndCopiesItForTheOtherViews) {
  CpuRpcServer server(/*tandem_child=*/true);
  ggml_backend_dev_t worker = rpc_worker(server);
  ASSERT_NE(worker, nullptr) << "tandem's RPC child did not start on " << server.endpoint();
  auto session = open_session(rpc_writes({server.endpoint()}));
  ASSERT_NE(session, nullptr);
  ViewsOfAnInput g(worker, kElements);
  for (int seed = 0; seed < kRuns; ++seed) ASSERT_TRUE(g.run(seed));
  const uint64_t copies = static_cast<uint64_t>(kRuns * (kFullViews - 1 + kHalfViews - 1));
  const RpcWriteStats seen = session->stats().rpc;
  EXPECT_EQ(seen.reused_writes, copies);
  // The scheduler copies one host tensor in one run: known equal without comparing the bytes.
  EXPECT_EQ(seen.identified_writes, copies);
  EXPECT_EQ(seen.bytes_not_sent, kRuns * repeated_bytes(kElements));
}

TEST(RpcWrites, AResultOneServerMadeGoesOnToTheNextReadOnceARun) {
  CpuRpcServer first, second;
  ggml_backend_dev_t a = rpc_worker(first), b = rpc_worker(second);
  ASSERT_NE(a, nullptr) << "ggml's RPC server did not start on " << first.endpoint();
  ASSERT_NE(b, nullptr) << "ggml's RPC server did not start on " << second.endpoint();
  auto session = open_session(rpc_writes());
  ASSERT_NE(session, nullptr);
  // u + x on the first server; every view of it read by additions on the second.
  ViewsOfAnInput g(b, kElements, a, /*views_of_result=*/true);
  for (int seed = 0; seed < kRuns; ++seed) ASSERT_TRUE(g.run(seed));
  // Per run each view is a copy of its own; the first of each extent is read, the others are not.
  const RpcWriteStats seen = session->stats().rpc;
  EXPECT_EQ(seen.relayed_results, static_cast<uint64_t>(kRuns * (kFullViews - 1 + kHalfViews - 1)));
  EXPECT_EQ(seen.relayed_bytes_not_read, kRuns * repeated_bytes(kElements));
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
  auto session = open_session(rpc_writes({}, 0, {server.endpoint()}));
  ASSERT_NE(session, nullptr);
  const std::vector<float> mask = causal_mask();
  OnDevice input(worker, static_cast<int64_t>(mask.size()), GGML_BACKEND_BUFFER_USAGE_COMPUTE);
  ggml_backend_tensor_set(input.t, mask.data(), 0, sizeof(float) * mask.size());
  EXPECT_TRUE(same_bits(input.read(), mask));
  EXPECT_EQ(session->stats().rpc.run_inputs, 1u);
  EXPECT_GT(session->stats().rpc.run_bytes_not_sent, sizeof(float) * mask.size() * 7 / 8);

  std::vector<float> noise(mask.size());
  for (size_t i = 0; i < noise.size(); ++i) noise[i] = static_cast<float>((i * 2654435761u) % 1000003) * 0.5f;
  ggml_backend_tensor_set(input.t, noise.data(), 0, sizeof(float) * noise.size());
  EXPECT_TRUE(same_bits(input.read(), noise));
  EXPECT_EQ(session->stats().rpc.run_inputs, 1u) << "bytes that are no runs went as runs";
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
    auto session = open_session(rpc_writes());
    ASSERT_NE(session, nullptr);
    ggml_backend_tensor_set(weight.t, v.data(), 0, sizeof(float) * v.size());
    EXPECT_EQ(session->stats().rpc.writes, 0u) << "a weight took the queued path";
    for (int k = 1; k <= 3; ++k) {
      for (float& x : v) x += 1.0f;
      ggml_backend_tensor_set(input.t, v.data(), 0, sizeof(float) * v.size());
    }
    EXPECT_EQ(session->stats().rpc.writes, 3u);
    EXPECT_TRUE(same_bits(input.read(), v)) << "the last queued write is not what the server holds";
  }
  // The session's hooks went with it: ggml's own path writes, and another session may open.
  for (float& x : v) x += 1.0f;
  ggml_backend_tensor_set(input.t, v.data(), 0, sizeof(float) * v.size());
  EXPECT_TRUE(same_bits(input.read(), v));
  EXPECT_NE(open_session(), nullptr);
  EXPECT_TRUE(same_bits(weight.read(), w));
}

}  // namespace
}  // namespace tandem::datapath
