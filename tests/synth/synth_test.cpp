// Every synthetic architecture and weight type is written, read back, loaded by llama.cpp on the
// CPU, and generates: the CPU backend's code path for each type runs at least once here.
#include <map>
#include <set>

#include <gtest/gtest.h>

#include "engine/generate.h"
#include "ggml.h"
#include "plan/model_info.h"
#include "synth/presets.h"
#include "synth/writer.h"
#include "test_util.h"

namespace tandem::synth {
namespace {

using tandem::testing::ScratchDir;

ModelSpec small(const std::string& preset_name, int type) {
  ModelSpec s = preset(preset_name).value();
  s.type = type;
  return s;
}

void write_load_generate(const ModelSpec& spec, const ScratchDir& dir) {
  const std::string path = dir.file("model.gguf");
  auto written = write_model(spec, path, {});
  ASSERT_TRUE(written.is_ok()) << written.status().to_string();

  auto info = plan::read_model_info(path);
  ASSERT_TRUE(info.is_ok()) << info.status().to_string();
  EXPECT_EQ(info->arch, spec.arch);
  EXPECT_EQ(info->n_layer, spec.n_layer);
  EXPECT_EQ(info->n_expert, spec.n_expert);
  EXPECT_EQ(info->file_bytes, written->file_bytes);

  // The tensor table is exactly what the architecture expects.
  auto expected = tensor_table(spec, info->n_vocab);
  ASSERT_TRUE(expected.is_ok());
  ASSERT_EQ(info->tensors.size(), expected->size());
  for (size_t i = 0; i < expected->size(); ++i) {
    const auto& want = expected.value()[i];
    const auto& got = info->tensors[i];
    EXPECT_EQ(got.name, want.name);
    EXPECT_EQ(got.type, want.type) << got.name;
    for (int d = 0; d < 4; ++d) EXPECT_EQ(got.ne[d], want.ne[d]) << got.name << " dim " << d;
  }

  engine::GenerateOptions g;
  g.model = path;
  g.prompt = "The quick brown fox";
  g.n_predict = 8;
  g.n_ctx = 128;
  g.threads = 2;
  g.ignore_eos = true;
  auto out = engine::generate(g);
  ASSERT_TRUE(out.is_ok()) << out.status().to_string();
  EXPECT_EQ(out->tokens.size(), 8u);
  EXPECT_GT(out->n_prompt_tokens, 1);
  // Greedy decoding of random weights is still deterministic.
  auto again = engine::generate(g);
  ASSERT_TRUE(again.is_ok());
  EXPECT_EQ(again->tokens, out->tokens);
}

class EveryArchAndType : public ::testing::TestWithParam<std::tuple<std::string, int>> {};

TEST_P(EveryArchAndType, WritesLoadsAndGenerates) {
  ScratchDir dir;
  write_load_generate(small(std::get<0>(GetParam()), std::get<1>(GetParam())), dir);
}

INSTANTIATE_TEST_SUITE_P(Synth, EveryArchAndType,
                         ::testing::Combine(::testing::Values("tiny", "tiny-qwen3moe", "tiny-glm4moe"),
                                            ::testing::Values(GGML_TYPE_F32, GGML_TYPE_F16, GGML_TYPE_Q8_0,
                                                              GGML_TYPE_Q4_K, GGML_TYPE_IQ4_XS)),
                         [](const auto& info) {
                           std::string name = std::get<0>(info.param) + "_" +
                                              ggml_type_name(static_cast<ggml_type>(std::get<1>(info.param)));
                           for (char& c : name)
                             if (c == '-') c = '_';
                           return name;
                         });

TEST(Synth, SameSeedWritesIdenticalFiles) {
  ScratchDir dir;
  ModelSpec s = preset("tiny").value();
  ASSERT_TRUE(write_model(s, dir.file("a.gguf"), {}).is_ok());
  SynthOptions one_thread;
  one_thread.threads = 1;
  ASSERT_TRUE(write_model(s, dir.file("b.gguf"), one_thread).is_ok());
  std::ifstream a(dir.file("a.gguf"), std::ios::binary), b(dir.file("b.gguf"), std::ios::binary);
  EXPECT_TRUE(std::equal(std::istreambuf_iterator<char>(a), {}, std::istreambuf_iterator<char>(b)));
}

TEST(Synth, TinyIsSmallAndCarriesAChatTemplate) {
  ScratchDir dir;
  auto r = write_model(preset("tiny").value(), dir.file("tiny.gguf"), {});
  ASSERT_TRUE(r.is_ok()) << r.status().to_string();
  EXPECT_LT(r->file_bytes, 16u << 20);
  auto info = plan::read_model_info(dir.file("tiny.gguf"));
  ASSERT_TRUE(info.is_ok());
  EXPECT_TRUE(info->has_chat_template);
  EXPECT_EQ(info->n_vocab, 32256u);  // DeepSeek-Coder's BPE tokenizer (presets.cpp says why)
}

TEST(Synth, HeaderOnlyM3IsTheRealModelsShape) {
  ScratchDir dir;
  ModelSpec s = preset("m3").value();
  s.header_only = true;
  auto r = write_model(s, dir.file("m3.gguf"), {});
  ASSERT_TRUE(r.is_ok()) << r.status().to_string();
  EXPECT_LT(r->file_bytes, 64u << 20);  // a tensor table and a tokenizer, no weights
  auto info = plan::read_model_info(dir.file("m3.gguf"));
  ASSERT_TRUE(info.is_ok()) << info.status().to_string();
  EXPECT_TRUE(info->header_only);
  EXPECT_EQ(info->n_layer, 60u);
  EXPECT_EQ(info->n_expert, 128u);
  EXPECT_EQ(info->n_expert_used, 4u);
  EXPECT_EQ(info->n_expert_shared, 1u);
  EXPECT_EQ(info->n_vocab, 200064u);
  EXPECT_EQ(info->tensors.size(), 1176u);
  EXPECT_GE(info->n_params, 415e9);
  EXPECT_LE(info->n_params, 440e9);
  EXPECT_GE(info->active_params, 21e9);
  EXPECT_LE(info->active_params, 25e9);
  EXPECT_GT(info->tensor_bytes, 200e9);  // ~4.25 bits per weight
}

// The proxies of the other architectures' large models: deep, many experts per token, and what a
// token reads close to the released model's active parameters (GLM-4.5: 32B, Qwen3-235B-A22B: 22B).
TEST(Synth, TheDeepProxiesHaveTheirModelsPerTokenShapes) {
  ScratchDir dir;
  struct Want {
    const char* preset;
    const char* arch;
    uint32_t layers, used, shared;
    double active;
  };
  for (const Want& w :
       {Want{"qwen3-proxy", "qwen3moe", 94, 8, 0, 22e9}, Want{"glm-proxy", "glm4moe", 92, 8, 1, 32e9}}) {
    ModelSpec s = preset(w.preset).value();
    s.header_only = true;
    const std::string path = dir.file(std::string(w.preset) + ".gguf");
    ASSERT_TRUE(write_model(s, path, {}).is_ok()) << w.preset;
    auto info = plan::read_model_info(path);
    ASSERT_TRUE(info.is_ok()) << info.status().to_string();
    EXPECT_EQ(info->arch, w.arch);
    EXPECT_EQ(info->n_layer, w.layers) << w.preset;
    EXPECT_EQ(info->n_expert_used, w.used) << w.preset;
    EXPECT_EQ(info->n_expert_shared, w.shared) << w.preset;
    EXPECT_NEAR(info->active_params, w.active, 0.05 * w.active) << w.preset;
    EXPECT_LT(info->tensor_bytes, 30e9) << w.preset << ": no longer fits beside a split on one H200";
  }
}

// The headers of preset `proxy` and of the real MiniMax-M3, as the planner reads them.
std::pair<Result<plan::ModelInfo>, Result<plan::ModelInfo>> proxy_and_real(const ScratchDir& dir,
                                                                           const std::string& proxy_name) {
  ModelSpec proxy = preset(proxy_name).value(), real = preset("m3").value();
  proxy.header_only = real.header_only = true;
  EXPECT_TRUE(write_model(proxy, dir.file("proxy.gguf"), {}).is_ok());
  EXPECT_TRUE(write_model(real, dir.file("real.gguf"), {}).is_ok());
  return {plan::read_model_info(dir.file("proxy.gguf")), plan::read_model_info(dir.file("real.gguf"))};
}

TEST(Synth, M3ProxyReadsWhatTheRealModelReadsPerToken) {
  // The proxy has 16 experts instead of 128, so a fraction of the file, but the same bytes per token.
  ScratchDir dir;
  auto [p, m] = proxy_and_real(dir, "m3-proxy");
  ASSERT_TRUE(p.is_ok() && m.is_ok());
  // Only the router (E x experts, F32) and routing bias differ per token.
  const uint64_t router_diff = m->active.router - p->active.router;
  EXPECT_EQ(p->active_bytes_per_token() + router_diff, m->active_bytes_per_token());
  EXPECT_NEAR(static_cast<double>(p->active_bytes_per_token()), 14.0e9, 0.6e9);
  EXPECT_NEAR(static_cast<double>(p->tensor_bytes), 33e9, 4e9);
}

TEST(Synth, M3ExpertsProxyIsTheRealModelsLayersWithEveryExpert) {
  // Fewer layers, each one exactly the real model's (both kinds: dense and 128-expert MoE), and a
  // file that fits the lent GPU's disk beside a split's worker cache of half of it.
  ScratchDir dir;
  auto [p, m] = proxy_and_real(dir, "m3-experts-proxy");
  ASSERT_TRUE(p.is_ok() && m.is_ok());
  EXPECT_EQ(p->n_layer, 7u);
  EXPECT_EQ(p->n_layer_dense_lead, 1u);
  EXPECT_EQ(p->n_expert, 128u);
  EXPECT_EQ(p->n_expert_used, m->n_expert_used);
  std::map<std::string, const plan::TensorInfo*> real_tensors;
  for (const auto& t : m->tensors) real_tensors[t.name] = &t;
  for (const auto& t : p->tensors) {
    // Layer 0 is dense in both; the proxy's MoE layers 1-6 are the real model's 3-59.
    std::string name = t.name;
    if (t.layer >= 1) name = "blk." + std::to_string(t.layer + 2) + name.substr(name.find('.', 4));
    ASSERT_TRUE(real_tensors.count(name)) << t.name;
    const plan::TensorInfo& r = *real_tensors[name];
    EXPECT_EQ(t.type, r.type) << t.name;
    EXPECT_EQ(t.bytes, r.bytes) << t.name;
    for (int d = 0; d < 4; ++d) EXPECT_EQ(t.ne[d], r.ne[d]) << t.name;
  }
  EXPECT_GT(p->tensor_bytes, 24e9);
  EXPECT_LT(p->tensor_bytes, 28e9) << "no longer fits the lent GPU's disk beside a split's worker cache";
}

TEST(Synth, RejectsImpossibleShapesWithTheFieldName) {
  ScratchDir dir;
  ModelSpec s = preset("tiny").value();
  s.n_expert_used = s.n_expert + 1;
  auto r = write_model(s, dir.file("bad.gguf"), {});
  ASSERT_FALSE(r.is_ok());
  EXPECT_NE(r.status().message().find("used experts"), std::string::npos) << r.status().message();
  EXPECT_FALSE(std::filesystem::exists(dir.file("bad.gguf")));
  EXPECT_FALSE(std::filesystem::exists(dir.file("bad.gguf.part")));

  s = preset("tiny").value();
  s.vocab = "no-such-vocab.gguf";
  r = write_model(s, dir.file("bad.gguf"), {});
  ASSERT_FALSE(r.is_ok());
  EXPECT_NE(r.status().message().find("no-such-vocab.gguf"), std::string::npos);
}

}  // namespace
}  // namespace tandem::synth
