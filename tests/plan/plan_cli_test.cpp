// `tandem plan` on the real MiniMax-M3 tensor table (a header-only file) and its exit codes.
#include <gtest/gtest.h>

#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "common/units.h"
#include "plan/eagle3_model.h"
#include "plan/solver.h"
#include "synth/presets.h"
#include "synth/writer.h"
#include "test_util.h"

namespace tandem::plan {
namespace {

using tandem::testing::run_tandem;
using tandem::testing::ScratchDir;

// One header-only M3 per test process (~7 MB). ctest runs each test in its own process, several
// at once, so the file name carries the process id.
class PlanM3 : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    std::filesystem::create_directories(TANDEM_TEST_TMP);
    m3_ = std::string(TANDEM_TEST_TMP) + "/plan-m3-header-only-" + std::to_string(::getpid()) + ".gguf";
    synth::ModelSpec spec = synth::preset("m3").value();
    spec.header_only = true;
    auto written = synth::write_model(spec, m3_, {});
    ASSERT_TRUE(written.is_ok()) << written.status().to_string();
  }
  static void TearDownTestSuite() { std::filesystem::remove(m3_); }
  static std::string m3_;

  ScratchDir dir_;
  tandem::testing::CommandResult plan(const std::string& args) {
    return run_tandem("plan --model " + m3_ + " " + args, dir_.file(""));
  }
};
std::string PlanM3::m3_;

TEST_F(PlanM3, FitsOnTwo128GiBBoxesAt32kContext) {
  auto r = plan("--context 32768 --parallel 1 --node box-a=128GiB@273GB/s --node box-b=128GiB@273GB/s --json");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  auto j = nlohmann::json::parse(r.out);
  EXPECT_TRUE(j["fits"].get<bool>());
  ASSERT_EQ(j["devices"].size(), 2u);
  int layers = 0;
  for (const auto& d : j["devices"]) {
    EXPECT_GT(d["n_layers"].get<int>(), 20) << d.dump();
    EXPECT_GT(d["headroom"].get<int64_t>(), int64_t{4} << 30) << d.dump();  // several GiB to spare on each box
    layers += d["n_layers"].get<int>();
  }
  EXPECT_EQ(layers, 60);
  EXPECT_TRUE(j["devices"][0]["output"].get<bool>());  // a GPU head keeps the output head
  EXPECT_EQ(j["split"]["rpc_nodes"], nlohmann::json::array({"box-b"}));
  EXPECT_GT(j["tokens_per_second"].get<double>(), 5.0);

  auto text = plan("--context 32768 --node box-a=128GiB@273GB/s --node box-b=128GiB@273GB/s");
  ASSERT_EQ(text.exit_code, 0) << text.err;
  EXPECT_NE(text.out.find("fits: smallest headroom"), std::string::npos) << text.out;
  EXPECT_NE(text.out.find("bandwidth bound"), std::string::npos) << text.out;
}

