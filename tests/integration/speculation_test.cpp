// Speculative decoding in `tandem serve` over a real split (the head and one worker): n-gram drafts
// and a draft model on the head, each verify step one step through the split, the greedy text of
// decoding without it, and the figures on /health and /metrics.
#include <httplib.h>
#include <signal.h>

#include <filesystem>
#include <nlohmann/json.hpp>
#include <thread>

#include <gtest/gtest.h>

#include "cluster.h"

namespace tandem::testing {
namespace {

using nlohmann::json;

// A prompt the tiny model's greedy continuation repeats, as an agent re-emits an edit.
std::string repeating_prompt() {
  std::string p = "Copy the list exactly:";
  for (int i = 0; i < 10; ++i) p += " alpha beta gamma delta epsilon zeta eta theta";
  return p;
}

// The greedy completion's text, and /health's speculative object once the status poll shows a step.
struct Served {
  std::string text;
  json speculative;
  std::string metrics;
  json bench;       // `tandem bench --json`'s figures, run after the completion
  std::string log;  // the cluster's, serve's included
};

// The greedy completion of the repeating prompt on `cluster`, its text ("" and a failure unless 200).
std::string post_text(const LocalCluster& cluster) {
  httplib::Client c("127.0.0.1", cluster.port());
  c.set_read_timeout(120, 0);
  const json body = {
      {"model", "tiny"}, {"prompt", repeating_prompt()}, {"max_tokens", 32}, {"temperature", 0}, {"ignore_eos", true}};
  auto r = c.Post("/v1/completions", {{"Authorization", "Bearer " + cluster.key()}}, body.dump(), "application/json");
  EXPECT_TRUE(r && r->status == 200) << (r ? r->body : "no answer") << "\n" << cluster.log();
  return r && r->status == 200 ? json::parse(r->body)["choices"][0]["text"].get<std::string>() : "";
}

Served serve_once(const ScratchDir& dir, const std::vector<std::string>& args) {
  // Verify steps of at most 3 rows: the CPU's repacked weights take gemv below 4 rows, as for
  // one token (docs/engine-protocol.md, exactness), so the text is decoding's one by one.
  std::vector<std::string> serve = {"--parallel", "1"};
  serve.insert(serve.end(), args.begin(), args.end());
  // IQ4_XS: the tiny model's greedy text then repeats itself, which n-gram drafts need.
  LocalCluster cluster(dir, 1, serve, {}, "--type IQ4_XS");
  Served out;
  EXPECT_TRUE(cluster.wait_ready()) << cluster.log();
  out.text = post_text(cluster);
  out.log = cluster.log();
  if (out.text.empty()) return out;
  out.speculative = settled_speculation(cluster);
  httplib::Client c("127.0.0.1", cluster.port());
  out.metrics = c.Get("/metrics")->body;
  auto b =
      run_tandem("bench --json --url http://127.0.0.1:" + std::to_string(cluster.port()) + " --key " + cluster.key() +
                     " --runs 1 --gen-tokens 48 --ttft-tokens 200 --prefill-tokens 64 --concurrency 1",
                 dir.file(""));
  EXPECT_EQ(b.exit_code, 0) << b.err << cluster.log();
  if (b.exit_code == 0) out.bench = json::parse(b.out)["figures"];
  return out;
}

TEST(Speculation, NgramAndADraftModelThroughTheSplitKeepTheTextAndShowTheirFigures) {
  ScratchDir dir;
  const Served off = serve_once(dir, {});
  ASSERT_FALSE(off.text.empty());
  EXPECT_EQ(off.speculative["mode"], "off");
  EXPECT_EQ(off.speculative["steps"], 0);
  EXPECT_FALSE(off.bench.contains("spec_acceptance_length")) << "no drafts without speculation";
  // The served model itself as an ordinary draft (it agrees with itself).
  DraftDir drafts;
  const std::string model = drafts.file("tiny.gguf");
  std::filesystem::copy_file(dir.file("tiny.gguf"), model);
  for (const std::vector<std::string>& args :
       {std::vector<std::string>{"--speculative", "ngram", "--draft-max", "2"},
        std::vector<std::string>{"--speculative", "draft", "--draft-model", model, "--draft-max", "2"}}) {
    ScratchDir again;
    const Served on = serve_once(again, args);
    EXPECT_EQ(on.text, off.text) << args[1];
    const json& s = on.speculative;
    EXPECT_EQ(s["mode"], args[1]);
    EXPECT_GT(s["steps"].get<int>(), 0) << s.dump();
    EXPECT_GT(s["accepted"].get<int>(), 0) << s.dump();
    EXPECT_LE(s["accepted"].get<int>(), s["drafted"].get<int>());
    EXPECT_GT(s["acceptance_length"].get<double>(), 1.0) << s.dump();
    EXPECT_GT(s["draft_seconds"].get<double>(), 0.0) << s.dump();
    EXPECT_GT(s["verify_seconds"].get<double>(), 0.0) << s.dump();
    EXPECT_FALSE(s.contains("synthetic_length")) << "a benchmark's switch, not given";
    EXPECT_EQ(sample(on.metrics, "tandem_speculative_accepted_tokens_total"), s["accepted"].get<double>())
        << on.metrics;
    EXPECT_EQ(sample(on.metrics, "tandem_speculative_steps_total"), s["steps"].get<double>()) << on.metrics;
    // `tandem bench` reports what speculation did over its requests.
    ASSERT_TRUE(on.bench.contains("spec_acceptance_length")) << on.bench.dump();
    EXPECT_GT(on.bench["spec_acceptance_length"]["median"].get<double>(), 1.0);
    EXPECT_GE(on.bench["spec_drafted_tokens"]["median"].get<double>(),
              on.bench["spec_accepted_tokens"]["median"].get<double>());
  }
}

// A benchmark's synthetic acceptance through serve's flag: every drafted token is kept at
// --spec-synth-len = --draft-max + 1 (a drafted end of generation aside), /health says the length
// is synthetic, and /metrics has the times of drafting and checking. With a q8_0 KV cache, which
// serve hands the engine as planned.
TEST(Speculation, SyntheticAcceptanceThroughServeShowsItsLengthAndTimes) {
  ScratchDir dir;
  DraftDir drafts;
  const std::string model = drafts.file("tiny.gguf");
  ASSERT_EQ(run_tandem("synth --preset tiny --type IQ4_XS --seed 7 -o " + model, dir.file("")).exit_code, 0);
  const Served on = serve_once(dir, {"--speculative", "draft", "--draft-model", model, "--draft-max", "3",
                                     "--spec-synth-len", "4", "--kv-type", "q8_0"});
  EXPECT_NE(on.log.find("--kv-type q8_0"), std::string::npos) << on.log;
  const json& s = on.speculative;
  EXPECT_EQ(s.value("synthetic_length", 0.0), 4.0) << s.dump();
  EXPECT_GT(s.value("acceptance_length", 0.0), 3.5) << s.dump();
  EXPECT_GT(sample(on.metrics, "tandem_speculative_verify_seconds_total"), 0.0) << on.metrics;
  EXPECT_GT(sample(on.metrics, "tandem_speculative_draft_seconds_total"), 0.0) << on.metrics;
}

// A worker lost during a verify step ends that request with an error naming it, as without
// speculation; once the worker is back the cluster serves with its drafts again.
TEST(Speculation, AWorkerLostMidStepEndsTheRequestAndTheClusterRecovers) {
  ScratchDir dir;
  DraftDir drafts;
  ASSERT_EQ(run_tandem("synth --preset tiny --type IQ4_XS -o " + drafts.file("draft.gguf"), dir.file("")).exit_code, 0);
  LocalCluster cluster(
      dir, 1,
      {"--parallel", "1", "--speculative", "draft", "--draft-model", drafts.file("draft.gguf"), "--draft-max", "4"}, {},
      "--type IQ4_XS");
  ASSERT_TRUE(cluster.wait_ready()) << cluster.log();
  const json body = {{"model", "tiny"}, {"prompt", "Go"}, {"max_tokens", 450}, {"stream", true}, {"ignore_eos", true}};
  AsyncPost stream(cluster.port(), cluster.key(), "/v1/completions", body.dump());
  ASSERT_TRUE(stream.wait_first_text(30000)) << "the stream never got under way: " << stream.body();
  cluster.kill_worker(0, SIGKILL);
  const std::string out = stream.body();
  EXPECT_EQ(out.find("[DONE]"), std::string::npos) << "the stream must not look complete: " << out;
  EXPECT_NE(out.find("w0"), std::string::npos) << "the error names the lost worker: " << out;
  EXPECT_TRUE(cluster.gateway().running());
  cluster.restart_worker(0);
  ASSERT_TRUE(cluster.wait_ready()) << cluster.log();
  httplib::Client c("127.0.0.1", cluster.port());
  c.set_read_timeout(120, 0);
  const httplib::Headers auth = {{"Authorization", "Bearer " + cluster.key()}};
  const json again = {{"model", "tiny"}, {"prompt", repeating_prompt()}, {"max_tokens", 16}, {"temperature", 0}};
  auto r = c.Post("/v1/completions", auth, again.dump(), "application/json");
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 200) << r->body;
  const json h = settled_speculation(cluster);
  EXPECT_GT(h.value("steps", 0), 0) << "the restarted engine drafts again: " << h.dump();
}

// An EAGLE3 draft over the split: a qwen3moe target (whose pinned graph records the layer inputs
// the draft taps) with its layers on the head and a worker; the taps of the worker's layers come
// back with each step, and the text is greedy's.
TEST(Speculation, AnEagle3DraftOverTheSplitKeepsTheText) {
  ScratchDir dir;
  // tiny-qwen3moe's two layers: one on the head, one on the worker.
  const std::vector<std::string> base = {"--parallel", "1", "--layers", "1,1"};
  std::string text_off;
  {
    LocalCluster off(dir, 1, base, {}, "--preset tiny-qwen3moe --type IQ4_XS");
    ASSERT_TRUE(off.wait_ready()) << off.log();
    text_off = post_text(off);
  }
  ASSERT_FALSE(text_off.empty());
  DraftDir drafts;
  const std::string draft = drafts.file("eagle3.gguf");
  auto w = run_tandem("synth --draft-for " + dir.file("tiny.gguf") + " --draft-kind eagle3 --own-embedding -o " + draft,
                      dir.file(""));
  ASSERT_EQ(w.exit_code, 0) << w.err;
  ScratchDir again;
  std::vector<std::string> args = base;
  args.insert(args.end(), {"--speculative", "draft", "--draft-model", draft, "--draft-max", "2"});
  LocalCluster on(again, 1, args, {}, "--preset tiny-qwen3moe --type IQ4_XS");
  ASSERT_TRUE(on.wait_ready()) << on.log();
  EXPECT_EQ(post_text(on), text_off);
  const json h = settled_speculation(on);
  EXPECT_GT(h.value("steps", 0), 0) << h.dump() << on.log();
}

// A draft file that is not a model is refused before anything starts, naming it.
TEST(Speculation, ServeRefusesADraftModelThatIsNotAModel) {
  ScratchDir dir;
  write_file(dir.file("junk.gguf"), "not a model");
  auto r = run_tandem("serve --speculative draft --draft-model " + dir.file("junk.gguf") + " -m " +
                          dir.file("missing.gguf") + " --insecure-no-auth",
                      dir.file(""));
  EXPECT_NE(r.exit_code, 0);
  EXPECT_NE(r.err.find("junk.gguf"), std::string::npos) << r.err;
  auto none =
      run_tandem("serve --speculative draft -m " + dir.file("missing.gguf") + " --insecure-no-auth", dir.file(""));
  EXPECT_NE(none.exit_code, 0);
  EXPECT_NE(none.err.find("draft_model"), std::string::npos) << none.err;
}

}  // namespace
}  // namespace tandem::testing
