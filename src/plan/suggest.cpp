// make_plan: solve, and when nothing fits, find the nearest requests that would.
#include <algorithm>
#include <memory>
#include <optional>

#include "common/units.h"
#include "ggml.h"
#include "plan/solver.h"

namespace tandem::plan {
namespace {

bool fits(const ModelInfo& info, const std::vector<NodeSpec>& nodes, const PlanOptions& o) {
  auto p = solve(info, nodes, o);
  return p.is_ok() && p->fits;
}

// The largest context (a multiple of 256, llama.cpp's granule) below the asked one that fits.
uint32_t largest_context(const ModelInfo& info, const std::vector<NodeSpec>& nodes, PlanOptions o) {
  uint32_t lo = 0, hi = o.memory.context / 256;  // in units of 256 tokens; lo fits (0 = none)
  while (lo < hi) {
    const uint32_t mid = (lo + hi + 1) / 2;
    o.memory.context = mid * 256;
    if (fits(info, nodes, o))
      lo = mid;
    else
      hi = mid - 1;
  }
  return lo * 256;
}

// On unified-memory nodes the prompt cache comes out of the model's memory: the largest one (in
// steps of 256 MiB) below the asked one that fits, or nullopt when none, not even 0, does.
std::optional<uint64_t> largest_prompt_cache(const ModelInfo& info, const std::vector<NodeSpec>& nodes, PlanOptions o) {
  constexpr uint64_t kStep = uint64_t{256} << 20;
  uint64_t lo = 0, hi = (o.memory.prompt_cache - 1) / kStep;  // in steps; below the asked size
  o.memory.prompt_cache = 0;
  if (!fits(info, nodes, o)) return std::nullopt;
  while (lo < hi) {
    const uint64_t mid = (lo + hi + 1) / 2;
    o.memory.prompt_cache = mid * kStep;
    if (fits(info, nodes, o))
      lo = mid;
    else
      hi = mid - 1;
  }
  return lo * kStep;
}

// The draft quantised to the largest type below its own that fits: "the draft quantised to Q4_K
// (weights 1.73 GiB instead of 3.27 GiB) fits", or "" when none does.
std::string smaller_draft(const ModelInfo& info, const std::vector<NodeSpec>& nodes, const PlanOptions& o) {
  const ModelInfo& draft = *o.speculative.draft;
  for (const int type : {GGML_TYPE_Q8_0, GGML_TYPE_Q4_K}) {
    auto smaller = std::make_shared<const ModelInfo>(requantized(draft, type));
    if (smaller->tensor_bytes >= draft.tensor_bytes) continue;
    PlanOptions q = o;
    q.speculative.draft = smaller;
    if (fits(info, nodes, q)) {
      return "the draft quantised to " + smaller->file_type + " (weights about " + format_bytes(smaller->tensor_bytes) +
             " instead of " + format_bytes(draft.tensor_bytes) + ") fits";
    }
  }
  return "";
}

// Why the draft does not fit beside a model that fits alone: its parts, and the most that any
// placement (or the hand split, or the FFN split) leaves on the head's first device.
std::string draft_failure(const Plan& plan, const std::vector<NodeSpec>& nodes, const PlanOptions& o, uint64_t room) {
  const DraftCost& d = plan.draft;
  const ModelInfo& draft = *o.speculative.draft;
  const std::string where =
      nodes[0].name + (nodes[0].devices.size() > 1 ? "/" + nodes[0].devices[0].name : std::string());
  const std::string split = o.parallelism == Parallelism::ffn_tensor ? "the FFN tensor split leaves"
                            : !o.layers.empty()                      ? "the split given by hand leaves"
                                                : "no split of the model's layers leaves more than";
  return "the draft model " + (draft.files.empty() ? draft.arch : draft.files.front()) + " needs " +
         format_bytes(d.total()) + " on the head '" + where + "' (weights " + format_bytes(d.weights) + ", KV " +
         format_bytes(d.kv) + ", compute " + format_bytes(d.compute) +
         (d.hidden > 0 ? ", target hidden states " + format_bytes(d.hidden) : "") + ") but " + split + " " +
         format_bytes(room) + " there beside the model: short by " +
         format_bytes(d.total() - std::min(d.total(), room));
}

std::string size_flag(uint64_t bytes) {
  constexpr uint64_t kGiB = uint64_t{1} << 30, kMiB = uint64_t{1} << 20;
  if (bytes == 0) return "0";
  return bytes % kGiB == 0 ? std::to_string(bytes / kGiB) + "GiB" : std::to_string(bytes / kMiB) + "MiB";
}

std::vector<std::string> suggestions(const ModelInfo& info, const std::vector<NodeSpec>& nodes, const PlanOptions& o) {
  std::vector<std::string> out;
  const MemoryOptions& m = o.memory;
  if (!o.layers.empty()) {
    PlanOptions q = o;
    q.layers.clear();
    if (fits(info, nodes, q)) out.push_back("the planner's own split (leave [model] layers / --layers out) fits");
  }
  bool unified = false;
  for (const NodeSpec& n : nodes) {
    for (const DeviceSpec& d : n.devices) unified = unified || d.unified_memory;
  }
  if (unified && m.prompt_cache > 0) {
    if (auto pc = largest_prompt_cache(info, nodes, o)) {
      out.push_back("--prompt-cache " + size_flag(*pc) + " per node (instead of " + format_bytes(m.prompt_cache) +
                    (*pc == 0 ? "; the prompt cache off" : "") + ") fits: on unified memory it shares the model's");
    }
  }
  if (m.context > 256) {
    if (uint32_t ctx = largest_context(info, nodes, o); ctx >= 256) {
      out.push_back("--context " + std::to_string(ctx) + " (instead of " + std::to_string(m.context) + ") fits");
    }
  }
  for (uint32_t p = m.parallel - 1; p >= 1 && p < m.parallel; --p) {
    PlanOptions q = o;
    q.memory.parallel = p;
    if (fits(info, nodes, q)) {
      out.push_back("--parallel " + std::to_string(p) + " (instead of " + std::to_string(m.parallel) + ") fits");
      break;
    }
  }
  for (int type : smaller_kv_types(m.kv_type)) {
    PlanOptions q = o;
    q.memory.kv_type = type;
    if (fits(info, nodes, q)) {
      out.push_back("--kv-type " + kv_type_name(type) + " (instead of " + kv_type_name(m.kv_type) + ") fits");
      break;
    }
  }
  // One more worker like the node with the most memory.
  const NodeSpec* largest = &nodes.front();
  uint64_t largest_free = 0;
  for (const NodeSpec& n : nodes) {
    uint64_t free = 0;
    for (const DeviceSpec& d : n.devices) free += d.free_bytes;
    if (free > largest_free) {
      largest_free = free;
      largest = &n;
    }
  }
  if (o.speculative.mode == Speculative::draft && o.speculative.draft) {
    if (std::string s = smaller_draft(info, nodes, o); !s.empty()) out.push_back(s);
    PlanOptions q = o;
    q.speculative.mode = Speculative::ngram;
    q.speculative.draft.reset();
    if (fits(info, nodes, q))
      out.push_back("--speculative ngram (drafts from the request's own tokens, no model) fits");
  }
  if (nodes.size() - 1 < static_cast<size_t>(kMaxRpcServers)) {
    std::vector<NodeSpec> more = nodes;
    NodeSpec extra = *largest;
    extra.name = "another node";
    extra.address.clear();
    for (DeviceSpec& d : extra.devices) d.kind = DeviceKind::gpu;
    more.push_back(extra);
    if (fits(info, more, o)) {
      out.push_back("one more node like '" + largest->name + "' (" + format_bytes(largest_free) + ") fits");
    }
  }
  return out;
}

}  // namespace

Result<Plan> make_plan(const ModelInfo& info, const std::vector<NodeSpec>& nodes, const PlanOptions& options) {
  auto plan = solve(info, nodes, options);
  if (!plan.is_ok()) return plan;
  // A draft that alone keeps the model from fitting: say so with what room the head has for one.
  if (!plan->fits && plan->draft.total() > 0) {
    PlanOptions alone = options;
    alone.speculative = SpeculativeOptions{};
    if (fits(info, nodes, alone)) {
      auto room = draft_room(info, nodes, options);
      if (!room.is_ok()) return room.status();
      plan->failure = draft_failure(plan.value(), nodes, options, room.value());
    }
  }
  for (const Parallelism p : {Parallelism::layer, Parallelism::ffn_tensor}) {
    ParallelismEstimate e;
    e.parallelism = p;
    Result<Plan> other = plan;
    if (p != options.parallelism) {
      PlanOptions q = options;
      q.parallelism = p;
      if (p == Parallelism::ffn_tensor) q.layers.clear();  // a hand split is a layer split
      other = solve(info, nodes, q);
    }
    if (other.is_ok()) {
      e.fits = other->fits;
      e.tokens_per_second = other->fits ? other->tokens_per_second() : 0;
      e.failure = other->failure;
    } else {
      e.failure = other.status().message();
    }
    plan->estimates.push_back(e);
  }
  if (plan->fits) return plan;
  plan->suggestions = suggestions(info, nodes, options);
  for (const ParallelismEstimate& e : plan->estimates) {
    if (e.parallelism != options.parallelism && e.fits) {
      plan->suggestions.push_back(std::string("parallelism \"") + parallelism_name(e.parallelism) + "\" fits");
    }
  }
  return plan;
}

}  // namespace tandem::plan
