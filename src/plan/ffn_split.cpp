#include "plan/ffn_split.h"

#include <numeric>
#include <regex>

#include "ggml.h"

namespace tandem::plan {
namespace {

// "blk.N.ffn_<part><kind>.<weight|bias>": part gate, up, gate_up or down; kind "", "_exps" or
// "_shexp" (dense, routed, shared).
const std::regex& ffn_pattern() {
  static const std::regex re(R"(blk\.(\d+)\.ffn_(gate_up|gate|up|down)(_exps|_shexp)?\.(weight|bias))");
  return re;
}

// Splits `n` elements into `parts` pieces, each a multiple of `granularity` but the last, as equal
// as that allows; empty when some piece would be empty.
std::vector<int64_t> split_counts(int64_t n, int64_t granularity, size_t parts) {
  std::vector<int64_t> out;
  int64_t low = 0;
  for (size_t j = 0; j + 1 < parts; ++j) {
    int64_t high = n * static_cast<int64_t>(j + 1) / static_cast<int64_t>(parts);
    high -= high % granularity;
    out.push_back(high - low);
    low = high;
  }
  out.push_back(n - low);
  for (int64_t c : out) {
    if (c <= 0) return {};
  }
  return out;
}

// The parts of an FFN of width `n` whose down projection is of ggml type `type`: multiples of
// lcm(block, 128) (wide kernels) where every device still gets a part, else of the block alone.
Result<std::vector<int64_t>> ffn_counts(const std::string& down, int64_t n, int type, size_t parts) {
  const int64_t block = ggml_blck_size(static_cast<ggml_type>(type));
  for (int64_t g : {std::lcm<int64_t>(block, 128), block}) {
    auto counts = split_counts(n, g, parts);
    if (!counts.empty()) return counts;
  }
  return Status::invalid_argument(down + " (width " + std::to_string(n) + ", " +
                                  ggml_type_name(static_cast<ggml_type>(type)) + " blocks of " + std::to_string(block) +
                                  ") cannot be split across " + std::to_string(parts) +
                                  " devices: each part must be a whole number of blocks; use the layer split");
}

}  // namespace

std::string tensor_split_parallel_refusal(const ModelInfo& info, uint32_t parallel) {
  if (parallel <= 1 || info.indexer_n_head == 0) return "";
  return "a tensor split serves " + (info.arch.empty() ? std::string("this model") : info.arch) +
         "'s sparse attention one sequence at a time (with more, a second sequence's tokens went wrong "
         "through llama.cpp's meta device): set [model] parallel = 1 (--parallel 1), or use parallelism "
         "\"layer\"";
}

Result<FfnSplit> FfnSplit::make(const ModelInfo& info, size_t n_devices) {
  if (n_devices < 2) return Status::invalid_argument("the FFN tensor split needs at least two devices");
  FfnSplit s;
  s.n_devices_ = n_devices;
  s.device_bytes_.assign(n_devices, 0);
  s.device_read_.assign(n_devices, 0);
  std::unordered_map<std::string, const TensorInfo*> by_name;
  for (const TensorInfo& t : info.tensors) by_name[t.name] = &t;

  auto split_along = [&](const TensorInfo& t, FfnSplitState::Axis axis, const std::vector<int64_t>& counts,
                         uint32_t repeats) {
    FfnSplitState st;
    st.axis = axis;
    st.ne = counts;
    st.segment_repeats = repeats;
    const int dim = axis == FfnSplitState::Axis::rows ? 1 : 0;
    for (size_t d = 0; d < n_devices; ++d) {
      // A device's part is its share of the split dimension (of every repeat of a fused segment).
      const uint64_t part = t.bytes / static_cast<uint64_t>(t.ne[dim]) * static_cast<uint64_t>(counts[d]) * repeats;
      s.device_bytes_[d] += part;
      s.device_read_[d] += tensor_read_bytes(info, t, part);
    }
    s.split_[t.name] = std::move(st);
  };

  for (const TensorInfo& t : info.tensors) {
    std::smatch m;
    bool split = false;
    if (std::regex_match(t.name, m, ffn_pattern())) {
      const std::string part = m[2], kind = m[3], what = m[4];
      const std::string down_name = "blk." + m[1].str() + ".ffn_down" + kind + ".weight";
      auto down = by_name.find(down_name);
      if (down != by_name.end()) {
        const int64_t width = down->second->ne[0];
        auto counts = ffn_counts(down_name, width, down->second->type, n_devices);
        if (!counts.is_ok()) return counts.status();
        if (part == "down" && what == "weight") {
          split_along(t, FfnSplitState::Axis::columns, counts.value(), 1);
          split = true;
        } else if (part == "down" && kind == "_exps") {
          // Each device adds its part of the experts' bias to its partial sum: the bias is divided,
          // not duplicated.
          FfnSplitState st;
          st.axis = FfnSplitState::Axis::partial;
          st.ne = counts.value();
          s.split_[t.name] = std::move(st);
          for (size_t d = 0; d < n_devices; ++d) s.device_bytes_[d] += t.bytes;
          split = true;
        } else if (part != "down") {
          // gate/up along their width; a fused gate+up (or a fused "up" of twice the width) is two
          // segments split alike.
          const int dim = what == "weight" ? 1 : 0;
          const uint32_t repeats = t.ne[dim] == 2 * width ? 2 : 1;
          if (t.ne[dim] == width * repeats) {
            split_along(t, what == "weight" ? FfnSplitState::Axis::rows : FfnSplitState::Axis::columns, counts.value(),
                        repeats);
            split = true;
          }
        }
      }
    } else if (t.name == "output.weight" || t.name == "output.bias") {
      const bool weight = t.name == "output.weight";
      auto counts = split_counts(t.ne[weight ? 1 : 0], 1, n_devices);
      if (counts.empty()) return Status::invalid_argument(t.name + " is too small to split");
      split_along(t, weight ? FfnSplitState::Axis::rows : FfnSplitState::Axis::columns, counts, 1);
      split = true;
    }
    if (!split) {
      s.mirrored_bytes_ += t.bytes;
      s.mirrored_read_ += tensor_read_bytes(info, t, t.bytes);
    }
  }
  for (size_t d = 0; d < n_devices; ++d) {
    s.device_bytes_[d] += s.mirrored_bytes_;
    s.device_read_[d] += s.mirrored_read_;
  }
  return s;
}

const FfnSplitState& FfnSplit::state(const std::string& name) const {
  static const FfnSplitState mirrored;
  auto it = split_.find(name);
  return it == split_.end() ? mirrored : it->second;
}

}  // namespace tandem::plan
