// The FFN tensor split's policy (plan/ffn_split.h) and its plan (plan/ffn_plan.h) on made-up MoE
// models: which tensors are split and how, what each device holds and reads, and when it fits.
#include "plan/ffn_split.h"

#include <gtest/gtest.h>

#include "ggml.h"
#include "plan/plan_report.h"
#include "plan/solver.h"

namespace tandem::plan {
namespace {

constexpr uint64_t kMiB = uint64_t{1} << 20;

// An MoE of `n_layer` layers: attention, a router, 8 routed experts of width `ff` (2 used) and a
// shared expert of the same width, all of ggml type `type`, hidden 256, and an untied output head.
ModelInfo moe(int n_layer, int64_t ff, int type = GGML_TYPE_F32) {
  ModelInfo m;
  m.arch = "toy-moe";
  m.n_layer = n_layer;
  m.n_embd = 256;
  m.n_head = m.n_head_kv = 2;
  m.head_dim_k = m.head_dim_v = 128;
  m.n_vocab = 1000;
  m.n_expert = 8;
  m.n_expert_used = 2;
  m.n_ff_exp = static_cast<uint32_t>(ff);
  auto add = [&](const std::string& name, int layer, WeightRole role, std::vector<int64_t> ne, int t) {
    TensorInfo x;
    x.name = name;
    x.type = t;
    for (size_t i = 0; i < ne.size(); ++i) x.ne[i] = ne[i];
    x.bytes = ggml_row_size(static_cast<ggml_type>(t), x.ne[0]) * x.ne[1] * x.ne[2] * x.ne[3];
    x.layer = layer;
    x.role = role;
    m.tensors.push_back(x);
  };
  add("token_embd.weight", -1, WeightRole::embedding, {256, 1000}, GGML_TYPE_F32);
  for (int l = 0; l < n_layer; ++l) {
    const std::string b = "blk." + std::to_string(l) + ".";
    add(b + "attn_q.weight", l, WeightRole::attention, {256, 256}, GGML_TYPE_F32);
    add(b + "attn_output.weight", l, WeightRole::attention, {256, 256}, GGML_TYPE_F32);
    add(b + "ffn_norm.weight", l, WeightRole::norm, {256}, GGML_TYPE_F32);
    add(b + "ffn_gate_inp.weight", l, WeightRole::router, {256, 8}, GGML_TYPE_F32);
    add(b + "ffn_gate_exps.weight", l, WeightRole::routed_experts, {256, ff, 8}, type);
    add(b + "ffn_up_exps.weight", l, WeightRole::routed_experts, {256, ff, 8}, type);
    add(b + "ffn_down_exps.weight", l, WeightRole::routed_experts, {ff, 256, 8}, type);
    add(b + "ffn_gate_shexp.weight", l, WeightRole::shared_experts, {256, ff}, type);
    add(b + "ffn_up_shexp.weight", l, WeightRole::shared_experts, {256, ff}, type);
    add(b + "ffn_down_shexp.weight", l, WeightRole::shared_experts, {ff, 256}, type);
  }
  add("output_norm.weight", -1, WeightRole::output, {256}, GGML_TYPE_F32);
  add("output.weight", -1, WeightRole::output, {256, 1000}, GGML_TYPE_F32);
  for (const TensorInfo& t : m.tensors) m.tensor_bytes += t.bytes;
  return m;
}

TEST(FfnSplit, SplitsTheFfnsAndTheOutputHeadAndKeepsTheRestWhole) {
  auto s = FfnSplit::make(moe(2, 512), 2);
  ASSERT_TRUE(s.is_ok()) << s.status().to_string();
  using Axis = FfnSplitState::Axis;
  for (const char* name : {"blk.1.ffn_gate_exps.weight", "blk.1.ffn_up_exps.weight", "blk.0.ffn_gate_shexp.weight"}) {
    EXPECT_EQ(s->state(name).axis, Axis::rows) << name;
    EXPECT_EQ(s->state(name).ne, (std::vector<int64_t>{256, 256})) << name;
  }
  EXPECT_EQ(s->state("blk.0.ffn_down_exps.weight").axis, Axis::columns);
  EXPECT_EQ(s->state("blk.0.ffn_down_shexp.weight").axis, Axis::columns);
  EXPECT_EQ(s->state("output.weight").axis, Axis::rows);
  EXPECT_EQ(s->state("output.weight").ne, (std::vector<int64_t>{500, 500}));
  for (const char* name : {"blk.0.attn_q.weight", "blk.0.ffn_gate_inp.weight", "token_embd.weight",
                           "output_norm.weight", "cache_k_l0", "anything.else"}) {
    EXPECT_EQ(s->state(name).axis, Axis::mirrored) << name;
  }
  EXPECT_EQ(s->split_tensors(), 2u * 6 + 1);
}

TEST(FfnSplit, EachDeviceHoldsTheWholePartAndItsShareOfTheRest) {
  const ModelInfo m = moe(3, 512);
  auto s = FfnSplit::make(m, 2);
  ASSERT_TRUE(s.is_ok());
  uint64_t split_bytes = 0;
  for (const TensorInfo& t : m.tensors) {
    if (s->state(t.name).axis != FfnSplitState::Axis::mirrored) split_bytes += t.bytes;
  }
  EXPECT_EQ(s->mirrored_bytes() + split_bytes, m.tensor_bytes);
  EXPECT_EQ(s->device_weight_bytes(0), s->mirrored_bytes() + split_bytes / 2);
  EXPECT_EQ(s->device_weight_bytes(0), s->device_weight_bytes(1));
  // Per token a device reads its half of the used experts, of the shared expert and of the head.
  const uint64_t experts = 3 * 3 * (512 * 256 * 4) * 8;
  EXPECT_EQ(s->device_read_bytes(0) - s->mirrored_read_bytes(),
            (experts / 8 * 2 + 3 * 3 * 512 * 256 * 4 + 256 * 1000 * 4) / 2);
}

TEST(FfnSplit, PartsAreWholeQuantisationBlocksOrTheSplitIsRefused) {
  // Q4_K blocks are 256 wide: 768 goes 512 + 256 (whole lcm(256, 128) pieces), 256 cannot be halved.
  auto uneven = FfnSplit::make(moe(1, 768, GGML_TYPE_Q4_K), 2);
  ASSERT_TRUE(uneven.is_ok()) << uneven.status().to_string();
  EXPECT_EQ(uneven->state("blk.0.ffn_down_exps.weight").ne, (std::vector<int64_t>{256, 512}));
  auto refused = FfnSplit::make(moe(1, 256, GGML_TYPE_Q4_K), 2);
  ASSERT_FALSE(refused.is_ok());
  EXPECT_NE(refused.status().message().find("blk.0.ffn_down"), std::string::npos) << refused.status().message();
  EXPECT_NE(refused.status().message().find("blocks of 256"), std::string::npos) << refused.status().message();
  // Three devices: each a third, in whole 128-element pieces where possible.
  auto three = FfnSplit::make(moe(1, 768), 3);
  ASSERT_TRUE(three.is_ok());
  EXPECT_EQ(three->state("blk.0.ffn_up_exps.weight").ne, (std::vector<int64_t>{256, 256, 256}));
  EXPECT_FALSE(FfnSplit::make(moe(1, 768), 1).is_ok());
}

NodeSpec box(const std::string& name, uint64_t free_mib, DeviceKind kind = DeviceKind::gpu) {
  NodeSpec n;
  n.name = name;
  n.devices.push_back(DeviceSpec{kind == DeviceKind::gpu ? "GPU" : "CPU", kind, free_mib * kMiB, 100e9, false});
  return n;
}

PlanOptions ffn_options() {
  PlanOptions o;
  o.memory.context = 256;
  o.memory.margin_fraction = 0;
  o.memory.margin_bytes = 0;
  o.parallelism = Parallelism::ffn_tensor;
  o.exchange_seconds = 1e-6;
  return o;
}

TEST(FfnPlan, EveryNodeRunsEveryLayerAndTheSwapsArePriced) {
  const ModelInfo m = moe(4, 512);
  auto p = make_plan(m, {box("a", 4096), box("b", 4096)}, ffn_options());
  ASSERT_TRUE(p.is_ok()) << p.status().to_string();
  ASSERT_TRUE(p->fits) << p->failure;
  EXPECT_EQ(p->parallelism, Parallelism::ffn_tensor);
  ASSERT_EQ(p->devices.size(), 2u);
  for (const DeviceAssignment& d : p->devices) {
    EXPECT_EQ(d.n_layers, 4);
    EXPECT_GT(d.kv, 0u);
  }
  EXPECT_TRUE(p->split.use_local_gpus);
  EXPECT_EQ(p->split.rpc_nodes, std::vector<std::string>{"b"});
  EXPECT_EQ(p->exchanges_per_token, 5);
  EXPECT_NEAR(p->link_seconds, 5 * 1e-6, 1e-12);
  // Both parallelisms priced; the layer split reads every byte once in turn, the tensor split half
  // of the FFNs on each box at once, so here (cheap swaps) it is faster.
  ASSERT_EQ(p->estimates.size(), 2u);
  EXPECT_TRUE(p->estimates[0].fits && p->estimates[1].fits);
  EXPECT_GT(p->estimates[1].tokens_per_second, p->estimates[0].tokens_per_second);
  EXPECT_NE(format_plan(p.value(), m, ffn_options()).find("parallelism layer: "), std::string::npos);
  EXPECT_NE(plan_to_json(p.value(), m, ffn_options()).find("\"parallelism\": \"ffn-tensor\""), std::string::npos);

  // Dear swaps make it the slower one.
  PlanOptions dear = ffn_options();
  dear.exchange_seconds = 0.001;
  auto slow = make_plan(m, {box("a", 4096), box("b", 4096)}, dear);
  ASSERT_TRUE(slow.is_ok());
  EXPECT_LT(slow->estimates[1].tokens_per_second, slow->estimates[0].tokens_per_second);
}

TEST(FfnPlan, WhatCannotRunSoIsNamed) {
  const ModelInfo m = moe(4, 512);
  // A CPU head runs no layer: one worker alone is one device.
  auto one = make_plan(m, {box("a", 4096, DeviceKind::cpu), box("b", 4096)}, ffn_options());
  ASSERT_TRUE(one.is_ok());
  EXPECT_FALSE(one->fits);
  EXPECT_NE(one->failure.find("two or more devices"), std::string::npos) << one->failure;
  // Too little memory: the node and what it is short of, and the layer split offered if it fits.
  auto tight = make_plan(m, {box("a", 64), box("b", 64)}, ffn_options());
  ASSERT_TRUE(tight.is_ok());
  if (!tight->fits) EXPECT_NE(tight->failure.find("short by"), std::string::npos) << tight->failure;
  auto tiny = make_plan(m, {box("a", 1), box("b", 1)}, ffn_options());
  ASSERT_TRUE(tiny.is_ok());
  EXPECT_FALSE(tiny->fits);
  EXPECT_NE(tiny->failure.find("under the FFN tensor split, a needs"), std::string::npos) << tiny->failure;
  // minimax-m3's sparse attention (a model with an indexer) runs one sequence at a time.
  ModelInfo sparse = moe(4, 512);
  sparse.indexer_n_head = 1;
  PlanOptions two = ffn_options();
  two.memory.parallel = 2;
  auto refused_parallel = make_plan(sparse, {box("a", 4096), box("b", 4096)}, two);
  ASSERT_TRUE(refused_parallel.is_ok());
  EXPECT_FALSE(refused_parallel->fits);
  EXPECT_NE(refused_parallel->failure.find("one sequence at a time"), std::string::npos) << refused_parallel->failure;
  EXPECT_TRUE(make_plan(sparse, {box("a", 4096), box("b", 4096)}, ffn_options())->fits);
  EXPECT_TRUE(make_plan(m, {box("a", 4096), box("b", 4096)}, two)->fits);
  // A hand split is a layer split.
  PlanOptions hand = ffn_options();
  hand.layers = {{2, 0}, {2, 2}};
  auto refused = make_plan(m, {box("a", 4096), box("b", 4096)}, hand);
  ASSERT_FALSE(refused.is_ok());
  EXPECT_NE(refused.status().message().find("layer split"), std::string::npos) << refused.status().message();
}

}  // namespace
}  // namespace tandem::plan