TEST_F(PlanM3, DoesNotFitOnTwo96GiBBoxesAndSaysWhatWould) {
  auto r = plan("--context 32768 --parallel 2 --node a=96GiB --node b=96GiB");
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_NE(r.err.find("does not fit"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("short by"), std::string::npos) << r.err;
  EXPECT_NE(r.out.find("would fit: one more node like 'a'"), std::string::npos) << r.out;
}

TEST_F(PlanM3, ThreeUnequalNodesFavourTheFastest) {
  auto r = plan("--context 32768 --node a=128GiB@273GB/s --node b=64GiB@200GB/s --node c=48GiB@100GB/s --json");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  auto j = nlohmann::json::parse(r.out);
  ASSERT_EQ(j["devices"].size(), 3u);
  const int a = j["devices"][0]["n_layers"], b = j["devices"][1]["n_layers"], c = j["devices"][2]["n_layers"];
  EXPECT_EQ(a + b + c, 60);
  EXPECT_GT(a, b);
  EXPECT_GT(b, 0);
  EXPECT_GT(c, 0);
  // The head has a GPU: llama.cpp's order, the workers' devices first, the head's GPU last with
  // the output head; the devices table stays head first, with the layers each one runs.
  EXPECT_EQ(j["split"]["device_layers"], nlohmann::json::array({b, c, a}));
  EXPECT_EQ(j["split"]["workers_first"], true);
  EXPECT_EQ(j["devices"][1]["first_layer"], 0);
  EXPECT_EQ(j["devices"][2]["first_layer"], b);
  EXPECT_EQ(j["devices"][0]["first_layer"], b + c);
  EXPECT_EQ(j["devices"][0]["output"], true);
}

TEST_F(PlanM3, OneNode) {
  auto small = plan("--context 32768 --node a=128GiB");
  EXPECT_EQ(small.exit_code, 1);
  EXPECT_NE(small.err.find("short by"), std::string::npos) << small.err;
  auto big = plan("--context 32768 --node a=512GiB --json");
  ASSERT_EQ(big.exit_code, 0) << big.err;
  auto j = nlohmann::json::parse(big.out);
  EXPECT_EQ(j["devices"][0]["n_layers"], 60);
  EXPECT_EQ(j["link_seconds"], 0.0);
}

TEST_F(PlanM3, ANodeWithNoFreeMemoryGetsNoLayers) {
  auto r = plan("--context 32768 --node a=128GiB --node empty=0 --node c=128GiB --json");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  auto j = nlohmann::json::parse(r.out);
  EXPECT_EQ(j["devices"][1]["n_layers"], 0);
  EXPECT_EQ(j["split"]["rpc_nodes"], nlohmann::json::array({"c"}));
  auto head = plan("--context 32768 --node a=0 --node b=512GiB");
  EXPECT_EQ(head.exit_code, 1);
  EXPECT_NE(head.err.find("the head 'a'"), std::string::npos) << head.err;
}

// deploy/tandem.example.toml is for MiniMax-M3 on two NVIDIA GB10s (128 GB shared by CPU and GPU):
// planned from its declared figures against the real tensor table, it fits within what an idle
// GB10 has available, with the unified-memory reserves held back on both boxes; the default prompt
// cache does not fit there, and the planner says which one would.
class ShippedExample : public PlanM3 {
 protected:
  std::string config() {
    std::ifstream in(std::string(TANDEM_SOURCE_DIR) + "/deploy/tandem.example.toml");
    std::string example((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    const std::string model_key = "path = \"";
    const size_t at = example.find(model_key);
    EXPECT_NE(at, std::string::npos);
    example.replace(at + model_key.size(), example.find('"', at + model_key.size()) - at - model_key.size(), m3_);
    tandem::testing::write_file(dir_.file("tandem.toml"), example);
    return dir_.file("tandem.toml");
  }
  tandem::testing::CommandResult declared(const std::string& flags) {
    return run_tandem("plan --declared -c " + config() + " " + flags, dir_.file(""));
  }
};

TEST_F(ShippedExample, FitsTwoGb10sWithinWhatAnIdleOneHasAvailable) {
  auto r = declared("--json");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  auto j = nlohmann::json::parse(r.out);
  EXPECT_TRUE(j["fits"].get<bool>());
  int layers = 0;
  for (const auto& d : j["devices"]) {
    // 115.85 GiB: MemAvailable of an idle GB10 (the old 116 GiB caps were above it).
    EXPECT_LE(d["free"].get<double>(), 115.85 * (1 << 30)) << d.dump();
    EXPECT_TRUE(d["unified_memory"].get<bool>()) << d.dump();
    EXPECT_EQ(d["reserve"]["os"], j["request"]["os_reserve"]) << d.dump();
    EXPECT_EQ(d["reserve"]["load"], j["request"]["load_reserve"]) << d.dump();
    EXPECT_EQ(d["reserve"]["prompt_cache"], j["request"]["prompt_cache"]) << d.dump();
    EXPECT_GT(d["reserved"].get<uint64_t>(), uint64_t{0}) << d.dump();
    EXPECT_GT(d["headroom"].get<int64_t>(), 0) << d.dump();
    layers += d["n_layers"].get<int>();
  }
  EXPECT_EQ(layers, 60);
  EXPECT_GE(j["request"]["context"].get<int>(), 32768) << "an agent's context";

  auto text = declared("");
  ASSERT_EQ(text.exit_code, 0) << text.err;
  EXPECT_NE(text.out.find("box-b/GPU: unified memory"), std::string::npos) << text.out;
}

TEST_F(ShippedExample, TheDefaultPromptCacheDoesNotFitBesideM3AndThePlannerSaysWhatDoes) {
  auto r = declared("--prompt-cache 8GiB");
  EXPECT_EQ(r.exit_code, 1) << r.out;
  const std::string flag = "would fit: --prompt-cache ";
  const size_t at = r.out.find(flag);
  ASSERT_NE(at, std::string::npos) << r.out;
  const std::string size = r.out.substr(at + flag.size(), r.out.find(' ', at + flag.size()) - at - flag.size());
  EXPECT_EQ(declared("--prompt-cache " + size).exit_code, 0) << "the suggestion fits: " << size;
  // And the defaults' margin (5% + 1 GiB) leaves M3 no room on these boxes at all.
  EXPECT_EQ(declared("--margin 0.05 --margin-bytes 1GiB").exit_code, 1);
}

// MiniMax-M3's EAGLE3 draft (docs/planning.md, "What fits beside MiniMax-M3"): one decoder layer
// on M3's hidden size and vocabulary, ~3.3B parameters of which 2.46B are its own embedding and LM
// head. On the shipped example it fits on the head at Q4_K, not at Q8_0, and without an embedding
// and LM head of its own (it then uses M3's) even at BF16.
std::string m3_eagle3(const ScratchDir& dir, int type, bool own_embedding_and_head) {
  testing::Eagle3Shape s;
  s.name = "MiniMax-M3-EAGLE3";
  s.n_embd = s.target_hidden = 6144;
  s.n_head = 64;
  s.n_head_kv = 8;
  s.head_dim = 128;
  s.n_ff = 28672;
  s.n_vocab = 200064;
  s.type = type;
  s.own_embedding = s.own_output = own_embedding_and_head;
  const std::string path =
      dir.file("m3-eagle3-" + std::to_string(type) + (own_embedding_and_head ? "" : "-shared") + ".gguf");
  EXPECT_TRUE(testing::write_eagle3_header(path, s));
  return path;
}

TEST_F(ShippedExample, M3sEagle3DraftFitsOnTheHeadAtQ4K) {
  const std::string flags = "--speculative draft --draft-model " + m3_eagle3(dir_, GGML_TYPE_Q4_K, true);
  auto r = declared(flags + " --json");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  auto j = nlohmann::json::parse(r.out);
  const auto& draft = j["speculative"]["draft"];
  EXPECT_TRUE(draft["eagle3"].get<bool>());
  EXPECT_EQ(draft["node"], "box-a");
  const uint64_t total = draft["total"].get<uint64_t>();
  EXPECT_EQ(total, draft["weights"].get<uint64_t>() + draft["kv"].get<uint64_t>() + draft["compute"].get<uint64_t>() +
                       draft["hidden_states"].get<uint64_t>());
  // About 1.72 GiB of weights: the 3.3B parameters at 4.5 bits.
  EXPECT_GT(draft["weights"].get<uint64_t>(), uint64_t{1700} << 20);
  EXPECT_LT(draft["weights"].get<uint64_t>(), uint64_t{1800} << 20);
  EXPECT_EQ(j["devices"][0]["draft"].get<uint64_t>(), total);
  EXPECT_GE(j["devices"][0]["headroom"].get<int64_t>(), 0);

  // Beside M3 alone box-a has room enough: its layers stay where they were.
  auto alone = nlohmann::json::parse(declared("--json").out);
  EXPECT_EQ(j["devices"][0]["n_layers"], alone["devices"][0]["n_layers"]);
  EXPECT_EQ(alone["devices"][0]["headroom"].get<int64_t>() - j["devices"][0]["headroom"].get<int64_t>(),
            static_cast<int64_t>(total) +
                (j["devices"][0]["compute"].get<int64_t>() - alone["devices"][0]["compute"].get<int64_t>()));

  auto text = declared(flags);
  ASSERT_EQ(text.exit_code, 0) << text.err;
  EXPECT_NE(text.out.find("draft    MiniMax-M3-EAGLE3 (eagle3, 1 layer, q4_K), up to 8 tokens a step, on box-a/GPU: "),
            std::string::npos)
      << text.out;
  EXPECT_NE(text.out.find(" + target hidden states 0.09\n"), std::string::npos) << text.out;
}

TEST_F(ShippedExample, M3sEagle3DraftAtQ8_0IsRefusedWithWhatWouldFit) {
  const std::string flags = "--speculative draft --draft-model " + m3_eagle3(dir_, GGML_TYPE_Q8_0, true);
  auto r = declared(flags + " --json");
  EXPECT_EQ(r.exit_code, 1) << r.out;
  auto j = nlohmann::json::parse(r.out);
  EXPECT_FALSE(j["fits"].get<bool>());
  const uint64_t total = j["speculative"]["draft"]["total"].get<uint64_t>();
  const std::string failure = j["failure"];
  EXPECT_NE(failure.find("the draft model " + dir_.file("") + "m3-eagle3-8.gguf needs " + format_bytes(total) +
                         " on the head 'box-a'"),
            std::string::npos)
      << failure;
  EXPECT_NE(failure.find("no split of the model's layers leaves more than"), std::string::npos) << failure;
  EXPECT_NE(failure.find("short by"), std::string::npos) << failure;
  EXPECT_NE(r.err.find("does not fit: the draft model"), std::string::npos) << r.err;

  auto text = declared(flags);
  EXPECT_NE(text.out.find("would fit: the draft quantised to q4_K (weights about 1.72 GiB instead of 3.24 GiB)"),
            std::string::npos)
      << text.out;
  EXPECT_NE(text.out.find("would fit: --speculative ngram"), std::string::npos) << text.out;
  // The context it suggests does fit.
  const std::string flag = "would fit: --context ";
  const size_t at = text.out.find(flag);
  ASSERT_NE(at, std::string::npos) << text.out;
  const std::string context =
      text.out.substr(at + flag.size(), text.out.find(' ', at + flag.size()) - at - flag.size());
  EXPECT_LT(std::stoi(context), 32768);
  EXPECT_EQ(declared(flags + " --context " + context).exit_code, 0) << context;
}

TEST_F(ShippedExample, M3sEagle3DraftUsingM3sEmbeddingAndHeadFitsEvenAtBf16) {
  auto r = declared("--json --speculative draft --draft-model " + m3_eagle3(dir_, GGML_TYPE_BF16, false));
  ASSERT_EQ(r.exit_code, 0) << r.err;
  auto j = nlohmann::json::parse(r.out);
  // 0.82B parameters at 2 bytes.
  EXPECT_GT(j["speculative"]["draft"]["weights"].get<uint64_t>(), uint64_t{1500} << 20);
  EXPECT_LT(j["speculative"]["draft"]["weights"].get<uint64_t>(), uint64_t{1600} << 20);
  EXPECT_GE(j["devices"][0]["headroom"].get<int64_t>(), 0);
}

TEST_F(PlanM3, NgramNeedsNoDraftModel) {
  auto r = plan("--context 32768 --node a=128GiB --node b=128GiB --speculative ngram");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.out.find("draft    none: ngram drafts up to 8 tokens a step from the request's own tokens"),
            std::string::npos)
      << r.out;
  EXPECT_EQ(r.out.find("- draft)"), std::string::npos) << "no draft column: " << r.out;
}

TEST(PlanCli, ADraftThatIsMissingOrNotAGgufIsAnErrorNamingTheFile) {
  ScratchDir dir;
  const std::string model = dir.file("tiny.gguf");
  synth::ModelSpec spec = synth::preset("tiny").value();
  spec.header_only = true;
  ASSERT_TRUE(synth::write_model(spec, model, {}).is_ok());
  const std::string base = "plan --model " + model + " --node a=8GiB --speculative draft ";
  auto missing = run_tandem(base + "--draft-model " + dir.file("nope.gguf"), dir.file(""));
  EXPECT_EQ(missing.exit_code, 1);
  EXPECT_NE(missing.err.find("the draft model ([model] draft_model): " + dir.file("nope.gguf") + ": no such file"),
            std::string::npos)
      << missing.err;
  const std::string text = dir.file("notes.gguf");
  tandem::testing::write_file(text, "these are notes, not a model\n");
  auto bad = run_tandem(base + "--draft-model " + text, dir.file(""));
  EXPECT_EQ(bad.exit_code, 2);
  EXPECT_NE(bad.err.find(text), std::string::npos) << bad.err;
  auto none = run_tandem(base, dir.file(""));
  EXPECT_EQ(none.exit_code, 2);
  EXPECT_NE(none.err.find("needs draft_model"), std::string::npos) << none.err;
}

TEST(PlanCli, ADraftMovesTheModelsLayersOffTheHeadAndTheLineShowsItsFigures) {
  ScratchDir dir;
  const std::string model = dir.file("tiny.gguf"), draft = dir.file("draft.gguf");
  synth::ModelSpec spec = synth::preset("tiny").value();
  spec.header_only = true;
  spec.n_layer = 16;  // layers of ~1.3 MiB
  ASSERT_TRUE(synth::write_model(spec, model, {}).is_ok());
  synth::ModelSpec small = synth::preset("tiny-qwen3moe").value();
  small.header_only = true;
  ASSERT_TRUE(synth::write_model(small, draft, {}).is_ok());
  // A fast head with room for the model but not for the draft beside all of it, a slow worker with
  // room for everything.
  const std::string base = "plan --model " + model +
                           " --context 512 --margin 0 --margin-bytes 0B --node a=170MiB@800GB/s --node b=1GiB@100GB/s";
  auto alone = run_tandem(base + " --json", dir.file(""));
  auto with = run_tandem(base + " --json --speculative draft --draft-model " + draft, dir.file(""));
  ASSERT_EQ(alone.exit_code, 0) << alone.err;
  ASSERT_EQ(with.exit_code, 0) << with.err;
  auto a = nlohmann::json::parse(alone.out), w = nlohmann::json::parse(with.out);
  const uint64_t total = w["speculative"]["draft"]["total"].get<uint64_t>();
  EXPECT_GT(total, uint64_t{8} << 20);
  EXPECT_EQ(w["devices"][0]["draft"].get<uint64_t>(), total);
  EXPECT_LT(w["devices"][0]["n_layers"].get<int>(), a["devices"][0]["n_layers"].get<int>());
  EXPECT_EQ(w["devices"][0]["n_layers"].get<int>() + w["devices"][1]["n_layers"].get<int>(), 16);
  EXPECT_GE(w["devices"][0]["headroom"].get<int64_t>(), 0);

  auto text = run_tandem(base + " --speculative draft --draft-model " + draft, dir.file(""));
  ASSERT_EQ(text.exit_code, 0) << text.err;
  auto gib = [](uint64_t b) {
    char buf[32];
    std::snprintf(buf, sizeof buf, "%.2f", static_cast<double>(b) / (1 << 30));
    return std::string(buf);
  };
  const auto& d = w["speculative"]["draft"];
  EXPECT_NE(text.out.find("on a: " + gib(total) + " GiB = weights " + gib(d["weights"]) + " + KV " + gib(d["kv"]) +
                          " + compute " + gib(d["compute"]) + "\n"),
            std::string::npos)
      << text.out;
  EXPECT_NE(text.out.find("headroom = free - margin - weights - KV - compute - draft"), std::string::npos) << text.out;
}

TEST_F(PlanM3, UsageErrorsExitWith2) {
  EXPECT_EQ(plan("--node a=lots").exit_code, 2);
  // A size without a unit is refused rather than read as bytes.
  auto bare = plan("--node box-a=128");
  EXPECT_EQ(bare.exit_code, 2);
  EXPECT_NE(bare.err.find("unit"), std::string::npos) << bare.err;
  EXPECT_EQ(plan("--node a=1GiB --kv-type q3").exit_code, 2);
  EXPECT_EQ(plan("").exit_code, 2);  // no nodes
}

TEST(PlanCli, ACorruptModelIsAnErrorNamingTheFile) {
  ScratchDir dir;
  const std::string bad = dir.file("bad.gguf");
  tandem::testing::write_file(bad, "GGUF this is not a model");
  auto r = run_tandem("plan --model " + bad + " --node a=1GiB", dir.file(""));
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_NE(r.err.find(bad), std::string::npos) << r.err;
}

TEST(PlanCli, MoreNodesThanLayersUsesWhatItNeeds) {
  ScratchDir dir;
  const std::string model = dir.file("tiny.gguf");
  ASSERT_TRUE(synth::write_model(synth::preset("tiny").value(), model, {}).is_ok());
  std::string args = "plan --model " + model + " --context 512 --json";
  for (int i = 0; i < 6; ++i) args += " --node n" + std::to_string(i) + "=1200MiB";  // ~116 MiB each after the margin
  auto r = run_tandem(args, dir.file(""));
  ASSERT_EQ(r.exit_code, 0) << r.err;
  auto j = nlohmann::json::parse(r.out);
  ASSERT_EQ(j["devices"].size(), 6u);
  int layers = 0;
  for (const auto& d : j["devices"]) layers += d["n_layers"].get<int>();
  EXPECT_EQ(layers, 4);
  EXPECT_TRUE(j["split"]["rpc_nodes"].empty());  // it all fits on the head: no cable to cross
}

TEST(PlanCli, DeclaredPlansFromTheFileAloneLivePlansAskTheWorkers) {
  ScratchDir dir;
  const std::string model = dir.file("tiny.gguf");
  ASSERT_TRUE(synth::write_model(synth::preset("tiny").value(), model, {}).is_ok());
  const std::string cfg = dir.file("tandem.toml");
  tandem::testing::write_file(
      cfg,
      "[cluster]\nhead_memory = \"4GiB\"\n[[worker]]\nname = \"b\"\naddress = \"127.0.0.1:7070\"\n"
      "memory = \"4GiB\"\n[model]\npath = \"" +
          model + "\"\ncontext = 512\n");
  auto r = run_tandem("plan -c " + cfg + " --declared", dir.file(""));
  EXPECT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.out.find("fits"), std::string::npos) << r.out;

  // Without --declared the workers are asked over the link, as serve asks them: that needs the secret.
  auto live = run_tandem("plan -c " + cfg, dir.file(""));
  EXPECT_EQ(live.exit_code, 2);
  EXPECT_NE(live.err.find("secret_file"), std::string::npos) << live.err;
  EXPECT_NE(live.err.find("--declared"), std::string::npos) << live.err;

  // --declared needs every node's memory, and says which lacks it.
  tandem::testing::write_file(
      cfg,
      "[cluster]\nhead_memory = \"4GiB\"\n[[worker]]\nname = \"b\"\naddress = \"127.0.0.1:7070\"\n"
      "[model]\npath = \"" +
          model + "\"\n");
  auto undeclared = run_tandem("plan -c " + cfg + " --declared", dir.file(""));
  EXPECT_EQ(undeclared.exit_code, 2);
  EXPECT_NE(undeclared.err.find("'b' has no memory"), std::string::npos) << undeclared.err;

  // Flags override the file.
  auto flags = run_tandem("plan -c " + cfg + " --node head=4GiB", dir.file(""));
  EXPECT_EQ(flags.exit_code, 0) << flags.err;
}

}  // namespace
}  // namespace tandem::plan
