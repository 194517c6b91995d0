#include "engine/ffn_device.h"

#include <dlfcn.h>

#include <atomic>
#include <cstring>
#include <deque>
#include <mutex>

#include "ggml-backend.h"
#include "plan/ffn_split.h"

namespace {
std::atomic<bool> anchor_arange{false};
}  // namespace

// ggml's meta device derives each operation's split from its sources and aborts on one that has
// none: ggml_arange, which minimax-m3's sparse attention builds its gather positions with. Under the
// FFN split libllama's calls reach this definition (the executable's symbol comes first), which
// gives each arange a one-element source that is never read, a leaf like every input, so the meta
// device runs it whole on every device.
extern "C" ggml_tensor* ggml_arange(ggml_context* ctx, float start, float stop, float step) {
  using ArangeFn = ggml_tensor* (*)(ggml_context*, float, float, float);
  static const auto real = reinterpret_cast<ArangeFn>(dlsym(RTLD_NEXT, "ggml_arange"));
  ggml_tensor* t = real(ctx, start, stop, step);
  if (t != nullptr && anchor_arange.load(std::memory_order_relaxed))
    t->src[0] = ggml_new_tensor_1d(ctx, GGML_TYPE_F32, 1);
  return t;
}

namespace tandem::engine {
namespace {

ggml_backend_meta_split_state to_ggml(const plan::FfnSplitState& st, size_t n_devices) {
  ggml_backend_meta_split_state out;
  std::memset(&out, 0, sizeof out);
  out.nr[0] = 1;
  out.n_segments = 1;
  switch (st.axis) {
    case plan::FfnSplitState::Axis::mirrored:
      out.axis = GGML_BACKEND_SPLIT_AXIS_MIRRORED;
      return out;
    case plan::FfnSplitState::Axis::partial:
      out.axis = GGML_BACKEND_SPLIT_AXIS_PARTIAL;
      break;
    case plan::FfnSplitState::Axis::rows:
      out.axis = GGML_BACKEND_SPLIT_AXIS_1;
      out.nr[0] = st.segment_repeats;
      break;
    case plan::FfnSplitState::Axis::columns:
      out.axis = GGML_BACKEND_SPLIT_AXIS_0;
      out.nr[0] = st.segment_repeats;
      break;
  }
  for (size_t j = 0; j < n_devices && j < st.ne.size(); ++j) out.ne[j] = st.ne[j];
  return out;
}

ggml_backend_meta_split_state split_state(const ggml_tensor* tensor, void* user) {
  const auto* policy = static_cast<const plan::FfnSplit*>(user);
  return to_ggml(policy->state(tensor->name), policy->n_devices());
}

}  // namespace

Result<ggml_backend_device*> ffn_split_device(const plan::ModelInfo& info,
                                              const std::vector<ggml_backend_device*>& devices) {
  if (devices.size() > GGML_BACKEND_META_MAX_DEVICES) {
    return Status::invalid_argument("the FFN tensor split takes at most " +
                                    std::to_string(GGML_BACKEND_META_MAX_DEVICES) + " devices, got " +
                                    std::to_string(devices.size()));
  }
  // libllama must call the definition above, not ggml's own.
  using ArangeFn = ggml_tensor* (*)(ggml_context*, float, float, float);
  if (reinterpret_cast<ArangeFn>(dlsym(RTLD_DEFAULT, "ggml_arange")) != &ggml_arange) {
    return Status::internal(
        "the FFN tensor split: this executable does not export ggml_arange ahead of ggml's own (a build problem)");
  }
  anchor_arange = true;
  auto policy = plan::FfnSplit::make(info, devices.size());
  if (!policy.is_ok()) return policy.status().with_context("the FFN tensor split");
  // ggml keeps every meta device, and its policy pointer, for the life of the process.
  static std::mutex mu;
  static std::deque<plan::FfnSplit> policies;
  std::lock_guard<std::mutex> lock(mu);
  policies.push_back(std::move(policy.value()));
  std::vector<ggml_backend_dev_t> devs(devices.begin(), devices.end());
  return ggml_backend_meta_device(devs.data(), devs.size(), split_state, &policies.back());
}

}  // namespace tandem::engine
