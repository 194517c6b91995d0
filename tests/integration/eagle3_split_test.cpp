// What an EAGLE3 step brings back over a split, against an ordinary draft's step: the head and one
// worker holding the last two of four layers, one slot, the link's byte counters of /metrics read
// around one greedy request. EAGLE3 reads the inputs of the target's layers 0, 2 and 3; layer 3's
// input is the output of layer 2, which the worker computes, so each verify row brings one more
// hidden state (n_embd floats) back over the link. On minimax-m3 the engine taps it through the
// graph's callback (engine/eagle3_tap.h); on qwen3moe llama.cpp's own route reads it, or the tap
// with TANDEM_EAGLE3_TAP=1, and the two are compared. The figures are printed and recorded as the
// test's properties.
#include <httplib.h>

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <thread>

#include <gtest/gtest.h>

#include "cluster.h"

namespace tandem::testing {
namespace {

using nlohmann::json;

constexpr int kNEmbd = 256;   // the tiny presets' hidden size
constexpr int kDraftMax = 3;  // a verify step: the last token and 3 drafted, 4 rows
constexpr int kTokens = 40;   // generated per request

struct StepFigures {
  std::string text;
  double steps = 0, drafted = 0;
  double to_worker = 0, from_worker = 0;  // link bytes during the request
};

double link_bytes(const std::string& metrics, const char* direction) {
  return sample(metrics, std::string("tandem_link_bytes_total{worker=\"w0\",direction=\"") + direction + "\"}");
}

// One greedy request of kTokens tokens on a fresh cluster of `synth` with `serve` flags.
StepFigures measure(const std::string& synth, const std::vector<std::string>& serve) {
  ScratchDir dir;
  std::vector<std::string> args = {"--parallel", "1", "--layers", "2,2"};
  args.insert(args.end(), serve.begin(), serve.end());
  LocalCluster c(dir, 1, args, {}, synth);
  StepFigures f;
  const bool ready = c.wait_ready();
  EXPECT_TRUE(ready) << c.log();
  httplib::Client h("127.0.0.1", c.port());
  h.set_read_timeout(120, 0);
  auto m0 = h.Get("/metrics");
  if (!ready || !m0) return f;
  const std::string before = m0->body;
  const json body = {
      {"model", "tiny"}, {"prompt", "Go"}, {"max_tokens", kTokens}, {"temperature", 0}, {"ignore_eos", true}};
  auto r = h.Post("/v1/completions", {{"Authorization", "Bearer " + c.key()}}, body.dump(), "application/json");
  EXPECT_TRUE(r && r->status == 200) << (r ? r->body : "no answer") << c.log();
  if (!r || r->status != 200) return f;
  f.text = json::parse(r->body)["choices"][0]["text"].get<std::string>();
  auto m1 = h.Get("/metrics");
  const std::string after = m1 ? m1->body : "";
  f.to_worker = link_bytes(after, "to_worker") - link_bytes(before, "to_worker");
  f.from_worker = link_bytes(after, "from_worker") - link_bytes(before, "from_worker");
  const json s = serve.empty() ? json::object() : settled_speculation(c);
  f.steps = s.value("steps", 0);
  f.drafted = s.value("drafted", 0);
  return f;
}

void report(const std::string& name, const StepFigures& f) {
  const double steps = f.steps > 0 ? f.steps : kTokens;  // off: one step a token
  std::printf("%-34s %3.0f steps %4.0f drafted  from worker %8.0f B/step  to worker %8.0f B/step\n", name.c_str(),
              steps, f.drafted, f.from_worker / steps, f.to_worker / steps);
  ::testing::Test::RecordProperty(name + "_from_worker_bytes_per_step", std::to_string(f.from_worker / steps));
  ::testing::Test::RecordProperty(name + "_to_worker_bytes_per_step", std::to_string(f.to_worker / steps));
}

// Writes the target of `synth` and its drafts (itself as an ordinary draft, and an EAGLE3 draft)
// into `dir`; returns {ordinary, eagle3}.
std::pair<std::string, std::string> write_drafts(const std::string& dir, const std::string& synth) {
  const std::string target = dir + "/target.gguf", eagle3 = dir + "/eagle3.gguf";
  EXPECT_EQ(run_tandem("synth " + synth + " -o " + target, dir).exit_code, 0);
  auto w = run_tandem("synth --draft-for " + target + " --draft-kind eagle3 -o " + eagle3, dir);
  EXPECT_EQ(w.exit_code, 0) << w.err;
  return {target, eagle3};
}

// The bytes from the worker that a step's one tapped worker layer adds: a float row per verify row.
constexpr double kTapBytesPerStep = (1 + kDraftMax) * kNEmbd * 4.0;

TEST(Eagle3Split, AnEagle3StepOnMinimaxM3BringsBackTheTappedWorkerLayerAndKeepsTheText) {
  DraftDir drafts;
  const std::string synth = "--preset tiny --type IQ4_XS";
  const auto [ordinary, eagle3] = write_drafts(drafts.path(), synth);
  const std::string n = std::to_string(kDraftMax);
  const StepFigures off = measure(synth, {});
  const StepFigures plain = measure(synth, {"--speculative", "draft", "--draft-model", ordinary, "--draft-max", n});
  const StepFigures tapped = measure(synth, {"--speculative", "draft", "--draft-model", eagle3, "--draft-max", n});
  report("minimax-m3 off", off);
  report("minimax-m3 ordinary draft", plain);
  report("minimax-m3 EAGLE3 (tap)", tapped);
  ASSERT_FALSE(off.text.empty());
  EXPECT_EQ(plain.text, off.text);
  EXPECT_EQ(tapped.text, off.text);
  ASSERT_GT(plain.steps, 0);
  ASSERT_GT(tapped.steps, 0);
  // Every verify step carries 4 rows in both (EAGLE3 drafts its whole n_max: llama.cpp's p_min is
  // 0), so the difference per step is the tapped layer's rows (and RPC framing around them).
  const double extra = tapped.from_worker / tapped.steps - plain.from_worker / plain.steps;
  EXPECT_GT(extra, 0.9 * kTapBytesPerStep) << "a step brings the worker's tapped layer back";
  EXPECT_LT(extra, 1.5 * kTapBytesPerStep);
  std::printf("EAGLE3 over ordinary: +%.0f B from the worker per step (the tapped layer's 4 rows: %.0f B)\n", extra,
              kTapBytesPerStep);
}

TEST(Eagle3Split, OnQwen3moeTheTapBringsBackWhatLlamaCppsOwnRouteDoes) {
  DraftDir drafts;
  const std::string synth = "--preset tiny-qwen3moe --layers 4 --type IQ4_XS";
  const auto [ordinary, eagle3] = write_drafts(drafts.path(), synth);
  const std::string n = std::to_string(kDraftMax);
  const StepFigures plain = measure(synth, {"--speculative", "draft", "--draft-model", ordinary, "--draft-max", n});
  const StepFigures own = measure(synth, {"--speculative", "draft", "--draft-model", eagle3, "--draft-max", n});
  ::setenv("TANDEM_EAGLE3_TAP", "1", 1);
  const StepFigures tapped = measure(synth, {"--speculative", "draft", "--draft-model", eagle3, "--draft-max", n});
  ::unsetenv("TANDEM_EAGLE3_TAP");
  report("qwen3moe ordinary draft", plain);
  report("qwen3moe EAGLE3 (llama.cpp's route)", own);
  report("qwen3moe EAGLE3 (tap)", tapped);
  ASSERT_FALSE(plain.text.empty());
  EXPECT_EQ(own.text, plain.text);
  EXPECT_EQ(tapped.text, plain.text);
  // Same drafts, same steps.
  EXPECT_EQ(tapped.steps, own.steps);
  EXPECT_EQ(tapped.drafted, own.drafted);
  ASSERT_GT(own.steps, 0);
  const double own_extra = own.from_worker / own.steps - plain.from_worker / plain.steps;
  const double tap_extra = tapped.from_worker / tapped.steps - plain.from_worker / plain.steps;
  EXPECT_GT(own_extra, 0.9 * kTapBytesPerStep);
  EXPECT_NEAR(tap_extra, own_extra, 0.25 * kTapBytesPerStep) << "the tap reads what llama.cpp's route reads";
  // What the tap costs the other way: with a callback ggml's scheduler computes each split as
  // views of its graph, which carry no id, so ggml-rpc sends the worker's whole graph each step
  // instead of asking it to compute the one it holds again.
  std::printf("tap over llama.cpp's route: %+.0f B from the worker, %+.0f B to the worker per step\n",
              tap_extra - own_extra, tapped.to_worker / tapped.steps - own.to_worker / own.steps);
}

}  // namespace
}  // namespace tandem::testing
