// The head's policy for the scheduler's copies (datapath/copy_policy.h), case by case: every
// combination of what the copy interposer knows, and the routes it is offered, in order.
#include "datapath/copy_policy.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <vector>

namespace tandem::datapath {
namespace {

using R = CopyRoute;

std::vector<R> routes(bool in_run, bool from_worker, bool to_worker, bool host_input) {
  CopyFacts f;
  f.in_run = in_run;
  f.from_worker = from_worker;
  f.to_worker = to_worker;
  f.host_input = host_input;
  const CopyRoutes r = classify(f);
  return std::vector<R>(r.begin(), r.end());
}

TEST(CopyPolicy, AWorkersResultIsMadeHereThenDeferredOrRelayedThenGgmls) {
  // Into the head's GPU (or host memory): made here from the head's input, else read at launch.
  EXPECT_EQ(routes(true, true, false, false), (std::vector<R>{R::cast_here, R::defer_to_launch, R::ggml}));
  // Into another worker: made here, else read once per run and sent on.
  EXPECT_EQ(routes(true, true, true, false), (std::vector<R>{R::cast_here, R::relay, R::ggml}));
}

TEST(CopyPolicy, AStepInputGoesToAWorkersSlotOrTheLocalQueueThenGgmls) {
  EXPECT_EQ(routes(true, false, true, true), (std::vector<R>{R::worker_slot, R::local_queue, R::ggml}));
  EXPECT_EQ(routes(true, false, false, true), (std::vector<R>{R::local_queue, R::ggml}));
}

TEST(CopyPolicy, WeightsAndDeviceCopiesAreGgmlsOwn) {
  // Host memory holding weights, or a copy between two local devices.
  EXPECT_EQ(routes(true, false, true, false), (std::vector<R>{R::ggml}));
  EXPECT_EQ(routes(true, false, false, false), (std::vector<R>{R::ggml}));
}

TEST(CopyPolicy, OutsideARunOfTheSchedulerEveryCopyIsGgmls) {
  for (int bits = 0; bits < 8; ++bits) {
    EXPECT_EQ(routes(false, bits & 1, bits & 2, bits & 4), (std::vector<R>{R::ggml})) << "facts " << bits;
  }
}

TEST(CopyPolicy, GgmlsOwnCopyIsOfferedLastToEveryCopy) {
  for (int bits = 0; bits < 16; ++bits) {
    const std::vector<R> r = routes(bits & 1, bits & 2, bits & 4, bits & 8);
    ASSERT_FALSE(r.empty());
    EXPECT_EQ(r.back(), R::ggml) << "facts " << bits;
    EXPECT_EQ(std::count(r.begin(), r.end(), R::ggml), 1) << "facts " << bits;
  }
}

}  // namespace
}  // namespace tandem::datapath
