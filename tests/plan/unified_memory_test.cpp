// Planning a box whose GPU shares the system memory (NVIDIA GB10): the node holds back its prompt
// cache, the OS's working set and a load's transients beside the margin, once per node; a device
// that reported 0 bytes free is refused by name; when the prompt cache is what does not fit, the
// planner says which one would.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "ggml.h"
#include "plan/plan_config.h"
#include "plan/plan_report.h"
#include "plan/solver.h"
#include "plan/toy_model.h"

namespace tandem::plan {
namespace {

constexpr uint64_t kMiB = uint64_t{1} << 20;

// n_layer dense FFN layers of layer_mib MiB each (the FFN split has something to split).
ModelInfo toy_model(int n_layer, uint64_t layer_mib) {
  return testing::toy_model(n_layer, layer_mib, "ffn_up", WeightRole::dense_ffn);
}

NodeSpec node(const std::string& name, uint64_t free_mib, bool unified, int devices = 1) {
  NodeSpec n;
  n.name = name;
  for (int i = 0; i < devices; ++i) {
    DeviceSpec d;
    d.name = "GPU" + std::to_string(i);
    d.free_bytes = free_mib * kMiB;
    d.unified_memory = unified;
    n.devices.push_back(d);
  }
  return n;
}

PlanOptions options(uint64_t prompt_cache_mib, uint64_t os_mib, uint64_t load_mib) {
  PlanOptions o;
  o.memory.context = 256;
  o.memory.margin_fraction = 0;
  o.memory.margin_bytes = 0;
  o.memory.prompt_cache = prompt_cache_mib * kMiB;
  o.memory.os_reserve = os_mib * kMiB;
  o.memory.load_reserve = load_mib * kMiB;
  return o;
}

const DeviceAssignment& device(const Plan& p, const std::string& node, const std::string& dev = "GPU0") {
  for (const DeviceAssignment& d : p.devices) {
    if (d.node == node && d.device == dev) return d;
  }
  ADD_FAILURE() << "no " << node << "/" << dev;
  return p.devices.front();
}

TEST(UnifiedMemory, AUnifiedNodeHoldsBackItsPromptCacheTheOsAndLoadTransients) {
  const ModelInfo m = toy_model(10, 4);
  const PlanOptions o = options(64, 16, 8);
  // The same split whichever way: a hand split, so that only the reserve differs.
  PlanOptions hand = o;
  hand.layers = config::parse_layers("4,6").value();
  auto plain = solve(m, {node("a", 1024, false), node("b", 1024, false)}, hand);
  auto unified = solve(m, {node("a", 1024, false), node("b", 1024, true)}, hand);
  ASSERT_TRUE(plain.is_ok() && unified.is_ok());
  ASSERT_TRUE(plain->fits && unified->fits) << unified->failure;
  const DeviceAssignment &pb = device(plain.value(), "b"), &ub = device(unified.value(), "b");
  EXPECT_EQ(pb.reserve.total(), 0u);
  EXPECT_EQ(ub.reserve.prompt_cache, 64 * kMiB);
  EXPECT_EQ(ub.reserve.os, 16 * kMiB);
  EXPECT_EQ(ub.reserve.load, 8 * kMiB);
  EXPECT_TRUE(ub.unified_memory);
  EXPECT_EQ(pb.need(), ub.need());
  EXPECT_EQ(pb.headroom() - ub.headroom(), static_cast<int64_t>(88 * kMiB));
  EXPECT_EQ(device(unified.value(), "a").reserve.total(), 0u) << "a discrete node keeps nothing back";
}

TEST(UnifiedMemory, TheReserveDecidesWhatFitsAndTheFailureSaysSo) {
  const ModelInfo m = toy_model(10, 100);  // 1000 MiB of layers
  auto fits_with = [&](uint64_t free_mib, bool unified) {
    auto p = solve(m, {node("a", free_mib, unified), node("b", free_mib, unified)}, options(256, 64, 64));
    EXPECT_TRUE(p.is_ok()) << p.status().to_string();
    return p.value();
  };
  // The smallest box on which the model fits without a reserve, found by the planner itself.
  uint64_t free_mib = 500;
  while (!fits_with(free_mib, false).fits) free_mib += 16;
  const Plan tight = fits_with(free_mib, true);
  EXPECT_FALSE(tight.fits) << "384 MiB more held back on each box";
  EXPECT_NE(tight.failure.find("after margins and the unified-memory reserves"), std::string::npos) << tight.failure;
  EXPECT_TRUE(fits_with(free_mib + 384, true).fits);
  // A split by hand says which box is short and what it holds back.
  PlanOptions hand = options(256, 64, 64);
  hand.layers = config::parse_layers("5,5").value();
  auto h = solve(m, {node("a", free_mib, true), node("b", free_mib, true)}, hand);
  ASSERT_TRUE(h.is_ok());
  EXPECT_FALSE(h->fits);
  EXPECT_NE(h->failure.find("held for its prompt cache, the OS and load transients (unified memory)"),
            std::string::npos)
      << h->failure;
}

TEST(UnifiedMemory, ANodeOfSeveralDevicesHoldsItsReserveBackOnce) {
  auto p = solve(toy_model(10, 4), {node("a", 1024, false), node("b", 512, true, 2)}, options(64, 16, 8));
  ASSERT_TRUE(p.is_ok() && p->fits) << p.status().to_string();
  EXPECT_EQ(device(p.value(), "b", "GPU0").reserve.total(), 88 * kMiB);
  EXPECT_EQ(device(p.value(), "b", "GPU1").reserve.total(), 0u);
}

TEST(UnifiedMemory, TheFfnTensorSplitCountsTheReserveToo) {
  PlanOptions o = options(64, 16, 8);
  o.parallelism = Parallelism::ffn_tensor;
  ModelInfo m = toy_model(4, 4);
  m.n_ff = 64;
  auto plain = solve(m, {node("a", 1024, false), node("b", 1024, false)}, o);
  auto unified = solve(m, {node("a", 1024, true), node("b", 1024, true)}, o);
  ASSERT_TRUE(plain.is_ok() && unified.is_ok());
  for (const std::string n : {"a", "b"}) {
    EXPECT_EQ(device(unified.value(), n).reserve.total(), 88 * kMiB) << n;
    EXPECT_EQ(device(plain.value(), n).headroom() - device(unified.value(), n).headroom(),
              static_cast<int64_t>(88 * kMiB))
        << n;
  }
}

TEST(UnifiedMemory, ADeviceThatReportedNoMemoryIsRefusedByName) {
  NodeSpec b = node("box-b", 0, true);
  b.devices[0].name = "CUDA0";
  b.devices[0].reported = true;
  auto p = solve(toy_model(4, 4), {node("box-a", 1024, true), b}, options(0, 0, 0));
  ASSERT_FALSE(p.is_ok());
  EXPECT_NE(p.status().message().find("device CUDA0 on box-b reports 0 bytes free"), std::string::npos)
      << p.status().message();
  // A declared 0 (a dry run's --node empty=0) is a node without room, not a failed device.
  b.devices[0].reported = false;
  auto declared = solve(toy_model(4, 4), {node("box-a", 1024, true), b}, options(0, 0, 0));
  ASSERT_TRUE(declared.is_ok()) << declared.status().to_string();
  EXPECT_TRUE(declared->fits);
  EXPECT_EQ(device(declared.value(), "box-b", "CUDA0").n_layers, 0);
}

uint64_t suggested_prompt_cache(const Plan& p) {
  for (const std::string& s : p.suggestions) {
    if (s.rfind("--prompt-cache ", 0) != 0) continue;
    const std::string v = s.substr(15, s.find(' ', 15) - 15);
    if (v == "0") return 0;
    const uint64_t n = std::stoull(v);
    return v.find("GiB") != std::string::npos ? n << 30 : n * kMiB;
  }
  ADD_FAILURE() << "no --prompt-cache suggestion";
  return UINT64_MAX;
}

TEST(UnifiedMemory, WhenThePromptCacheDoesNotFitThePlannerSaysWhichOneWould) {
  const ModelInfo m = toy_model(10, 100);
  const std::vector<NodeSpec> nodes = {node("a", 1400, true), node("b", 1400, true)};
  auto p = make_plan(m, nodes, options(2048, 0, 0));
  ASSERT_TRUE(p.is_ok());
  ASSERT_FALSE(p->fits);
  const uint64_t pc = suggested_prompt_cache(p.value());
  ASSERT_NE(pc, UINT64_MAX);
  auto with = [&](uint64_t bytes) {
    PlanOptions o = options(0, 0, 0);
    o.memory.prompt_cache = bytes;
    return solve(m, nodes, o)->fits;
  };
  EXPECT_TRUE(with(pc)) << "the suggestion fits";
  EXPECT_FALSE(with(pc + 256 * kMiB)) << "and is the largest that does, in steps of 256 MiB";

  // Boxes that are not unified do not hold the prompt cache in the model's memory: no such advice.
  auto discrete = make_plan(m, {node("a", 900, false), node("b", 100, false)}, options(2048, 0, 0));
  ASSERT_TRUE(discrete.is_ok());
  for (const std::string& s : discrete->suggestions) EXPECT_EQ(s.find("--prompt-cache"), std::string::npos) << s;
}

TEST(UnifiedMemory, TheReportShowsTheReserveOnlyWhereThereIsOne) {
  const ModelInfo m = toy_model(10, 4);
  const PlanOptions o = options(64, 16, 8);
  auto unified = make_plan(m, {node("a", 1024, true), node("b", 1024, true)}, o);
  auto plain = make_plan(m, {node("a", 1024, false), node("b", 1024, false)}, o);
  ASSERT_TRUE(unified.is_ok() && plain.is_ok());
  const std::string u = format_plan(unified.value(), m, o), d = format_plan(plain.value(), m, o);
  EXPECT_NE(u.find("reserved"), std::string::npos) << u;
  EXPECT_NE(u.find("headroom = free - margin - reserved - weights - KV - compute"), std::string::npos) << u;
  EXPECT_NE(u.find("b/GPU0: unified memory"), std::string::npos) << u;
  EXPECT_NE(u.find("prompt cache 0.06 + OS 0.02 + load transients 0.01"), std::string::npos) << u;
  EXPECT_EQ(d.find("reserved"), std::string::npos) << d;
  EXPECT_EQ(d.find("unified"), std::string::npos) << d;

  const auto j = nlohmann::json::parse(plan_to_json(unified.value(), m, o));
  EXPECT_EQ(j["request"]["prompt_cache"], 64 * kMiB);
  EXPECT_EQ(j["request"]["os_reserve"], 16 * kMiB);
  EXPECT_EQ(j["request"]["load_reserve"], 8 * kMiB);
  for (const auto& dev : j["devices"]) {
    EXPECT_TRUE(dev["unified_memory"].get<bool>());
    EXPECT_EQ(dev["reserved"], 88 * kMiB);
    EXPECT_EQ(dev["reserve"]["prompt_cache"], 64 * kMiB);
    EXPECT_EQ(dev["headroom"].get<int64_t>(),
              static_cast<int64_t>(dev["free"].get<uint64_t>()) - static_cast<int64_t>(dev["margin"].get<uint64_t>()) -
                  static_cast<int64_t>(88 * kMiB) -
                  static_cast<int64_t>(dev["weights"].get<uint64_t>() + dev["kv"].get<uint64_t>() +
                                       dev["compute"].get<uint64_t>()));
  }
}

TEST(UnifiedMemory, TheConfigSaysWhichBoxesAreUnifiedAndWhatTheyHoldBack) {
  auto c = config::parse_config(
      "[cluster]\nhead_memory = \"115GiB\"\nhead_device = \"unified\"\n"
      "[[worker]]\nname = \"b\"\naddress = \"h:1\"\nmemory = \"115GiB\"\nunified_memory = true\n"
      "[[worker]]\nname = \"c\"\naddress = \"h:2\"\nmemory = \"80GiB\"\n"
      "[model]\nprompt_cache = \"2GiB\"\n[plan]\nos_reserve = \"1536MiB\"\nload_reserve = \"512MiB\"\n");
  ASSERT_TRUE(c.is_ok()) << c.status().to_string();
  auto o = plan_options_from_config(c.value());
  ASSERT_TRUE(o.is_ok());
  EXPECT_EQ(o->memory.prompt_cache, uint64_t{2} << 30);
  EXPECT_EQ(o->memory.os_reserve, 1536 * kMiB);
  EXPECT_EQ(o->memory.load_reserve, 512 * kMiB);
  auto nodes = declared_nodes(c.value());
  ASSERT_TRUE(nodes.is_ok());
  EXPECT_TRUE(nodes.value()[0].devices[0].unified_memory);
  EXPECT_EQ(nodes.value()[0].devices[0].kind, DeviceKind::gpu);
  EXPECT_TRUE(nodes.value()[1].devices[0].unified_memory);
  EXPECT_FALSE(nodes.value()[2].devices[0].unified_memory);
  EXPECT_FALSE(nodes.value()[0].devices[0].reported) << "declared figures are no device's report";

  // The defaults: 1 GiB each, and the prompt cache's own default (8 GiB).
  auto d = plan_options_from_config(config::Config{});
  EXPECT_EQ(d->memory.os_reserve, uint64_t{1} << 30);
  EXPECT_EQ(d->memory.load_reserve, uint64_t{1} << 30);
  EXPECT_EQ(d->memory.prompt_cache, uint64_t{8} << 30);
}

}  // namespace
}  // namespace tandem::plan
