// Named model shapes for `tandem synth --preset`.
#pragma once

#include <string>
#include <vector>

#include "common/status.h"
#include "synth/model_spec.h"

namespace tandem::synth {

struct PresetInfo {
  std::string name;
  std::string summary;
};

// tiny, tiny-qwen3moe, m3-proxy, m3 (see docs/synth.md for what each is for).
std::vector<PresetInfo> presets();

// The spec of preset `name`; an error lists the known presets.
Result<ModelSpec> preset(const std::string& name);

// Parses a weight type name (F32, F16, Q8_0, Q4_K, IQ4_XS; any case) into a ggml_type.
Result<int> parse_weight_type(const std::string& name);

}  // namespace tandem::synth
