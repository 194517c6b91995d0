// The head's queued copies of a step's inputs into its own GPUs (engine/local_inputs.h), through a
// real ggml scheduler: an input read through several views by ops on the device, as MiniMax-M3's
// sparse layers read their masks. On the CPU nothing may be queued (and the launch interposer must
// be reached); on a GPU (the benchmark machine builds this file by hand) every copy must be on the
// device before the split reads it, and repeats must come from the first copy.
#include "engine/local_inputs.h"

#include <gtest/gtest.h>

#include <memory>
#include <vector>

#include "engine/sched_hooks.h"
#include "ggml-alloc.h"
#include "ggml-backend.h"
#include "ggml.h"

namespace tandem::engine {
namespace {

constexpr int kFullViews = 6, kHalfViews = 2;

ggml_backend_dev_t first_gpu() {
  for (size_t i = 0; i < ggml_backend_dev_count(); ++i) {
    ggml_backend_dev_t d = ggml_backend_dev_get(i);
    if (ggml_backend_dev_type(d) == GGML_BACKEND_DEVICE_TYPE_GPU) return d;
  }
  return nullptr;
}

// acc = w + x (read kFullViews times, each through a view of its own) + x's second half (kHalfViews
// times, broadcast over both halves); w is a weight on `dev`, which pulls the additions there.
class ViewsOfAnInput {
 public:
  ViewsOfAnInput(ggml_backend_dev_t dev, int64_t n) : n_(n) {
    ggml_init_params wp{ggml_tensor_overhead() * 2, nullptr, true};
    wctx_ = ggml_init(wp);
    w_ = ggml_new_tensor_1d(wctx_, GGML_TYPE_F32, n);
    wbuf_ = ggml_backend_alloc_ctx_tensors_from_buft(wctx_, ggml_backend_dev_buffer_type(dev));
    ggml_backend_buffer_set_usage(wbuf_, GGML_BACKEND_BUFFER_USAGE_WEIGHTS);
    w_values_.resize(n);
    for (int64_t j = 0; j < n; ++j) w_values_[j] = static_cast<float>(j % 101);
    ggml_backend_tensor_set(w_, w_values_.data(), 0, sizeof(float) * n);

    ggml_init_params gp{ggml_tensor_overhead() * 64 + ggml_graph_overhead(), nullptr, true};
    gctx_ = ggml_init(gp);
    x_ = ggml_new_tensor_1d(gctx_, GGML_TYPE_F32, n);
    ggml_set_input(x_);
    ggml_tensor* acc = w_;
    for (int i = 0; i < kFullViews; ++i) acc = ggml_add(gctx_, acc, ggml_view_1d(gctx_, x_, n, 0));
    for (int i = 0; i < kHalfViews; ++i) acc = ggml_add(gctx_, acc, ggml_view_1d(gctx_, x_, n / 2, sizeof(float) * (n / 2)));
    ggml_set_output(acc);
    out_ = acc;
    graph_ = ggml_new_graph(gctx_);
    ggml_build_forward_expand(graph_, out_);

    backends_.push_back(ggml_backend_dev_init(dev, nullptr));
    if (ggml_backend_dev_type(dev) != GGML_BACKEND_DEVICE_TYPE_CPU) {
      backends_.push_back(ggml_backend_dev_init(ggml_backend_dev_by_type(GGML_BACKEND_DEVICE_TYPE_CPU), nullptr));
    }
    sched_ = ggml_backend_sched_new(backends_.data(), nullptr, static_cast<int>(backends_.size()), GGML_DEFAULT_GRAPH_SIZE,
                                    false, true);
  }
  ~ViewsOfAnInput() {
    ggml_backend_sched_free(sched_);
    for (ggml_backend_t b : backends_) ggml_backend_free(b);
    ggml_backend_buffer_free(wbuf_);
    ggml_free(gctx_);
    ggml_free(wctx_);
  }

