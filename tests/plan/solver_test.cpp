// The solver on made-up models and clusters: who gets which layers, and why not.
#include "plan/solver.h"
#include "plan/plan_config.h"
#include "plan/plan_report.h"
#include "plan/toy_model.h"

#include <gtest/gtest.h>

#include "datapath/input_reuse.h"
#include "ggml.h"

namespace tandem::plan {
namespace {

constexpr uint64_t kMiB = uint64_t{1} << 20;

// A dense model of `n_layer` layers of `layer_mib` MiB each, all read per token (toy_model.h).
using testing::toy_model;

NodeSpec node(const std::string& name, uint64_t free_mib, double bandwidth = 100e9, DeviceKind kind = DeviceKind::gpu) {
  NodeSpec n;
  n.name = name;
  n.devices.push_back(DeviceSpec{"GPU", kind, free_mib * kMiB, bandwidth, false});
  return n;
}

PlanOptions options() {
  PlanOptions o;
  o.memory.context = 256;
  o.memory.margin_fraction = 0;
  o.memory.margin_bytes = 0;
  return o;
}

std::vector<int> layers_per_device(const Plan& p) {
  std::vector<int> out;
  for (const DeviceAssignment& d : p.devices) out.push_back(d.n_layers);
  return out;
}

struct Case {
  const char* name;
  int n_layer;
  std::vector<NodeSpec> nodes;
  bool fits;
  std::vector<int> layers;             // per device, when it fits
  std::vector<std::string> rpc_nodes;  // workers on the path
};

TEST(Solver, PlacesContiguousRangesAsTheCostModelSays) {
  const std::vector<Case> cases = {
      {"one node holds everything", 10, {node("a", 1024)}, true, {10}, {}},
      {"two equal nodes that each hold 60%: balanced", 10, {node("a", 80), node("b", 80)}, true, {5, 5}, {"b"}},
      {"the fast node fills up first", 10, {node("a", 60, 100e9), node("b", 1024, 400e9)}, true, {0, 10}, {"b"}},
      {"a slow head keeps only what the fast worker cannot take",
       10,
       {node("a", 1024, 20e9), node("b", 60, 400e9)},
       true,
       {5, 5},
       {"b"}},
      {"more nodes than layers",
       2,
       {node("a", 64), node("b", 64), node("c", 64), node("d", 64)},
       true,
       {2, 0, 0, 0},
       {}},
      // Equal bandwidth: the same time either way, and c is the least full when it takes all.
      {"a worker with no free memory is skipped",
       10,
       {node("a", 60), node("b", 0), node("c", 1024)},
       true,
       {0, 0, 10},
       {"c"}},
      {"a head with no free memory cannot hold the embedding", 10, {node("a", 0), node("b", 1024)}, false, {}, {}},
      {"too little memory in all", 10, {node("a", 40), node("b", 40)}, false, {}, {}},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.name);
    auto p = solve(toy_model(c.n_layer, 10), c.nodes, options());
    ASSERT_TRUE(p.is_ok()) << p.status().to_string();
    EXPECT_EQ(p->fits, c.fits) << p->failure;
    if (!c.fits) {
      EXPECT_NE(p->failure.find("short by"), std::string::npos) << p->failure;
      continue;
    }
    EXPECT_EQ(layers_per_device(p.value()), c.layers);
    EXPECT_EQ(p->split.rpc_nodes, c.rpc_nodes);
    for (const DeviceAssignment& d : p->devices) EXPECT_GE(d.headroom(), 0) << d.node;
  }
}

TEST(Solver, IsDeterministic) {
  const std::vector<NodeSpec> nodes = {node("a", 100), node("b", 100), node("c", 100)};
  auto first = solve(toy_model(30, 10), nodes, options());
  auto second = solve(toy_model(30, 10), nodes, options());
  ASSERT_TRUE(first.is_ok() && second.is_ok());
  EXPECT_EQ(layers_per_device(first.value()), layers_per_device(second.value()));
}

TEST(Solver, OnACpuHeadTheOutputHeadGoesWithTheLastDeviceOnThePath) {
  auto p = solve(toy_model(10, 10), {node("a", 80, 100e9, DeviceKind::cpu), node("b", 80), node("c", 1)}, options());
  ASSERT_TRUE(p.is_ok() && p->fits) << p->failure;
  EXPECT_FALSE(p->devices[0].output);
  EXPECT_TRUE(p->devices[1].output);
  EXPECT_FALSE(p->devices[2].output);
}

// A GPU head takes llama.cpp's device order (engine::Placement::workers_first): the workers run
// the first layers, the head's GPU the last ones and the output head, so logits never cross the
// link and no tensor override is needed.
TEST(Solver, AGpuHeadRunsTheLastLayersAndTheOutputHeadAfterTheWorkers) {
  auto p = solve(toy_model(10, 10), {node("a", 80), node("b", 80), node("c", 1)}, options());
  ASSERT_TRUE(p.is_ok() && p->fits) << p->failure;
  EXPECT_TRUE(p->devices[0].output);
  EXPECT_FALSE(p->devices[1].output);
  EXPECT_FALSE(p->devices[2].output);
  EXPECT_EQ(p->devices[1].first_layer, 0);
  EXPECT_EQ(p->devices[1].n_layers, 5);
  EXPECT_EQ(p->devices[0].first_layer, 5);
  EXPECT_EQ(p->devices[0].n_layers, 5);
  EXPECT_TRUE(p->split.workers_first);
  EXPECT_TRUE(p->split.use_local_gpus);
  EXPECT_EQ(p->split.rpc_nodes, (std::vector<std::string>{"b"}));
  EXPECT_EQ(p->split.device_layers, (std::vector<int>{5, 5}));
  const auto ranges = layer_ranges(p->split, {node("a", 80), node("b", 80), node("c", 1)});
  EXPECT_EQ(ranges.at("b"), (std::pair<int, int>{0, 5}));
  EXPECT_EQ(ranges.at("a"), (std::pair<int, int>{5, 5}));
  EXPECT_EQ(ranges.count("c"), 0u);
}

// The worker that runs layer 0 also holds a copy of the token embedding and gathers each batch's
// rows (datapath/worker_embedding.h); the head keeps its own. A worker after the head's layers does not.
TEST(Solver, TheWorkerThatRunsLayerZeroHoldsACopyOfTheTokenEmbedding) {
  auto gpu_head = solve(toy_model(10, 10), {node("a", 80), node("b", 80)}, options());
  ASSERT_TRUE(gpu_head.is_ok() && gpu_head->fits) << gpu_head->failure;
  const DeviceAssignment& first = gpu_head->devices[1];
  ASSERT_EQ(first.first_layer, 0);
  EXPECT_EQ(first.weights, static_cast<uint64_t>(first.n_layers) * 10 * kMiB + 4 * kMiB);
  EXPECT_EQ(gpu_head->devices[0].weights, static_cast<uint64_t>(gpu_head->devices[0].n_layers) * 10 * kMiB + 8 * kMiB);

  auto cpu_head = solve(toy_model(10, 10), {node("a", 80, 100e9, DeviceKind::cpu), node("b", 80)}, options());
  ASSERT_TRUE(cpu_head.is_ok() && cpu_head->fits) << cpu_head->failure;
  ASSERT_GT(cpu_head->devices[1].first_layer, 0);
  EXPECT_EQ(cpu_head->devices[1].weights,
            static_cast<uint64_t>(cpu_head->devices[1].n_layers) * 10 * kMiB + 4 * kMiB);  // + output

  // A head with room for one layer at most leaves the others and the table to the worker. Short by
  // less than the table, the plan keeps the table on the head only (and serve tells the engine).
  auto roomy = solve(toy_model(10, 10), {node("a", 20), node("b", 200)}, options());
  ASSERT_TRUE(roomy.is_ok() && roomy->fits) << roomy->failure;
  const uint64_t need = roomy->devices[1].need();
  const uint64_t head_free = roomy->devices[0].free_bytes - roomy->devices[0].need();
  ASSERT_LT(head_free, 10 * kMiB);  // the head cannot take another layer
  EXPECT_TRUE(roomy->devices[1].embedding_copy);
  EXPECT_TRUE(roomy->split.embedding_on_worker);
  auto exact = solve(toy_model(10, 10), {node("a", 20), node("b", (need + kMiB - 1) / kMiB)}, options());
  ASSERT_TRUE(exact.is_ok() && exact->fits) << exact->failure;
  EXPECT_TRUE(exact->split.embedding_on_worker);
  EXPECT_EQ(exact->devices[1].n_layers, roomy->devices[1].n_layers);
  auto short_by_the_table = solve(toy_model(10, 10), {node("a", 20), node("b", (need - 3 * kMiB) / kMiB)}, options());
  ASSERT_TRUE(short_by_the_table.is_ok() && short_by_the_table->fits) << short_by_the_table->failure;
  EXPECT_FALSE(short_by_the_table->split.embedding_on_worker);
  EXPECT_FALSE(short_by_the_table->devices[1].embedding_copy);
  EXPECT_EQ(short_by_the_table->devices[1].weights,
            static_cast<uint64_t>(short_by_the_table->devices[1].n_layers) * 10 * kMiB);
  EXPECT_NE(
      format_plan(short_by_the_table.value(), toy_model(10, 10), options()).find("token embedding: on the head only"),
      std::string::npos);
}

TEST(Solver, AGpuHeadAloneKeepsTheUsualOrder) {
  auto p = solve(toy_model(4, 10), {node("a", 1024), node("b", 1024)}, options());
  ASSERT_TRUE(p.is_ok() && p->fits) << p->failure;
  EXPECT_FALSE(p->split.workers_first);
  EXPECT_EQ(p->split.device_layers, (std::vector<int>{4}));
  EXPECT_TRUE(p->devices[0].output);
}

TEST(Solver, LayerRangesFollowTheDeviceOrder) {
  const std::vector<NodeSpec> nodes = {node("h", 80, 100e9, DeviceKind::cpu), node("w1", 80), node("w2", 80)};
  LlamaSplit cpu_head;
  cpu_head.cpu_layers = 3;
  cpu_head.device_layers = {4, 5};
  cpu_head.rpc_nodes = {"w1", "w2"};
  auto r = layer_ranges(cpu_head, nodes);
  EXPECT_EQ(r.at("h"), (std::pair<int, int>{0, 3}));
  EXPECT_EQ(r.at("w1"), (std::pair<int, int>{3, 4}));
  EXPECT_EQ(r.at("w2"), (std::pair<int, int>{7, 5}));
  LlamaSplit gpu_head;
  gpu_head.use_local_gpus = gpu_head.workers_first = true;
  gpu_head.device_layers = {4, 0, 5};
  gpu_head.rpc_nodes = {"w1", "w2"};
  r = layer_ranges(gpu_head, nodes);
  EXPECT_EQ(r.at("w1"), (std::pair<int, int>{0, 4}));
  EXPECT_EQ(r.count("w2"), 0u);
  EXPECT_EQ(r.at("h"), (std::pair<int, int>{4, 5}));
}

TEST(Solver, AHeadCpuTakesCpuLayers) {
  auto p = solve(toy_model(10, 10), {node("a", 80, 100e9, DeviceKind::cpu), node("b", 80)}, options());
  ASSERT_TRUE(p.is_ok() && p->fits) << p->failure;
  EXPECT_EQ(p->split.cpu_layers, 5);
  EXPECT_FALSE(p->split.use_local_gpus);
  EXPECT_EQ(p->split.device_layers, (std::vector<int>{5}));
}

TEST(Solver, LinkCostKeepsASmallModelOnOneNode) {
  PlanOptions o = options();
  o.hop_seconds = 0.001;
  auto p = solve(toy_model(4, 10), {node("a", 1024), node("b", 1024)}, o);
  ASSERT_TRUE(p.is_ok() && p->fits);
  EXPECT_EQ(layers_per_device(p.value()), (std::vector<int>{4, 0}));
  EXPECT_EQ(p->link_seconds, 0);
}

TEST(Solver, DecodeEstimateIsBytesOverBandwidthPlusHops) {
  PlanOptions o = options();
  o.hop_seconds = 0.001;
  auto p = solve(toy_model(10, 10), {node("a", 80, 100e9), node("b", 80, 100e9)}, o);
  ASSERT_TRUE(p.is_ok() && p->fits);
  // 100 MiB of layers and 4 MiB of output head at 100 GB/s, and two crossings of the cable.
  EXPECT_NEAR(p->seconds_per_token, (104.0 * kMiB) / 100e9 + 0.002, 1e-6);
}

TEST(Solver, RefusesMoreWorkersThanTheRpcClientReaches) {
  std::vector<NodeSpec> nodes = {node("head", 1024)};
  for (int i = 0; i < kMaxRpcServers + 1; ++i) nodes.push_back(node("w" + std::to_string(i), 1024));
  auto p = solve(toy_model(10, 10), nodes, options());
  ASSERT_FALSE(p.is_ok());
  EXPECT_NE(p.status().message().find("at most 16"), std::string::npos) << p.status().message();
}

TEST(Solver, RefusesBadNodeLists) {
  EXPECT_FALSE(solve(toy_model(4, 10), {}, options()).is_ok());
  EXPECT_FALSE(solve(toy_model(4, 10), {node("a", 10), node("a", 10)}, options()).is_ok());
  PlanOptions o = options();
  o.memory.parallel = 0;
  EXPECT_FALSE(solve(toy_model(4, 10), {node("a", 100)}, o).is_ok());
}

TEST(Solver, SuggestsWhatWouldFit) {
  auto p = make_plan(toy_model(10, 10), {node("a", 66)}, options());
  ASSERT_TRUE(p.is_ok());
  ASSERT_FALSE(p->fits);
  ASSERT_FALSE(p->suggestions.empty());
  EXPECT_NE(p->suggestions.back().find("one more node like 'a'"), std::string::npos) << p->suggestions.back();
}

TEST(NodeFlag, ParsesNameMemoryAndBandwidth) {
  auto n = parse_node_flag("box-a=128GiB@273GB/s");
  ASSERT_TRUE(n.is_ok()) << n.status().to_string();
  EXPECT_EQ(n->name, "box-a");
  EXPECT_EQ(n->devices[0].free_bytes, 128ull << 30);
  EXPECT_DOUBLE_EQ(n->devices[0].bandwidth, 273e9);
  auto plain = parse_node_flag("b=96GB");
  ASSERT_TRUE(plain.is_ok());
  EXPECT_TRUE(plain->devices[0].bandwidth_assumed);
  for (const char* bad : {"box", "=1GiB", "b=", "b=lots", "b=1GiB@fast", "b=1GiB@0GB/s"}) {
    EXPECT_FALSE(parse_node_flag(bad).is_ok()) << bad;
  }
}

TEST(MemoryModel, KvCacheFollowsContextSequencesAndType) {
  ModelInfo m = toy_model(2, 1);
  m.n_head_kv = 4;
  m.head_dim_k = m.head_dim_v = 128;
  MemoryOptions o;
  o.context = 1000;  // llama.cpp pads each sequence to 1024 cells
  o.parallel = 2;
  auto c = model_costs(m, o);
  ASSERT_TRUE(c.is_ok());
  EXPECT_EQ(c->kv_cells, 2048u);
  EXPECT_EQ(c->layers[0].kv, 2048u * 2 * (4 * 128 * 2));  // K and V, F16
  o.kv_type = parse_kv_type("q8_0").value();
  auto q = model_costs(m, o);
  ASSERT_TRUE(q.is_ok());
  EXPECT_EQ(q->layers[0].kv, 2048u * 2 * (4 * 128 / 32 * 34));
  EXPECT_FALSE(parse_kv_type("q3_k").is_ok());
}

// toy_model with MiniMax-M3's sparse attention in every layer but the first.
ModelInfo sparse_toy_model(int n_layer, uint64_t layer_mib) {
  ModelInfo m = toy_model(n_layer, layer_mib);
  m.n_layer_dense_lead = 1;
  m.indexer_n_head = 1;
  m.indexer_head_size = 128;
  return m;
}

TEST(MemoryModel, SparseLayersAddTheIndexerKeyCache) {
  ModelInfo m = sparse_toy_model(3, 1);
  MemoryOptions o;
  o.context = 256;
  auto c = model_costs(m, o);
  ASSERT_TRUE(c.is_ok());
  const uint64_t main = 256u * 2 * (64 * 2);
  EXPECT_EQ(c->layers[0].kv, main);                              // leading dense layer: no indexer
  EXPECT_EQ(c->layers[1].kv, main + 256u * (128 * 2 + 64 * 2));  // indexer K (128) and its V row
  EXPECT_TRUE(c->layers[1].sparse);
}

// A worker holding sparse layers keeps a prompt chunk's position mask in its reuse slots
// (datapath/input_reuse.h), up to the head's budget; a dense model, or the head, holds none.
TEST(MemoryModel, AWorkersSparseLayersHoldTheRepeatedInputSlots) {
  ModelInfo m = sparse_toy_model(10, 10);
  MemoryOptions o;
  o.context = 4096;
  auto c = model_costs(m, o);
  ASSERT_TRUE(c.is_ok());
  const uint64_t mask = 4096u * 512 * 4;  // positions x chunk tokens x f32: 8 MiB
  EXPECT_EQ(c->worker_reuse_slots, (mask + mask / 64) * 5 / 4);
  o.context = 1u << 20;
  EXPECT_EQ(model_costs(m, o)->worker_reuse_slots, datapath::kReuseBudget * 5 / 4);
  EXPECT_EQ(model_costs(toy_model(10, 10), o)->worker_reuse_slots, 0u);

  // The worker's share of a plan counts them, the head's does not.
  o.context = 4096;
  PlanOptions po = options();
  po.memory.context = 4096;
  const std::vector<NodeSpec> nodes = {node("head", 100), node("box-b", 400)};
  auto plan = solve(m, nodes, po);
  ASSERT_TRUE(plan.is_ok()) << plan.status().to_string();
  ASSERT_TRUE(plan->fits) << plan->failure;
  bool worker_sparse = false;
  for (const DeviceAssignment& d : plan->devices) {
    const bool sparse =
        d.n_layers > 0 && c->sparse_before[d.first_layer + d.n_layers] > c->sparse_before[d.first_layer];
    uint64_t base =
        compute_bytes(c.value(), d.first_layer, d.n_layers, d.output, false, plan->pipeline) + c->input_slots;
    if (d.embedding_copy && plan->pipeline) base -= 4 * c->embedding_rows;  // rows gathered there, not 4 input copies
    if (!d.head && sparse) {
      worker_sparse = true;
      EXPECT_EQ(d.compute, base + c->worker_reuse_slots) << d.node;
    } else if (!d.head) {
      EXPECT_EQ(d.compute, base) << d.node;
    }
  }
  EXPECT_TRUE(worker_sparse);
}

// The input slots (datapath/input_reuse.h): a step's hidden state and three masks, at most 64 MiB,
// on every device that reads a step's inputs (layers or the output head) but the head's CPU.
TEST(MemoryModel, EveryDeviceThatReadsAStepsInputsHoldsTheInputSlots) {
  ModelInfo m = sparse_toy_model(10, 10);
  MemoryOptions o;
  o.context = 4096;
  auto c = model_costs(m, o);
  ASSERT_TRUE(c.is_ok());
  EXPECT_EQ(c->input_slots, 512u * 64 * 4 + 3u * 4096 * 512 * 4 + (256u << 10));  // T x embd, 3 masks, small ones
  o.context = 1u << 20;
  EXPECT_EQ(model_costs(m, o)->input_slots, datapath::kInputSlotBytes);

  // A CPU head holding layers holds none; its workers do, with layers or only the output head.
  PlanOptions po = options();
  po.memory.context = 4096;
  const uint64_t slots = model_costs(m, po.memory)->input_slots;
  auto with_cpu_head = solve(m, {node("head", 60, 100e9, DeviceKind::cpu), node("box-b", 400)}, po);
  ASSERT_TRUE(with_cpu_head.is_ok()) << with_cpu_head.status().to_string();
  ASSERT_TRUE(with_cpu_head->fits) << with_cpu_head->failure;
  auto with_gpu_head = solve(m, {node("head", 60), node("box-b", 400)}, po);
  ASSERT_TRUE(with_gpu_head.is_ok()) << with_gpu_head.status().to_string();
  ASSERT_TRUE(with_gpu_head->fits) << with_gpu_head->failure;
  int counted = 0;
  for (const Plan* p : {&with_cpu_head.value(), &with_gpu_head.value()}) {
    for (const DeviceAssignment& d : p->devices) {
      if (d.n_layers == 0 && !d.output) continue;
      const bool sparse =
          d.n_layers > 0 && c->sparse_before[d.first_layer + d.n_layers] > c->sparse_before[d.first_layer];
      uint64_t expected = compute_bytes(c.value(), d.first_layer, d.n_layers, d.output,
                                        d.host && d.kind == DeviceKind::cpu, p->pipeline);
      if (d.host && d.kind == DeviceKind::gpu)
        expected += c->compute_host - (d.first_layer > 0 ? 2 * c->embedding_rows : 0);
      if (d.embedding_copy && p->pipeline) expected -= 4 * c->embedding_rows;
      if (!d.head && sparse) expected += c->worker_reuse_slots;
      const bool reads = !(d.host && d.kind == DeviceKind::cpu);
      EXPECT_EQ(d.compute - (d.host ? c->host_output : 0), expected + (reads ? slots : 0)) << d.node << " " << d.device;
      counted += reads ? 1 : 0;
    }
  }
  EXPECT_EQ(counted, 3);  // box-b twice, the GPU head once
}

}  // namespace
}  // namespace tandem::plan

