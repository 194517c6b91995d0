// The correctness oracle of a split: greedy tokens through remote ggml RPC servers equal the tokens
// of the same model in one process.
#include "engine/generate.h"

#include <gtest/gtest.h>

#include "common/build_info.h"
#include "support/process.h"
#include "synth/presets.h"
#include "synth/writer.h"
#include "test_util.h"

namespace tandem::engine {
namespace {

using tandem::testing::ChildProcess;
using tandem::testing::ScratchDir;

GenerateOptions options(const std::string& model) {
  GenerateOptions g;
  g.model = model;
  g.prompt = "Two desktop boxes joined by one cable";
  g.n_predict = 16;
  g.n_ctx = 128;
  g.threads = 2;
  g.ignore_eos = true;
  return g;
}

TEST(Generate, ChunkTimesGiveTheSpeedOfEachRunOfGeneratedTokens) {
  ScratchDir dir;
  const std::string model = dir.file("tiny.gguf");
  ASSERT_TRUE(synth::write_model(synth::preset("tiny").value(), model, {}).is_ok());
  GenerateOptions o = options(model);
  o.n_predict = 13;
  o.chunk_tokens = 4;
  auto r = generate(o);
  ASSERT_TRUE(r.is_ok()) << r.status().to_string();
  // Tokens 1-4, 5-8 and 9-12 after the first: three whole runs of four.
  ASSERT_EQ(r->chunk_tps.size(), 3u);
  for (double tps : r->chunk_tps) EXPECT_GT(tps, 0.0);
  EXPECT_NE(generate_result_json(r.value()).find("\"chunk_tps\""), std::string::npos);
  o.chunk_tokens = 0;
  EXPECT_TRUE(generate(o)->chunk_tps.empty());
}

TEST(Generate, SplitAcrossRpcServersGivesTheTokensOfOneProcess) {
  ScratchDir dir;
  const std::string model = dir.file("tiny.gguf");
  ASSERT_TRUE(synth::write_model(synth::preset("tiny").value(), model, {}).is_ok());
  GenerateOptions reference = options(model);
  reference.placement.cpu_weight_repack = false;  // the RPC server's CPU backend never repacks
  auto alone = generate(reference);
  ASSERT_TRUE(alone.is_ok()) << alone.status().to_string();

  const int p1 = tandem::testing::free_port(), p2 = tandem::testing::free_port();
  ChildProcess s1({TANDEM_LLAMA_RPC_SERVER_EXE, "-H", "127.0.0.1", "-p", std::to_string(p1)}, dir.file("rpc1.log"));
  ChildProcess s2({TANDEM_LLAMA_RPC_SERVER_EXE, "-H", "127.0.0.1", "-p", std::to_string(p2)}, dir.file("rpc2.log"));
  ASSERT_TRUE(tandem::testing::wait_for_port(p1, 10000));
  ASSERT_TRUE(tandem::testing::wait_for_port(p2, 10000));

  GenerateOptions split = options(model);
  split.placement.rpc_servers = {"127.0.0.1:" + std::to_string(p1), "127.0.0.1:" + std::to_string(p2)};
  split.placement.cpu_layers = 1;
  split.placement.device_layers = {2, 1};
  split.placement.cpu_weight_repack = false;  // layer 0 stays here: the same kernels as the reference
  auto through = generate(split);
  ASSERT_TRUE(through.is_ok()) << through.status().to_string();
  EXPECT_EQ(through->tokens, alone->tokens);
  // Each step's inputs went to both servers through the asynchronous path...
  const uint64_t queued = through->datapath.rpc.writes;
  EXPECT_GE(queued, 2u * static_cast<unsigned>(split.n_predict)) << "writes queued: " << queued;

  // ... and ggml's own one-at-a-time writes give the same tokens.
  split.placement.async_rpc_writes = false;
  auto waited = generate(split);
  ASSERT_TRUE(waited.is_ok()) << waited.status().to_string();
  EXPECT_EQ(waited->tokens, alone->tokens);
  EXPECT_EQ(waited->datapath.rpc.writes, 0u);
}

TEST(Generate, ASplitThatDoesNotCoverTheModelIsRefused) {
  ScratchDir dir;
  const std::string model = dir.file("tiny.gguf");
  ASSERT_TRUE(synth::write_model(synth::preset("tiny").value(), model, {}).is_ok());
  GenerateOptions g = options(model);
  g.placement.cpu_layers = 9;
  auto r = generate(g);
  ASSERT_FALSE(r.is_ok());
  EXPECT_NE(r.status().message().find("CPU layers must be in 0..4"), std::string::npos) << r.status().message();
}

TEST(Generate, AnUnreachableRpcServerIsAnErrorNotACrash) {
  ScratchDir dir;
  const std::string model = dir.file("tiny.gguf");
  ASSERT_TRUE(synth::write_model(synth::preset("tiny").value(), model, {}).is_ok());
  GenerateOptions g = options(model);
  g.placement.rpc_servers = {"127.0.0.1:" + std::to_string(tandem::testing::free_port())};
  auto r = generate(g);
  ASSERT_FALSE(r.is_ok());
  EXPECT_EQ(r.status().code(), StatusCode::unavailable);
  EXPECT_NE(r.status().message().find("RPC server 127.0.0.1:"), std::string::npos) << r.status().message();
}

TEST(Generate, PromptLongerThanTheContextNamesBothNumbers) {
  ScratchDir dir;
  const std::string model = dir.file("tiny.gguf");
  ASSERT_TRUE(synth::write_model(synth::preset("tiny").value(), model, {}).is_ok());
  GenerateOptions g = options(model);
  g.n_ctx = 16;
  g.prompt = std::string(400, 'a') + " b c d e f g h i j k l m n o p q r s t u v w x y z";
  auto r = generate(g);
  ASSERT_FALSE(r.is_ok());
  EXPECT_NE(r.status().message().find("context of 16 tokens"), std::string::npos) << r.status().message();
}

}  // namespace
}  // namespace tandem::engine
