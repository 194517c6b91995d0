// The tandem binary as a user runs it: exit codes, one-line errors, the documented output.
#include <nlohmann/json.hpp>

#include <gtest/gtest.h>

#include "common/strings.h"
#include "datapath/switches.h"
#include "engine/launch.h"
#include "gateway/serve.h"
#include "support/process.h"
#include "test_util.h"

namespace tandem::cli {
namespace {

using tandem::testing::run_tandem;
using tandem::testing::ScratchDir;
using tandem::testing::write_file;

TEST(Cli, VersionNamesTheLlamaCommitAndBackends) {
  ScratchDir dir;
  auto r = run_tandem("version", dir.file(""));
  EXPECT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.out.find("de3ff815"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("CPU"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("RPC"), std::string::npos) << r.out;
}

TEST(Cli, DevicesListsTheCpuWithMemory) {
  ScratchDir dir;
  auto r = run_tandem("devices --json", dir.file(""));
  ASSERT_EQ(r.exit_code, 0) << r.err;
  auto j = nlohmann::json::parse(r.out);
  ASSERT_FALSE(j.empty());
  EXPECT_EQ(j[0]["type"], "cpu");
  EXPECT_GT(j[0]["total_bytes"].get<uint64_t>(), 0u);
}

TEST(Cli, SynthThenInspectJson) {
  ScratchDir dir;
  auto w = run_tandem("synth --preset tiny -o " + dir.file("t.gguf"), dir.file(""));
  ASSERT_EQ(w.exit_code, 0) << w.err;
  EXPECT_NE(w.out.find("bytes read per generated token"), std::string::npos) << w.out;
  EXPECT_NE(w.out.find("MB/s"), std::string::npos) << w.out;
  auto r = run_tandem("inspect --json " + dir.file("t.gguf"), dir.file(""));
  ASSERT_EQ(r.exit_code, 0) << r.err;
  auto j = nlohmann::json::parse(r.out);
  EXPECT_EQ(j["arch"], "minimax-m3");
  EXPECT_EQ(j["n_layer"], 4);
  EXPECT_GT(j["n_params"].get<uint64_t>(), 0u);
  EXPECT_GT(j["bytes"].get<uint64_t>(), 0u);
  EXPECT_GT(j["active_bytes_per_token"].get<uint64_t>(), 0u);
  EXPECT_LT(j["active_bytes_per_token"].get<uint64_t>(), j["bytes"].get<uint64_t>());
  auto text = run_tandem("inspect " + dir.file("t.gguf"), dir.file(""));
  EXPECT_EQ(text.exit_code, 0);
  EXPECT_NE(text.out.find("read per token"), std::string::npos) << text.out;
}

// What serve passes on with --engine-flag the engine takes, and serve's help names every one.
TEST(Cli, EveryFlagServePassesOnIsAnEngineFlagAndInServesHelp) {
  ScratchDir dir;
  auto serve = run_tandem("serve --help", dir.file(""));
  auto engine = run_tandem("engine --help", dir.file(""));
  ASSERT_EQ(serve.exit_code, 0) << serve.err;
  ASSERT_EQ(engine.exit_code, 0) << engine.err;
  for (const datapath::DataPathSwitch& sw : datapath::kDataPathSwitches) {
    const std::string flag = sw.flag;
    EXPECT_NE(serve.out.find(flag), std::string::npos) << flag << " is not in serve's help";
    EXPECT_NE(engine.out.find(flag + " "), std::string::npos) << flag << " is not an engine flag";
  }
}

// The engine takes every flag of the launch table that `tandem serve` writes (engine/launch.h),
// under every one of its names.
TEST(Cli, TheEngineTakesEveryFlagServeWrites) {
  ScratchDir dir;
  auto engine = run_tandem("engine --help", dir.file(""));
  ASSERT_EQ(engine.exit_code, 0) << engine.err;
  for (const engine::LaunchFlag& f : engine::launch_flags()) {
    for (const std::string& name : split_commas(f.names)) {
      EXPECT_NE(engine.out.find(name), std::string::npos) << name << " is not an engine flag";
    }
  }
}

// A plan without room for the token embedding on the worker of layer 0 starts the engine with it
// kept on the head; the user's flags pass unchanged, that one never twice.
TEST(Cli, ServeKeepsTheEmbeddingOnTheHeadWhenThePlanSaysSo) {
  plan::LlamaSplit split;
  const std::vector<std::string> user = {"--no-warm-up"};
  EXPECT_EQ(gateway::engine_flags_for(split, user), user);
  split.embedding_on_worker = false;
  EXPECT_EQ(gateway::engine_flags_for(split, user),
            (std::vector<std::string>{"--no-warm-up", "--no-worker-embedding"}));
  EXPECT_EQ(gateway::engine_flags_for(split, {"--no-worker-embedding"}),
            (std::vector<std::string>{"--no-worker-embedding"}));
}

TEST(Cli, InspectOfABadFileIsOneLineAndExitsOne) {
  ScratchDir dir;
  write_file(dir.file("junk.gguf"), std::string(5000, 'x'));
  for (const std::string& path : {dir.file("junk.gguf"), dir.file("missing.gguf")}) {
    auto r = run_tandem("inspect " + path, dir.file(""));
    EXPECT_EQ(r.exit_code, 1) << r.err;
    EXPECT_TRUE(r.out.empty()) << r.out;
    EXPECT_EQ(r.err.rfind("tandem: error: ", 0), 0u) << r.err;
    EXPECT_NE(r.err.find(path), std::string::npos) << r.err;
    EXPECT_EQ(r.err.find('\n'), r.err.size() - 1) << "exactly one line: " << r.err;
  }
}

TEST(Cli, UsageErrorsExitTwo) {
  ScratchDir dir;
  EXPECT_EQ(run_tandem("", dir.file("")).exit_code, 2);
  EXPECT_EQ(run_tandem("no-such-command", dir.file("")).exit_code, 2);
  EXPECT_EQ(run_tandem("inspect", dir.file("")).exit_code, 2);
  auto r = run_tandem("synth --preset huge -o " + dir.file("x.gguf"), dir.file(""));
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_NE(r.err.find("unknown preset 'huge'"), std::string::npos) << r.err;
  r = run_tandem("synth --type Q3_K -o " + dir.file("x.gguf"), dir.file(""));
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_NE(r.err.find("Q3_K"), std::string::npos) << r.err;
}

// `synth --draft-for` (tests/synth/draft_test.cpp tests the drafts themselves).
TEST(Cli, SynthWritesBothDraftsForATargetAndRefusesMisuse) {
  ScratchDir dir;
  const std::string d = dir.file(""), target = dir.file("t.gguf");
  ASSERT_EQ(run_tandem("synth --preset tiny-qwen3moe -o " + target, d).exit_code, 0);
  auto arch_of = [&](const std::string& path) {
    auto r = run_tandem("inspect --json " + path, d);
    return r.exit_code == 0 ? nlohmann::json::parse(r.out)["arch"].get<std::string>() : "inspect failed: " + r.err;
  };

  auto small = run_tandem("synth --draft-for " + target + " -o " + dir.file("s.gguf"), d);
  ASSERT_EQ(small.exit_code, 0) << small.err;
  EXPECT_NE(small.out.find("small draft for"), std::string::npos) << small.out;
  EXPECT_EQ(arch_of(dir.file("s.gguf")), "qwen3");

  auto eagle = run_tandem(
      "synth --draft-for " + target + " --draft-kind eagle3 --target-layers 1,0,1 --seed 7 -o " + dir.file("e.gguf"),
      d);
  ASSERT_EQ(eagle.exit_code, 0) << eagle.err;
  EXPECT_NE(eagle.out.find("reads target layers 1, 0, 1"), std::string::npos) << eagle.out;
  EXPECT_EQ(arch_of(dir.file("e.gguf")), "eagle3");

  auto missing = run_tandem("synth --draft-for " + dir.file("none.gguf") + " -o " + dir.file("x.gguf"), d);
  EXPECT_EQ(missing.exit_code, 1);
  EXPECT_NE(missing.err.find("none.gguf: no such file"), std::string::npos) << missing.err;
  auto beyond = run_tandem(
      "synth --draft-for " + target + " --draft-kind eagle3 --target-layers 0,1,2 -o " + dir.file("x.gguf"), d);
  EXPECT_EQ(beyond.exit_code, 1);
  EXPECT_NE(beyond.err.find("target layer 2"), std::string::npos) << beyond.err;
  // Usage errors: a preset's shape flag beside --draft-for, a draft flag without it.
  EXPECT_EQ(run_tandem("synth --draft-for " + target + " --experts 4 -o " + dir.file("x.gguf"), d).exit_code, 2);
  EXPECT_EQ(run_tandem("synth --draft-kind eagle3 -o " + dir.file("x.gguf"), d).exit_code, 2);
  EXPECT_FALSE(std::filesystem::exists(dir.file("x.gguf")));
  EXPECT_NE(run_tandem("synth --help", d).out.find("--draft-for"), std::string::npos);
}

// Another head size keeps the preset's rotary share: qwen3moe rotates whole heads, so a synth
// with wider heads used to be refused.
TEST(Cli, SynthWithAnotherHeadSizeKeepsTheRotaryShare) {
  ScratchDir dir;
  auto r =
      run_tandem("synth --preset tiny-qwen3moe --head-dim 128 --header-only -o " + dir.file("q.gguf"), dir.file(""));
  ASSERT_EQ(r.exit_code, 0) << r.err;
  r = run_tandem("inspect --json " + dir.file("q.gguf"), dir.file(""));
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.out.find("\"head_dim_k\": 128"), std::string::npos) << r.out;
}

TEST(Cli, EngineGeneratesFromAPrompt) {
  ScratchDir dir;
  ASSERT_EQ(run_tandem("synth --preset tiny -o " + dir.file("t.gguf"), dir.file("")).exit_code, 0);
  auto r =
      run_tandem("engine --json -m " + dir.file("t.gguf") + " -p 'Once upon a time' -n 6 --ignore-eos", dir.file(""));
  ASSERT_EQ(r.exit_code, 0) << r.err;
  auto j = nlohmann::json::parse(r.out);
  EXPECT_EQ(j["tokens"].size(), 6u);
  EXPECT_GT(j["decode_tps"].get<double>(), 0.0);
}

// --no-mmap makes libllama read the model file instead of mapping it (its log says which), with
// the same tokens.
TEST(Cli, EngineReadsTheModelInsteadOfMappingItWhenTold) {
  ScratchDir dir;
  ASSERT_EQ(run_tandem("synth --preset tiny -o " + dir.file("t.gguf"), dir.file("")).exit_code, 0);
  const std::string args =
      "engine --json -vv -m " + dir.file("t.gguf") + " -p 'Once upon a time' -n 6 --ignore-eos --no-cpu-repack";
  auto mapped = run_tandem(args, dir.file(""));
  ASSERT_EQ(mapped.exit_code, 0) << mapped.err;
  EXPECT_NE(mapped.err.find("(load_mode = mmap)"), std::string::npos) << mapped.err;
  auto read = run_tandem(args + " --no-mmap", dir.file(""));
  ASSERT_EQ(read.exit_code, 0) << read.err;
  EXPECT_NE(read.err.find("(load_mode = none)"), std::string::npos) << read.err;
  EXPECT_EQ(nlohmann::json::parse(read.out)["tokens"], nlohmann::json::parse(mapped.out)["tokens"]);
}

// A split through ggml's RPC server inside the engine's own process (a measurement switch) gives
// the tokens of one process, keeps its JSON on stdout apart from the server's log, and counts the
// scheduler's runs; --tandem-worker must name an --rpc endpoint. The same with the experimental
// input slots.
TEST(Cli, EngineSplitsThroughAnRpcServerInItsOwnProcess) {
  ScratchDir dir;
  ASSERT_EQ(run_tandem("synth --preset tiny -o " + dir.file("t.gguf"), dir.file("")).exit_code, 0);
  const std::string args =
      "engine --json --no-cpu-repack -m " + dir.file("t.gguf") + " -p 'Once upon a time' -n 6 --ignore-eos";
  auto alone = run_tandem(args, dir.file(""));
  ASSERT_EQ(alone.exit_code, 0) << alone.err;
  const std::string ep = "127.0.0.1:" + std::to_string(tandem::testing::free_port());
  auto split =
      run_tandem(args + " --rpc " + ep + " --rpc-in-process " + ep + " --cpu-layers 1 --layer-split 3", dir.file(""));
  ASSERT_EQ(split.exit_code, 0) << split.err;
  auto a = nlohmann::json::parse(alone.out), b = nlohmann::json::parse(split.out);
  EXPECT_EQ(b["tokens"], a["tokens"]);
  EXPECT_EQ(b["decode_profile"]["runs"].get<int>(), 5);
  EXPECT_GT(b["prefill_profile"]["to_workers_s"].get<double>(), 0.0);
  EXPECT_NE(split.err.find("Starting RPC server"), std::string::npos) << split.err;
  auto wrong = run_tandem(args + " --rpc " + ep + " --tandem-worker 127.0.0.1:1", dir.file(""));
  EXPECT_EQ(wrong.exit_code, 2);
  EXPECT_NE(wrong.err.find("--tandem-worker: '127.0.0.1:1' is not one of the --rpc endpoints"), std::string::npos)
      << wrong.err;

  // The input slots (on by default) work with ggml's own server too; off, the same tokens.
  EXPECT_GT(b["slotted_inputs"].get<int>(), 0);
  const std::string ep2 = "127.0.0.1:" + std::to_string(tandem::testing::free_port());
  auto unslotted = run_tandem(
      args + " --rpc " + ep2 + " --rpc-in-process " + ep2 + " --cpu-layers 1 --layer-split 3 --no-worker-input-slots",
      dir.file(""));
  ASSERT_EQ(unslotted.exit_code, 0) << unslotted.err;
  auto c = nlohmann::json::parse(unslotted.out);
  EXPECT_EQ(c["tokens"], a["tokens"]);
  EXPECT_EQ(c["slotted_inputs"].get<int>(), 0);
}

}  // namespace
}  // namespace tandem::cli
