#include "engine/ffn_device.h"

#include <cstring>
#include <deque>
#include <mutex>

#include "ggml-backend.h"
#include "plan/ffn_split.h"

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
  // Its graphs' aranges are anchored by the head's session (datapath::HeadOptions::anchor_arange),
  // whose replacement of ggml_arange the start-up self-check proves reached.
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
