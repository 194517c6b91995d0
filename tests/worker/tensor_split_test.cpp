// llama.cpp's meta device driven by tandem (engine::Placement::meta_tensor_split, `tandem engine
// --split-mode tensor`): every layer on two workers at once gives the tokens of the layer split
// on a model whose sums leave no near-ties, and a placement that cannot run that way is refused.
#include <gtest/gtest.h>

#include "engine/generate.h"
#include "plan/ffn_split.h"
#include "plan/model_info.h"
#include "synth/presets.h"
#include "synth/writer.h"
#include "worker_env.h"

namespace tandem::engine {
namespace {

using namespace tandem::testing;

// 16 greedy tokens of `model` on one CPU thread in file layout (bit-identical to a split's).
GenerateOptions sixteen_tokens(const std::string& model) {
  GenerateOptions o;
  o.model = model;
  o.prompt = "Two desktop boxes joined by one cable";
  o.n_predict = 16;
  o.n_ctx = 128;
  o.threads = 1;
  o.ignore_eos = true;
  o.placement.cpu_weight_repack = false;
  return o;
}

// `preset` in Q8_0 (the meta device halves rows, which a 256-wide K-quant block cannot be), in `dir`.
std::string q8_model(const ScratchDir& dir, const std::string& preset) {
  synth::ModelSpec spec = synth::preset(preset).value();
  spec.type = 8;  // GGML_TYPE_Q8_0
  const std::string model = dir.file(preset + "-q8.gguf");
  EXPECT_TRUE(synth::write_model(spec, model, {}).is_ok());
  return model;
}

TEST(TensorSplit, TwoWorkersRunEveryLayerAtOnceAndGiveTheLayerSplitsTokens) {
  ScratchDir dir;
  const std::string model = q8_model(dir, "tiny-qwen3moe");
  const link::Secret secret = make_secret(dir.file("cluster.key"));
  WorkerProcess w1(dir, "box-b", dir.file("cluster.key"));
  WorkerProcess w2(dir, "box-c", dir.file("cluster.key"));
  ASSERT_TRUE(w1.up() && w2.up()) << w1.log() << w2.log();
  auto f1 = forward_to(w1, secret);
  auto f2 = forward_to(w2, secret);
  GenerateOptions o = sixteen_tokens(model);
  o.placement.rpc_servers = {"127.0.0.1:" + std::to_string(f1->port()), "127.0.0.1:" + std::to_string(f2->port())};
  o.placement.device_layers = {1, 1};
  auto layer = generate(o);
  ASSERT_TRUE(layer.is_ok()) << layer.status().to_string();

  GenerateOptions t = o;
  t.placement.meta_tensor_split = true;
  auto tensor = generate(t);
  ASSERT_TRUE(tensor.is_ok()) << tensor.status().to_string() << w1.log() << w2.log();
  EXPECT_EQ(tensor->tokens, layer->tokens);
  EXPECT_EQ(tensor->datapath.rpc.writes, 0u) << "queued writes would send stale partial sums";

  // Every weight split by the devices' shares (as far as its blocks and heads allow): at 1:1 the
  // workers get about the same bytes, at 1:3 the second clearly more (a layer split of 1 and 3
  // layers is impossible with 2).
  const auto shares = [&](std::vector<int> split) {
    t.placement.device_layers = split;
    const uint64_t a0 = f1->stats().bytes_to_worker, b0 = f2->stats().bytes_to_worker;
    auto r = generate(t);
    EXPECT_TRUE(r.is_ok()) << r.status().to_string();
    return static_cast<double>(f2->stats().bytes_to_worker - b0) /
           static_cast<double>(f1->stats().bytes_to_worker - a0);
  };
  EXPECT_NEAR(shares({1, 1}), 1.0, 0.2);
  EXPECT_GT(shares({1, 3}), 1.4);

  GenerateOptions bad = t;
  bad.placement.cpu_layers = 1;
  auto refused = generate(bad);
  ASSERT_FALSE(refused.is_ok());
  EXPECT_NE(refused.status().message().find("no CPU layers"), std::string::npos) << refused.status().message();
}

// The FFN tensor split (Placement::ffn_tensor_split, `--split-mode ffn-tensor`): every layer on two
// real workers at once, only the FFNs and the output head split, gives one process's greedy tokens
// on minimax-m3 (whose sparse attention llama.cpp's own tensor split refuses) and on qwen3moe; each
// worker holds its own half of the FFNs, not the whole model.
TEST(FfnTensorSplit, TwoWorkersGiveOneProcesssTokensOnEachArchitecture) {
  ScratchDir dir;
  const link::Secret secret = make_secret(dir.file("cluster.key"));
  WorkerProcess w1(dir, "box-b", dir.file("cluster.key"));
  WorkerProcess w2(dir, "box-c", dir.file("cluster.key"));
  ASSERT_TRUE(w1.up() && w2.up()) << w1.log() << w2.log();
  auto f1 = forward_to(w1, secret);
  auto f2 = forward_to(w2, secret);
  for (const char* preset : {"tiny", "tiny-qwen3moe"}) {
    SCOPED_TRACE(preset);
    const std::string model = q8_model(dir, preset);
    const GenerateOptions one = sixteen_tokens(model);
    auto alone = generate(one);
    ASSERT_TRUE(alone.is_ok()) << alone.status().to_string();

    GenerateOptions t = one;
    t.placement.rpc_servers = {"127.0.0.1:" + std::to_string(f1->port()), "127.0.0.1:" + std::to_string(f2->port())};
    t.placement.ffn_tensor_split = true;
    const uint64_t a0 = f1->stats().bytes_to_worker, b0 = f2->stats().bytes_to_worker;
    auto split = generate(t);
    ASSERT_TRUE(split.is_ok()) << split.status().to_string() << w1.log() << w2.log();
    EXPECT_EQ(split->tokens, alone->tokens);
    // Every layer's reduction went through the overlapped copies: two per layer per token at least.
    EXPECT_GE(split->datapath.overlapped_reduce_copies, 2ull * 15);
    // Each worker received its part: the whole part and half of the FFNs and output head, so
    // less than the model, and about what the other did.
    auto info = plan::read_model_info(model);
    ASSERT_TRUE(info.is_ok());
    auto policy = plan::FfnSplit::make(info.value(), 2);
    ASSERT_TRUE(policy.is_ok());
    const uint64_t to_a = f1->stats().bytes_to_worker - a0, to_b = f2->stats().bytes_to_worker - b0;
    uint64_t embedding = 0;  // stays on the head, which gathers the rows
    for (const auto& x : info->tensors) embedding += x.role == plan::WeightRole::embedding ? x.bytes : 0;
    EXPECT_GE(static_cast<double>(to_a), 0.95 * static_cast<double>(policy->device_weight_bytes(0) - embedding));
    EXPECT_LT(to_a, info->tensor_bytes);
    EXPECT_NEAR(static_cast<double>(to_b) / static_cast<double>(to_a), 1.0, 0.1);
    // ggml's own copies, one at a time, give the same tokens.
    GenerateOptions serial = t;
    serial.placement.overlapped_reduce = false;
    auto one_at_a_time = generate(serial);
    ASSERT_TRUE(one_at_a_time.is_ok()) << one_at_a_time.status().to_string();
    EXPECT_EQ(one_at_a_time->tokens, alone->tokens);
    EXPECT_EQ(one_at_a_time->datapath.overlapped_reduce_copies, 0u);
  }

  GenerateOptions one_device;
  one_device.model = dir.file("tiny-q8.gguf");
  one_device.prompt = "x";
  one_device.n_ctx = 64;
  one_device.placement.rpc_servers = {"127.0.0.1:" + std::to_string(f1->port())};
  one_device.placement.ffn_tensor_split = true;
  auto refused = generate(one_device);
  ASSERT_FALSE(refused.is_ok());
  EXPECT_NE(refused.status().message().find("two or more devices"), std::string::npos) << refused.status().message();
}

}  // namespace
}  // namespace tandem::engine
