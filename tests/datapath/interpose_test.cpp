// The one dispatch of tandem's replacements of ggml's functions, and the start-up self-check.
#include "datapath/interpose.h"

#include <dlfcn.h>
#include <gtest/gtest.h>

#include <atomic>
#include <string>

#include "datapath/self_check.h"
#include "ggml-alloc.h"
#include "ggml-backend.h"
#include "ggml.h"

namespace tandem::datapath {
namespace {

// A CPU backend, two 4-float tensors and the graph a + a.
class OnTheCpu : public ::testing::Test {
 protected:
  void SetUp() override {
    cpu_ = ggml_backend_init_by_type(GGML_BACKEND_DEVICE_TYPE_CPU, nullptr);
    ASSERT_NE(cpu_, nullptr);
    ggml_init_params params{ggml_tensor_overhead() * 8 + ggml_graph_overhead(), nullptr, true};
    ctx_ = ggml_init(params);
    a_ = ggml_new_tensor_1d(ctx_, GGML_TYPE_F32, 4);
    b_ = ggml_new_tensor_1d(ctx_, GGML_TYPE_F32, 4);
    sum_ = ggml_add(ctx_, a_, a_);
    buf_ = ggml_backend_alloc_ctx_tensors(ctx_, cpu_);
    ASSERT_NE(buf_, nullptr);
    graph_ = ggml_new_graph(ctx_);
    ggml_build_forward_expand(graph_, sum_);
  }
  void TearDown() override {
    if (buf_ != nullptr) ggml_backend_buffer_free(buf_);
    ggml_free(ctx_);
    ggml_backend_free(cpu_);
  }
  ggml_backend_t cpu_ = nullptr;
  ggml_context* ctx_ = nullptr;
  ggml_tensor *a_ = nullptr, *b_ = nullptr, *sum_ = nullptr;
  ggml_backend_buffer_t buf_ = nullptr;
  ggml_cgraph* graph_ = nullptr;
};

TEST(Interposition, GgmlsOwnCallsReachEveryReplacement) {
  const Status s = check_interposition();
  EXPECT_TRUE(s.is_ok()) << s.message();
  EXPECT_TRUE(tensor_set_interposed());
}

TEST(Interposition, ADataPathGgmlDoesNotReachIsRefusedNamingEachFunction) {
  void* module = ::dlopen(TANDEM_SHADOW_MODULE, RTLD_NOW | RTLD_LOCAL);
  ASSERT_NE(module, nullptr) << ::dlerror();
  using CheckFn = const char* (*)();
  auto check = reinterpret_cast<CheckFn>(::dlsym(module, "tandem_shadow_check"));
  ASSERT_NE(check, nullptr);
  const std::string message = check();
  EXPECT_NE(message.find("ggml interposition self-check failed"), std::string::npos) << message;
  for (const char* name : kInterposedNames) {
    EXPECT_NE(message.find(std::string(name) + " resolves to the definition in"), std::string::npos)
        << name << ": " << message;
  }
  EXPECT_NE(message.find("ggml_backend_tensor_copy is not reached by ggml's own calls"), std::string::npos) << message;
  EXPECT_NE(message.find("Rebuild against the pinned llama.cpp"), std::string::npos) << message;
  // Left loaded: unloading a module that defined ggml's symbols gains the test nothing.
}

std::atomic<int> g_runs{0}, g_launches{0}, g_syncs{0}, g_copies{0}, g_async_copies{0}, g_fences{0}, g_graphs{0};
TEST_F(OnTheCpu, SchedulerHooksWrapWhatTheSchedulerAndGgmlDo) {
  struct Counting final : SchedulerHooks {
    enum ggml_status run(ggml_backend_sched_t s, ggml_cgraph* g, SchedComputeFn real) override {
      ++g_runs;
      return real(s, g);
    }
    enum ggml_status launch(ggml_backend_t b, ggml_cgraph* g, LaunchFn real) override {
      ++g_launches;
      return real(b, g);
    }
    void synchronize(ggml_backend_t b, SynchronizeFn real) override {
      ++g_syncs;
      real(b);
    }
    void copy(const ggml_tensor* s, ggml_tensor* d, TensorCopyFn real) override {
      ++g_copies;
      real(s, d);
    }
    void copy_async(ggml_backend_t from, ggml_backend_t to, const ggml_tensor* s, ggml_tensor* d,
                    CopyAsyncFn real) override {
      ++g_async_copies;
      real(from, to, s, d);
    }
    bool tensor_set(ggml_tensor*, const void*, size_t, size_t) override { return false; }
    void made_arange(ggml_context*, ggml_tensor*) override {}
  };
  static Counting hooks;
  ASSERT_TRUE(set_scheduler_hooks(&hooks));
  static Counting other;
  EXPECT_FALSE(set_scheduler_hooks(&other)) << "a second set of hooks while one is installed";
  const float in[4] = {1, 2, 3, 4};
  float out[4] = {};
  ggml_backend_tensor_set(a_, in, 0, sizeof in);
  ggml_backend_tensor_copy_async(cpu_, cpu_, a_, b_);
  ggml_backend_sched_t sched = ggml_backend_sched_new(&cpu_, nullptr, 1, 16, false, false);
  ASSERT_EQ(ggml_backend_sched_graph_compute(sched, graph_), GGML_STATUS_SUCCESS);
  ggml_backend_sched_free(sched);
  set_scheduler_hooks(nullptr);
  ggml_backend_tensor_get(sum_, out, 0, sizeof out);
  EXPECT_EQ(out[3], 8.0f);
  ggml_backend_tensor_get(b_, out, 0, sizeof out);
  EXPECT_EQ(out[3], 4.0f) << "the copy went through the hook to ggml's own";
  EXPECT_EQ(g_copies.load(), 1);
  EXPECT_EQ(g_async_copies.load(), 1);
  EXPECT_EQ(g_runs.load(), 1);
  EXPECT_GE(g_launches.load(), 1);
  EXPECT_GE(g_syncs.load(), 2);
  const int runs = g_runs;
  ggml_backend_sched_t again = ggml_backend_sched_new(&cpu_, nullptr, 1, 16, false, false);
  ASSERT_EQ(ggml_backend_sched_graph_compute(again, graph_), GGML_STATUS_SUCCESS);
  ggml_backend_sched_free(again);
  EXPECT_EQ(g_runs.load(), runs) << "uninstalled hooks are not called";
}

TEST_F(OnTheCpu, TheFenceRunsBeforeEveryCallThatReadsRunsOnOrReleasesDeviceMemory) {
  struct Counting final : DeviceFenceHooks {
    void fence() override { ++g_fences; }
    enum ggml_status graph(ggml_backend_t b, ggml_cgraph* g, LaunchFn real) override {
      ++g_graphs;
      return real(b, g);
    }
    bool tensor_set(ggml_tensor*, const void*, size_t, size_t) override { return false; }
  };
  static Counting fence;
  ASSERT_TRUE(set_device_fence_hooks(&fence));
  const float in[4] = {1, 2, 3, 4};
  float out[4] = {};
  ggml_backend_tensor_set(a_, in, 0, sizeof in);
  EXPECT_EQ(g_fences.load(), 0) << "a write is not fenced";
  ggml_backend_tensor_get(a_, out, 0, sizeof out);
  EXPECT_EQ(g_fences.load(), 1);
  ggml_backend_tensor_memset(b_, 0, 0, ggml_nbytes(b_));
  EXPECT_EQ(g_fences.load(), 2);
  ASSERT_EQ(ggml_backend_graph_compute(cpu_, graph_), GGML_STATUS_SUCCESS);
  EXPECT_EQ(g_graphs.load(), 1);
  ggml_backend_buffer_clear(buf_, 0);
  EXPECT_EQ(g_fences.load(), 3);
  ggml_backend_buffer_free(buf_);
  buf_ = nullptr;
  EXPECT_EQ(g_fences.load(), 4);
  set_device_fence_hooks(nullptr);
  EXPECT_EQ(out[3], 4.0f);
}

std::atomic<int> g_claimed{0};
TEST_F(OnTheCpu, ATensorSetHookThatPlacesTheDataKeepsGgmlsOwnFromWritingIt) {
  static ggml_tensor* claimed = nullptr;
  claimed = b_;
  const TensorSetHook hook = [](ggml_tensor* t, const void*, size_t, size_t) {
    if (t != claimed) return false;
    ++g_claimed;
    return true;
  };
  ASSERT_TRUE(add_tensor_set_hook(hook));
  EXPECT_FALSE(add_tensor_set_hook(hook)) << "installed twice";
  const float zeros[4] = {}, in[4] = {5, 6, 7, 8};
  real_tensor_set()(b_, zeros, 0, sizeof zeros);
  ggml_backend_tensor_set(a_, in, 0, sizeof in);
  ggml_backend_tensor_set(b_, in, 0, sizeof in);
  float out[4] = {};
  ggml_backend_tensor_get(b_, out, 0, sizeof out);
  EXPECT_EQ(out[0], 0.0f) << "the hook placed it: ggml's own must not have written it";
  EXPECT_EQ(g_claimed.load(), 1);
  remove_tensor_set_hook(hook);
  ggml_backend_tensor_set(b_, in, 0, sizeof in);
  ggml_backend_tensor_get(b_, out, 0, sizeof out);
  EXPECT_EQ(out[0], 5.0f);
  EXPECT_EQ(g_claimed.load(), 1);
}

}  // namespace
}  // namespace tandem::datapath
