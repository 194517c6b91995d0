// The FFN tensor split's device: llama.cpp's meta device over the offload devices, driven by
// tandem's split policy (plan/ffn_split.h) instead of llama.cpp's own.
#pragma once

#include <vector>

#include "common/status.h"
#include "plan/model_info.h"

struct ggml_backend_device;

namespace tandem::engine {

// One device that holds every layer of `info` on all of `devices` at once: the FFNs and the output
// head split across them, everything else whole on each. It lives as long as the process (ggml
// keeps meta devices for good). Errors say which tensor cannot be split.
Result<ggml_backend_device*> ffn_split_device(const plan::ModelInfo& info,
                                              const std::vector<ggml_backend_device*>& devices);

}  // namespace tandem::engine