namespace tandem::plan {
namespace {

TEST(PlanConfig, DeclaredMemoryGivesStaticNodesAndOptions) {
  auto c = config::parse_config(
      "[cluster]\nhead_name = \"a\"\nhead_memory = \"100GiB\"\nhead_device = \"cpu\"\n"
      "[[worker]]\nname = \"b\"\naddress = \"h:1\"\nmemory = \"50GiB\"\nbandwidth = \"100GB/s\"\n"
      "[model]\ncontext = 8192\nparallel = 3\nkv_type = \"q8_0\"\n[plan]\nmargin = 0.1\nhop_ms = 2\n");
  ASSERT_TRUE(c.is_ok()) << c.status().to_string();
  auto o = plan_options_from_config(c.value());
  ASSERT_TRUE(o.is_ok());
  EXPECT_EQ(o->memory.context, 8192u);
  EXPECT_EQ(o->memory.parallel, 3u);
  EXPECT_EQ(kv_type_name(o->memory.kv_type), "q8_0");
  EXPECT_DOUBLE_EQ(o->memory.margin_fraction, 0.1);
  EXPECT_DOUBLE_EQ(o->hop_seconds, 0.002);
  auto nodes = declared_nodes(c.value());
  ASSERT_TRUE(nodes.is_ok());
  ASSERT_EQ(nodes->size(), 2u);
  EXPECT_EQ(nodes.value()[0].name, "a");
  EXPECT_EQ(nodes.value()[0].devices[0].kind, DeviceKind::cpu);
  EXPECT_EQ(nodes.value()[1].devices[0].free_bytes, 50ull << 30);
  EXPECT_DOUBLE_EQ(nodes.value()[1].devices[0].bandwidth, 100e9);
}

TEST(PlanConfig, AnUnknownKvTypeNamesTheKey) {
  auto c = config::parse_config("[model]\nkv_type = \"q3\"\n", "t.toml");
  ASSERT_TRUE(c.is_ok());
  auto o = plan_options_from_config(c.value());
  ASSERT_FALSE(o.is_ok());
  EXPECT_NE(o.status().message().find("[model] kv_type"), std::string::npos) << o.status().message();
}

TEST(PlanConfig, DeclaredPlanningNamesTheNodeWithoutMemory) {
  auto c = config::parse_config("[cluster]\nhead_memory = \"8GiB\"\n[[worker]]\nname = \"b\"\naddress = \"h:1\"\n",
                                "t.toml");
  ASSERT_TRUE(c.is_ok());
  auto nodes = declared_nodes(c.value());
  ASSERT_FALSE(nodes.is_ok());
  EXPECT_NE(nodes.status().message().find(":3: [[worker]] 'b' has no memory"), std::string::npos)
      << nodes.status().message();
}

std::vector<config::LayerShare> shares(const std::string& text) { return config::parse_layers(text).value(); }

// [model] layers / --layers: the solver sizes the given split instead of choosing one, so that
// plan, serve and doctor show and load the same placement.
TEST(HandSplit, CountsPerNodeOnAGpuHeadRunTheWorkersFirst) {
  PlanOptions o = options();
  o.layers = shares("3,7");
  auto p = solve(toy_model(10, 4), {node("a", 1024), node("b", 1024)}, o);
  ASSERT_TRUE(p.is_ok()) << p.status().to_string();
  ASSERT_TRUE(p->fits) << p->failure;
  EXPECT_EQ(layers_per_device(p.value()), (std::vector<int>{3, 7}));
  EXPECT_EQ(p->devices[1].first_layer, 0);  // the worker runs layers 0-6
  EXPECT_EQ(p->devices[0].first_layer, 7);
  EXPECT_TRUE(p->devices[0].output);
  EXPECT_TRUE(p->split.workers_first);
  EXPECT_EQ(p->split.device_layers, (std::vector<int>{7, 3}));
  EXPECT_EQ(layer_shares(p.value()), "7-9,0-6");
  // The ranges it prints are taken back as they are.
  o.layers = shares(layer_shares(p.value()));
  auto again = solve(toy_model(10, 4), {node("a", 1024), node("b", 1024)}, o);
  ASSERT_TRUE(again.is_ok()) << again.status().to_string();
  EXPECT_EQ(plan_to_json(again.value(), toy_model(10, 4), o), plan_to_json(p.value(), toy_model(10, 4), o));
}

TEST(HandSplit, OnACpuHeadTheHeadRunsFirstAndALaterWorkerMayBeLeftOut) {
  PlanOptions o = options();
  o.layers = shares("4,6,0");
  auto p = solve(toy_model(10, 4), {node("a", 1024, 100e9, DeviceKind::cpu), node("b", 1024), node("c", 1024)}, o);
  ASSERT_TRUE(p.is_ok()) << p.status().to_string();
  ASSERT_TRUE(p->fits) << p->failure;
  EXPECT_EQ(p->split.cpu_layers, 4);
  EXPECT_EQ(p->split.rpc_nodes, std::vector<std::string>{"b"});
  EXPECT_TRUE(p->devices[1].output);
  EXPECT_EQ(layer_shares(p.value()), "0-3,4-9,-");
}

TEST(HandSplit, MistakesAreNamed) {
  const std::vector<NodeSpec> nodes = {node("a", 1024), node("b", 1024)};
  struct Bad {
    const char* layers;
    const char* expected;
  };
  for (const Bad& b :
       {Bad{"10", "gives 1 share(s) for 2 nodes (one per node, head first: a, b)"},
        Bad{"3,3", "covers 6 layers, the model has 10"},
        Bad{"0-2,3-9", "not the order the layers run in (on a GPU head the workers run the first layers"},
        Bad{"0-2,3-9", "these counts run as 7-9,0-6"}}) {
    PlanOptions o = options();
    o.layers = shares(b.layers);
    auto p = solve(toy_model(10, 4), nodes, o);
    ASSERT_FALSE(p.is_ok()) << b.layers;
    EXPECT_EQ(p.status().code(), StatusCode::invalid_argument);
    EXPECT_NE(p.status().message().find(b.expected), std::string::npos) << p.status().message();
  }
}

TEST(HandSplit, ASplitThatDoesNotFitSaysWhereAndOffersThePlannersOwn) {
  PlanOptions o = options();
  o.layers = shares("1,9");
  auto p = make_plan(toy_model(10, 4), {node("a", 100), node("b", 30)}, o);
  ASSERT_TRUE(p.is_ok()) << p.status().to_string();
  EXPECT_FALSE(p->fits);
  EXPECT_NE(p->failure.find("with the hand-made split layers '1,9', b needs"), std::string::npos) << p->failure;
  ASSERT_FALSE(p->suggestions.empty());
  EXPECT_NE(p->suggestions[0].find("the planner's own split"), std::string::npos) << p->suggestions[0];
}

// A node of several devices takes no share by hand (the planner places them).
TEST(HandSplit, ANodeOfSeveralDevicesIsLeftToThePlanner) {
  NodeSpec two = node("b", 1024);
  two.devices.push_back(two.devices[0]);
  two.devices[1].name = "GPU1";
  PlanOptions o = options();
  o.layers = shares("5,5");
  auto p = solve(toy_model(10, 4), {node("a", 1024), two}, o);
  ASSERT_FALSE(p.is_ok());
  EXPECT_NE(p.status().message().find("b has 2 devices"), std::string::npos) << p.status().message();
}

}  // namespace
}  // namespace tandem::plan