  // Runs the graph on x = `seed`-derived values; true when the result is what the host computes.
  ::testing::AssertionResult run(int seed) {
    if (!ggml_backend_sched_alloc_graph(sched_, graph_)) return ::testing::AssertionFailure() << "allocating the graph failed";
    std::vector<float> x(n_);
    for (int64_t j = 0; j < n_; ++j) x[j] = static_cast<float>((seed * 7 + j) % 89);
    ggml_backend_tensor_set(x_, x.data(), 0, sizeof(float) * n_);
    if (ggml_backend_sched_graph_compute(sched_, graph_) != GGML_STATUS_SUCCESS) {
      return ::testing::AssertionFailure() << "computing failed";
    }
    std::vector<float> got(n_);
    ggml_backend_tensor_get(out_, got.data(), 0, sizeof(float) * n_);
    ggml_backend_sched_reset(sched_);
    for (int64_t j = 0; j < n_; ++j) {
      const float want = w_values_[j] + kFullViews * x[j] + kHalfViews * x[n_ / 2 + j % (n_ / 2)];
      if (got[j] != want) {
        return ::testing::AssertionFailure() << "seed " << seed << ": element " << j << " is " << got[j] << ", not " << want;
      }
    }
    return ::testing::AssertionSuccess();
  }
  int splits() const { return ggml_backend_sched_get_n_splits(sched_); }

 private:
  int64_t n_;
  ggml_context *wctx_ = nullptr, *gctx_ = nullptr;
  ggml_tensor *w_ = nullptr, *x_ = nullptr, *out_ = nullptr;
  ggml_backend_buffer_t wbuf_ = nullptr;
  std::vector<float> w_values_;
  ggml_cgraph* graph_ = nullptr;
  std::vector<ggml_backend_t> backends_;
  ggml_backend_sched_t sched_ = nullptr;
};

TEST(LocalInputs, OnTheCpuNothingIsQueuedAndLaunchesAreSeen) {
  LocalInputCopies on;
  ViewsOfAnInput g(ggml_backend_dev_by_type(GGML_BACKEND_DEVICE_TYPE_CPU), 256);
  const uint64_t staged = LocalInputCopies::staged(), repeated = LocalInputCopies::repeated();
  const uint64_t launches = LocalInputCopies::launches_seen(), runs = split_profile().runs;
  for (int seed = 0; seed < 3; ++seed) ASSERT_TRUE(g.run(seed));
  EXPECT_EQ(split_profile().runs - runs, 3u) << "the scheduler interposer was not reached";
  EXPECT_GE(LocalInputCopies::launches_seen() - launches, 3u) << "the launch interposer was not reached";
  EXPECT_EQ(LocalInputCopies::staged(), staged);
  EXPECT_EQ(LocalInputCopies::repeated(), repeated);
}

// Elements: small (a decode step's masks), and larger than what is staged (a long prompt's).
class LocalInputsOnAGpu : public ::testing::TestWithParam<int64_t> {};

TEST_P(LocalInputsOnAGpu, EveryCopyIsOnTheDeviceBeforeTheSplitReadsIt) {
  ggml_backend_dev_t gpu = first_gpu();
  if (gpu == nullptr) GTEST_SKIP() << "no GPU here";
  const int64_t n = GetParam();
  ViewsOfAnInput g(gpu, n);
  {
    LocalInputCopies on;
    const uint64_t repeated = LocalInputCopies::repeated(), spared = LocalInputCopies::bytes_not_copied();
    const uint64_t staged = LocalInputCopies::staged();
    constexpr int kRuns = 20;
    for (int seed = 0; seed < kRuns; ++seed) ASSERT_TRUE(g.run(seed));
    EXPECT_GE(g.splits(), 1);
    // Per run: the first full view and the first half view are copied from host memory (staged
    // when small enough), the others from them on the device.
    EXPECT_EQ(LocalInputCopies::repeated() - repeated, static_cast<uint64_t>(kRuns * (kFullViews - 1 + kHalfViews - 1)));
    EXPECT_EQ(LocalInputCopies::bytes_not_copied() - spared,
              static_cast<uint64_t>(kRuns) * sizeof(float) * ((kFullViews - 1) * n + (kHalfViews - 1) * (n / 2)));
    EXPECT_GT(LocalInputCopies::staged() - staged, 0u);
  }
  // Off: ggml's own copies, the same results, nothing counted.
  const uint64_t repeated = LocalInputCopies::repeated();
  for (int seed = 100; seed < 103; ++seed) ASSERT_TRUE(g.run(seed));
  EXPECT_EQ(LocalInputCopies::repeated(), repeated);
}

INSTANTIATE_TEST_SUITE_P(Sizes, LocalInputsOnAGpu, ::testing::Values(int64_t{256}, int64_t{5} << 20));

}  // namespace
}  // namespace tandem::engine
