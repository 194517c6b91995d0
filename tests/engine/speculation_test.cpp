// Speculative decoding in the scheduler (engine/speculation.h), on the tiny synthetic model, CPU:
// greedy tokens and sampled draws kept, per slot, with the prompt cache, drafts refused, EAGLE3,
// synthetic acceptance, a request's own cap, and the KV cache's type.
#include <gtest/gtest.h>

#include <set>

#include "fake_shares.h"
#include "scheduler_fixture.h"
#include "synth/draft.h"
#include "test_util.h"

namespace tandem::engine {
namespace {

using json = nlohmann::json;

// A prompt whose continuation repeats what it holds, as an agent's edit or tool call does.
std::string repeating_prompt() {
  std::string p = "Copy the list exactly:";
  for (int i = 0; i < 12; ++i) p += " alpha beta gamma delta epsilon zeta eta theta";
  return p;
}

// Speculation checks drafts in one step each and keeps what greedy decoding without it gives:
// n-gram drafts from the sequence's own tokens, and a draft model (the target itself here: an
// ordinary draft of the same vocabulary that agrees with it).
TEST_F(SchedulerTest, SpeculativeDecodingKeepsTheGreedyTokens) {
  const json body = greedy(repeating_prompt(), 48);
  auto off = make(1, 512);
  const EngineEvent base = run(*off, "base", RequestKind::completion, body);
  ASSERT_EQ(base.type, EngineEvent::Type::done) << base.message;
  EXPECT_EQ(off->stats().speculation.steps, 0u);
  for (const SpeculationOptions& o :
       {SpeculationOptions{"ngram", "", 8}, SpeculationOptions{"draft", *model_path_, 4}}) {
    auto s = make(1, 512, true, 0, nullptr, o);
    ASSERT_TRUE(s) << o.mode;
    const EngineEvent e = run(*s, "spec-" + o.mode, RequestKind::completion, body);
    ASSERT_EQ(e.type, EngineEvent::Type::done) << o.mode << ": " << e.message;
    EXPECT_EQ(e.tokens, base.tokens) << o.mode;
    EXPECT_EQ(e.usage.completion_tokens, 48) << o.mode;
    const SchedulerStats st = s->stats();
    EXPECT_EQ(st.speculative, o.mode);
    EXPECT_GT(st.speculation.steps, 0u) << o.mode;
    EXPECT_GT(st.speculation.accepted, 0u) << o.mode << ": no draft was kept";
    EXPECT_LE(st.speculation.accepted, st.speculation.drafted) << o.mode;
    // Fewer decode steps than tokens: each kept draft token is a step saved.
    EXPECT_LT(st.speculation.steps, 48u) << o.mode;
  }
}

// Per slot: three requests at once, drafting each from its own tokens, get what each gets alone
// without speculation.
TEST_F(SchedulerTest, SpeculationPerSlotKeepsEachRequestsTokens) {
  std::vector<json> bodies;
  for (int i = 0; i < 3; ++i) {
    std::string p = "List " + std::to_string(i) + ":";
    for (int r = 0; r < 6 + 3 * i; ++r) p += " one two three four five six seven eight nine";
    bodies.push_back(greedy(p, 24 + 8 * i));
  }
  std::vector<std::vector<int32_t>> alone;
  auto off = make(3, 512);
  for (int i = 0; i < 3; ++i) {
    const EngineEvent e = run(*off, "alone" + std::to_string(i), RequestKind::completion, bodies[i]);
    ASSERT_EQ(e.type, EngineEvent::Type::done) << e.message;
    alone.push_back(e.tokens);
  }
  auto s = make(3, 512, true, 0, nullptr, SpeculationOptions{"ngram", "", 6});
  const std::vector<EngineEvent> together = run_together(*s, bodies);
  for (int i = 0; i < 3; ++i) {
    ASSERT_EQ(together[i].type, EngineEvent::Type::done) << together[i].message;
    EXPECT_EQ(together[i].tokens, alone[i]) << "request " << i;
  }
  EXPECT_GT(s->stats().speculation.accepted, 0u);
}

// A conversation that comes back to its slot after another took it is restored from the prompt
// cache; the draft model's stream reads the restored prompt too, and the tokens stay greedy's.
TEST_F(SchedulerTest, SpeculationWithADraftModelFollowsAPromptCacheRestore) {
  std::string a = repeating_prompt(), b = "Another request:";
  for (int i = 0; i < 20; ++i) b += " the lazy dog sleeps";
  auto off = make(1, 512);
  const EngineEvent expected = run(*off, "a-off", RequestKind::completion, greedy(a + " and again:", 24));
  ASSERT_EQ(expected.type, EngineEvent::Type::done) << expected.message;
  auto s = make(1, 512, true, uint64_t{64} << 20, nullptr, SpeculationOptions{"draft", *model_path_, 4});
  ASSERT_EQ(run(*s, "a1", RequestKind::completion, greedy(a, 8)).type, EngineEvent::Type::done);
  ASSERT_EQ(run(*s, "b1", RequestKind::completion, greedy(b, 8)).type, EngineEvent::Type::done);
  const EngineEvent again = run(*s, "a2", RequestKind::completion, greedy(a + " and again:", 24));
  ASSERT_EQ(again.type, EngineEvent::Type::done) << again.message;
  EXPECT_GT(again.usage.cached_tokens, 64);
  EXPECT_EQ(again.tokens, expected.tokens);
  EXPECT_GE(s->stats().prompt_cache.hits, 1u);
  EXPECT_GT(s->stats().speculation.accepted, 0u);
}

// [model] kv_type reaches the context (the plan counts the cache in it): a q8_0 cache holds a
// sequence in about half the bytes of an f16 one, as the prompt cache's saved states show, and a
// draft model's cache follows. An unknown type is refused with its name.
TEST_F(SchedulerTest, TheKvTypeIsTheCachesType) {
  uint64_t saved[2] = {0, 0};
  for (int i = 0; i < 2; ++i) {
    SchedulerOptions o;
    o.context = 512;
    o.threads = 1;
    o.prompt_cache_bytes = uint64_t{64} << 20;
    o.kv_type = i == 0 ? "f16" : "q8_0";
    o.speculation = {"draft", *model_path_, 4};
    auto s = Scheduler::create(model_, o);
    ASSERT_TRUE(s.is_ok()) << s.status().to_string();
    const EngineEvent e = run(*s.value(), "kv", RequestKind::completion, greedy(repeating_prompt(), 8));
    ASSERT_EQ(e.type, EngineEvent::Type::done) << o.kv_type << ": " << e.message;
    saved[i] = settled(*s.value(), 1).saved_bytes;
    ASSERT_GT(saved[i], 0u) << o.kv_type;
  }
  // q8_0: 34 bytes a 32-value block against 64; the state's other parts are small.
  EXPECT_LT(static_cast<double>(saved[1]), 0.6 * static_cast<double>(saved[0]));
  EXPECT_GT(static_cast<double>(saved[1]), 0.45 * static_cast<double>(saved[0]));
  SchedulerOptions wrong;
  wrong.kv_type = "q3";
  auto refused = Scheduler::create(model_, wrong);
  ASSERT_FALSE(refused.is_ok());
  EXPECT_NE(refused.status().message().find("unknown KV cache type 'q3'"), std::string::npos)
      << refused.status().to_string();
}

// A draft that disagrees with the target (another model of the same vocabulary: the tiny preset
// with other weights): most of its tokens are refused, and the tokens stay greedy's.
// Another model of the fixture's vocabulary (the tiny preset with other weights): a draft the
// target mostly disagrees with.
std::string disagreeing_draft(const std::string& dir) {
  synth::ModelSpec spec = synth::preset("tiny").value();
  spec.type = GGML_TYPE_IQ4_XS;
  spec.seed = 7;
  const std::string path = dir + "/other-draft.gguf";
  EXPECT_TRUE(synth::write_model(spec, path, {}).is_ok());
  return path;
}

TEST_F(SchedulerTest, ARefusedDraftLeavesTheGreedyTokens) {
  const std::string other = disagreeing_draft(*dir_);
  const json body = greedy(repeating_prompt(), 32);
  auto off = make(1, 512);
  const EngineEvent base = run(*off, "base", RequestKind::completion, body);
  ASSERT_EQ(base.type, EngineEvent::Type::done) << base.message;
  auto s = make(1, 512, true, 0, nullptr, SpeculationOptions{"draft", other, 4});
  ASSERT_TRUE(s);
  const EngineEvent e = run(*s, "spec", RequestKind::completion, body);
  ASSERT_EQ(e.type, EngineEvent::Type::done) << e.message;
  EXPECT_EQ(e.tokens, base.tokens);
  const SpeculationStats st = s->stats().speculation;
  EXPECT_GT(st.drafted, 0u);
  EXPECT_LT(st.accepted, st.drafted) << "every draft token kept: the draft was not another model";
}

// An EAGLE3 draft (llama.cpp's eagle3 architecture, written by `tandem synth --draft-for`) on a
// qwen3moe target, whose graph records the layer inputs it taps, and on a minimax-m3 target, whose
// pinned graph does not (the scheduler taps them through the graph's callback,
// engine/eagle3_tap.h): its drafts are checked, and the tokens stay greedy's.
TEST_F(SchedulerTest, AnEagle3DraftRunsOnATargetThatRecordsItsLayerInputsAndOnOneThatDoesNot) {
  synth::ModelSpec spec = synth::preset("tiny-qwen3moe").value();
  spec.type = GGML_TYPE_IQ4_XS;
  const std::string target_path = *dir_ + "/qwen3moe.gguf", eagle3 = *dir_ + "/qwen3moe-eagle3.gguf";
  ASSERT_TRUE(synth::write_model(spec, target_path, {}).is_ok());
  synth::DraftOptions d;
  d.kind = synth::DraftKind::eagle3;
  d.own_embedding = true;
  ASSERT_TRUE(synth::write_draft(target_path, eagle3, d, {}).is_ok());
  LoadOptions lo;
  lo.model = target_path;
  lo.placement.cpu_weight_repack = false;
  auto target = load_model(lo);
  ASSERT_TRUE(target.is_ok()) << target.status().to_string();
  // The fixture's tiny model is a minimax-m3; its draft borrows the target's embedding and output.
  const std::string m3_eagle3 = *dir_ + "/m3-eagle3.gguf";
  synth::DraftOptions m3d;
  m3d.kind = synth::DraftKind::eagle3;
  ASSERT_TRUE(synth::write_draft(*model_path_, m3_eagle3, m3d, {}).is_ok());
  const json body = greedy(repeating_prompt(), 24);
  for (const auto& [model, draft] : {std::pair{target.value().get(), eagle3}, std::pair{model_, m3_eagle3}}) {
    SchedulerOptions o;
    o.context = 512;
    o.threads = 1;
    o.max_prompt_chunk = 32;
    auto off = Scheduler::create(model, o);
    ASSERT_TRUE(off.is_ok()) << off.status().to_string();
    const EngineEvent base = run(*off.value(), "base", RequestKind::completion, body);
    ASSERT_EQ(base.type, EngineEvent::Type::done) << base.message;
    off.value().reset();
    o.speculation = {"draft", draft, 4};
    auto on = Scheduler::create(model, o);
    ASSERT_TRUE(on.is_ok()) << on.status().to_string();
    const EngineEvent e = run(*on.value(), "eagle3", RequestKind::completion, body);
    ASSERT_EQ(e.type, EngineEvent::Type::done) << draft << ": " << e.message;
    EXPECT_EQ(e.tokens, base.tokens) << draft;
    const SpeculationStats st = on.value()->stats().speculation;
    EXPECT_GT(st.steps, 0u) << draft;
    EXPECT_GT(st.drafted, 0u) << draft;
  }
}

// A draft model that is not there, or not a model, fails the scheduler's creation with its name.
TEST_F(SchedulerTest, ADraftModelThatCannotLoadIsNamed) {
  SchedulerOptions o;
  o.context = 256;
  o.threads = 1;
  o.speculation = {"draft", *dir_ + "/missing.gguf", 4};
  auto missing = Scheduler::create(model_, o);
  ASSERT_FALSE(missing.is_ok());
  EXPECT_NE(missing.status().message().find("missing.gguf"), std::string::npos) << missing.status().to_string();
  const std::string junk = *dir_ + "/junk.gguf";
  tandem::testing::write_file(junk, "not a model");
  o.speculation.draft_model = junk;
  auto bad = Scheduler::create(model_, o);
  ASSERT_FALSE(bad.is_ok());
  EXPECT_NE(bad.status().message().find("junk.gguf"), std::string::npos) << bad.status().to_string();
  o.speculation.mode = "eagle";
  EXPECT_FALSE(Scheduler::create(model_, o).is_ok());
}

// With sampling, every kept token is the model's own sample at its place, drawn in the order
// decoding one by one draws (a step samples its rows until the first refused draft, one draw each):
// with the same seed a reply is the same draw as without speculation, and so follows the model's
// distribution. Checked over seeds with n-grams, a draft that agrees with the model (itself) and
// one it mostly refuses. (n-grams draft only where the sampled text repeats itself, which it does
// on x86 and not always on arm64, whose kernels round differently: no step count is asked of them.)
TEST_F(SchedulerTest, WithSamplingTheRepliesAreTheModelsOwnDraws) {
  auto off = make(1, 512);
  auto ngram = make(1, 512, true, 0, nullptr, SpeculationOptions{"ngram", "", 4});
  auto agreeing = make(1, 512, true, 0, nullptr, SpeculationOptions{"draft", *model_path_, 4});
  auto refused = make(1, 512, true, 0, nullptr, SpeculationOptions{"draft", disagreeing_draft(*dir_), 4});
  ASSERT_TRUE(ngram && agreeing && refused);
  const std::vector<Scheduler*> speculating = {ngram.get(), agreeing.get(), refused.get()};
  std::set<std::vector<int32_t>> distinct;
  for (uint32_t seed = 1; seed <= 5; ++seed) {
    json body = {{"prompt", repeating_prompt()},
                 {"max_tokens", 16},
                 {"temperature", 0.3},
                 {"top_k", 0},
                 {"top_p", 1.0},
                 {"min_p", 0.0},
                 {"seed", seed},
                 {"ignore_eos", true},
                 {"return_tokens", true}};
    const EngineEvent base = run(*off, "off", RequestKind::completion, body);
    ASSERT_EQ(base.type, EngineEvent::Type::done) << base.message;
    distinct.insert(base.tokens);
    for (Scheduler* s : speculating) {
      const EngineEvent e = run(*s, "spec", RequestKind::completion, body);
      ASSERT_EQ(e.type, EngineEvent::Type::done) << e.message;
      EXPECT_EQ(e.tokens, base.tokens) << "seed " << seed << ", " << s->stats().speculative;
    }
  }
  EXPECT_GT(distinct.size(), 2u) << "the seeds should give different replies: the sampling is not greedy";
  EXPECT_GT(agreeing->stats().speculation.accepted, 0u);
  const SpeculationStats st = refused->stats().speculation;
  EXPECT_LT(st.accepted, st.drafted) << "no draft was refused";
}

// Benchmarks' synthetic acceptance keeps drafted tokens by chance, whatever the model samples: with
// a draft the model disagrees with, a length of draft_max + 1 keeps every drafted token, 1 none, and
// 2.5 about 1.5 of them a step (the seed fixes the draws). The times of drafting and checking add up.
TEST_F(SchedulerTest, SyntheticAcceptanceKeepsDraftsByChanceAtTheLengthAsked) {
  const std::string other = disagreeing_draft(*dir_);
  json body = greedy("The cable between the two boxes", 96);
  body["seed"] = 11;
  for (const double length : {5.0, 1.0, 2.5}) {
    auto s = make(1, 512, true, 0, nullptr, SpeculationOptions{"draft", other, 4, length});
    ASSERT_TRUE(s) << length;
    const EngineEvent e = run(*s, "synth", RequestKind::completion, body);
    ASSERT_EQ(e.type, EngineEvent::Type::done) << length << ": " << e.message;
    EXPECT_EQ(e.usage.completion_tokens, 96);
    const SchedulerStats st = s->stats();
    ASSERT_GT(st.speculation.steps, 10u) << length;
    EXPECT_EQ(st.speculation.synth_len, length);
    const double mean = 1.0 + static_cast<double>(st.speculation.accepted) / static_cast<double>(st.speculation.steps);
    if (length == 5.0) EXPECT_EQ(st.speculation.accepted, st.speculation.drafted);
    if (length == 1.0) EXPECT_EQ(st.speculation.accepted, 0u);
    EXPECT_NEAR(mean, length, 0.4) << length;
    EXPECT_GT(st.speculation.draft_seconds, 0.0) << length;
    EXPECT_GT(st.speculation.verify_seconds, 0.0) << length;
  }
  // Outside [1, draft_max + 1], no scheduler, and the reason.
  SchedulerOptions o;
  o.context = 256;
  o.threads = 1;
  o.speculation = {"draft", other, 4, 6.0};
  auto refused = Scheduler::create(model_, o);
  ASSERT_FALSE(refused.is_ok());
  EXPECT_NE(refused.status().message().find("synthetic acceptance length"), std::string::npos)
      << refused.status().to_string();
}

// A request caps its own drafts with llama-server's "speculative.n_max": 0 turns speculation off
// for it, 2 drafts two tokens at most; the tokens stay greedy's. Out of [0, 32], refused.
TEST_F(SchedulerTest, ARequestCapsItsOwnDrafts) {
  const json body = greedy(repeating_prompt(), 40);
  auto off = make(1, 512);
  const EngineEvent base = run(*off, "base", RequestKind::completion, body);
  ASSERT_EQ(base.type, EngineEvent::Type::done) << base.message;
  auto s = make(1, 512, true, 0, nullptr, SpeculationOptions{"draft", *model_path_, 6});
  ASSERT_TRUE(s);
  json none = body;
  none["speculative.n_max"] = 0;
  const EngineEvent e0 = run(*s, "none", RequestKind::completion, none);
  ASSERT_EQ(e0.type, EngineEvent::Type::done) << e0.message;
  EXPECT_EQ(e0.tokens, base.tokens);
  EXPECT_EQ(s->stats().speculation.steps, 0u);
  json two = body;
  two["speculative.n_max"] = 2;
  const EngineEvent e2 = run(*s, "two", RequestKind::completion, two);
  ASSERT_EQ(e2.type, EngineEvent::Type::done) << e2.message;
  EXPECT_EQ(e2.tokens, base.tokens);
  const SpeculationStats st = s->stats().speculation;
  EXPECT_GT(st.steps, 0u);
  EXPECT_LE(st.drafted, 2 * st.steps);
  EXPECT_GT(st.drafted, st.steps) << "a cap of 2 should still draft 2 tokens a step here";
  json wrong = body;
  wrong["speculative.n_max"] = 40;
  const Status refused = s->submit("wrong", RequestKind::completion, wrong.dump(), [](const EngineEvent&) {});
  ASSERT_FALSE(refused.is_ok());
  EXPECT_NE(refused.message().find("speculative.n_max must be an integer in [0, 32]"), std::string::npos)
      << refused.to_string();
}

}  // namespace
}  // namespace tandem::engine
