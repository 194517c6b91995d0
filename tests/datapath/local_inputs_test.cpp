// The head's queued copies of a step's inputs into its own GPUs (datapath/local_inputs.h), through a
// real ggml scheduler: an input read through several views by ops on the device, as MiniMax-M3's
// sparse layers read their masks. On the CPU nothing may be queued (and the launch interposer must
// be reached); on a GPU (the benchmark machine builds this file by hand) every copy must be on the
// device before the split reads it, repeats must come from the first copy, and a result computed
// by an RPC server (ggml's, on the CPU, in a child process) must be read before the split runs.
#include "datapath/local_inputs.h"

#include <gtest/gtest.h>

#include <cstdint>
#include <tuple>

#include "datapath/views_of_an_input.h"

namespace tandem::datapath {
namespace {

using namespace test_support;

TEST(LocalInputs, OnTheCpuNothingIsQueuedAndLaunchesAreSeen) {
  auto on = open_session(local_inputs());
  ASSERT_NE(on, nullptr);
  ViewsOfAnInput g(ggml_backend_dev_by_type(GGML_BACKEND_DEVICE_TYPE_CPU), 256);
  for (int seed = 0; seed < 3; ++seed) ASSERT_TRUE(g.run(seed));
  const HeadStats seen = on->stats();
  EXPECT_EQ(seen.profile.runs, 3u) << "the scheduler interposer was not reached";
  EXPECT_GE(seen.profile.launches, 3u) << "the launch interposer was not reached";
  EXPECT_GT(seen.profile.launch_s, 0.0);
  EXPECT_EQ(seen.local.staged, 0u);
  EXPECT_EQ(seen.local.repeated, 0u);
}

// Elements: small (a decode step's masks), and larger than what is staged (a long prompt's); and
// the experimental input slots (one copy per run that the copies point at) or not.
class LocalInputsOnAGpu : public ::testing::TestWithParam<std::tuple<int64_t, bool>> {};

TEST_P(LocalInputsOnAGpu, EveryCopyIsOnTheDeviceBeforeTheSplitReadsIt) {
  ggml_backend_dev_t gpu = first_gpu();
  if (gpu == nullptr) GTEST_SKIP() << "no GPU here";
  const auto [n, slots] = GetParam();
  ViewsOfAnInput g(gpu, n);
  {
    auto on = open_session(local_inputs(slots ? kInputSlotBytes : 0));
    ASSERT_NE(on, nullptr);
    constexpr int kRuns = 20;
    for (int seed = 0; seed < kRuns; ++seed) ASSERT_TRUE(g.run(seed));
    EXPECT_GE(g.splits(), 1);
    // Per run: the first full view and the first half view are copied from host memory (staged
    // when small enough), the others from them on the device (or, with slots, point at them).
    const LocalInputStats seen = on->stats().local;
    EXPECT_EQ(seen.repeated, static_cast<uint64_t>(kRuns * (kFullViews - 1 + kHalfViews - 1)));
    EXPECT_EQ(seen.bytes_not_copied,
              static_cast<uint64_t>(kRuns) * sizeof(float) * ((kFullViews - 1) * n + (kHalfViews - 1) * (n / 2)));
    EXPECT_GT(seen.staged, 0u);
  }
  // Off: ggml's own copies, the same results, nothing counted (a graph of its own: slots, and what
  // points at them, go with the session that made them).
  auto off_session = open_session();
  ASSERT_NE(off_session, nullptr);
  ViewsOfAnInput off(gpu, n);
  for (int seed = 100; seed < 103; ++seed) ASSERT_TRUE(off.run(seed));
  EXPECT_EQ(off_session->stats().local.repeated, 0u);
}

INSTANTIATE_TEST_SUITE_P(Sizes, LocalInputsOnAGpu,
                         ::testing::Combine(::testing::Values(int64_t{256}, int64_t{5} << 20), ::testing::Bool()));

TEST(LocalInputs, AWorkersResultIsReadWhenTheSplitThatNeedsItLaunches) {
  ggml_backend_dev_t gpu = first_gpu();
  if (gpu == nullptr) GTEST_SKIP() << "no GPU here";
  CpuRpcServer server;
  ggml_backend_dev_t worker = rpc_worker(server);
  ASSERT_NE(worker, nullptr) << "ggml's RPC server did not start on " << server.endpoint();
  ViewsOfAnInput g(gpu, 4096, worker);
  auto on = open_session(local_inputs());
  ASSERT_NE(on, nullptr);
  constexpr int kRuns = 20;
  for (int seed = 0; seed < kRuns; ++seed) ASSERT_TRUE(g.run(seed));
  EXPECT_GE(g.splits(), 2);
  EXPECT_EQ(on->stats().local.deferred, static_cast<uint64_t>(kRuns));
  EXPECT_GT(on->stats().local.repeated, 0u);
}

// Each view of a worker's result is a copy of its own for ggml's scheduler; the same bytes are
// read from the server once per split and copied on the device for the other views.
TEST(LocalInputs, AWorkersResultReadThroughSeveralViewsCrossesOnce) {
  ggml_backend_dev_t gpu = first_gpu();
  if (gpu == nullptr) GTEST_SKIP() << "no GPU here";
  CpuRpcServer server;
  ggml_backend_dev_t worker = rpc_worker(server);
  ASSERT_NE(worker, nullptr) << "ggml's RPC server did not start on " << server.endpoint();
  ViewsOfAnInput g(gpu, 4096, worker, /*views_of_result=*/true);
  auto on = open_session(local_inputs());
  ASSERT_NE(on, nullptr);
  constexpr int kRuns = 20;
  for (int seed = 0; seed < kRuns; ++seed) ASSERT_TRUE(g.run(seed));
  const LocalInputStats seen = on->stats().local;
  EXPECT_EQ(seen.deferred, static_cast<uint64_t>(kRuns * (kFullViews + kHalfViews)));
  // Per run: the full view read once and the half once; the other views copied on the device.
  EXPECT_EQ(seen.results_repeated, static_cast<uint64_t>(kRuns * (kFullViews + kHalfViews - 2)));
  EXPECT_EQ(seen.result_bytes_not_read,
            static_cast<uint64_t>(kRuns) * sizeof(float) * ((kFullViews - 1) * 4096 + (kHalfViews - 1) * 2048));
}

}  // namespace
}  // namespace tandem::datapath
