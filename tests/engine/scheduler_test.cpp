// The scheduler on the tiny synthetic model, CPU: exactness under continuous batching, limits,
// stop strings, cancellation, sampling and errors.
#include "engine/scheduler.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <memory>
#include <nlohmann/json.hpp>
#include <thread>

#include <unistd.h>

#include "engine/model_loader.h"
#include "event_collector.h"
#include "fake_shares.h"
#include "ggml.h"
#include "synth/draft.h"
#include "synth/presets.h"
#include "synth/writer.h"
#include "test_util.h"

namespace tandem::engine {
namespace {

using json = nlohmann::json;
using testing::EventCollector;

class SchedulerTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    // One folder per process: ctest runs each test in its own process, two at a time.
    dir_ = new std::string(std::string(TANDEM_TEST_TMP) + "/SchedulerTest." + std::to_string(::getpid()));
    std::filesystem::create_directories(*dir_);
    model_path_ = new std::string(*dir_ + "/tiny.gguf");
    // IQ4_XS rather than tiny's Q4_K: with i8mm (GB10's cores) ggml's arm64 CPU backend computes
    // Q4_0, Q4_1, Q8_0, Q4_K and Q6_K two rows at a time when the micro-batch has an even row
    // count, and so rounds a row differently alone than among others; IQ4_XS is one row at a time
    // on both architectures (docs/engine-protocol.md, exactness).
    synth::ModelSpec spec = synth::preset("tiny").value();
    spec.type = GGML_TYPE_IQ4_XS;
    ASSERT_TRUE(synth::write_model(spec, *model_path_, {}).is_ok());
    LoadOptions lo;
    lo.model = *model_path_;
    // Repacked CPU kernels switch between gemm and gemv by row count, so only file-layout weights
    // give results independent of the batch (docs/engine-protocol.md, exactness).
    lo.placement.cpu_weight_repack = false;
    auto m = load_model(lo);
    ASSERT_TRUE(m.is_ok()) << m.status().to_string();
    model_ = m.value().release();
  }
  static void TearDownTestSuite() {
    ModelDeleter()(model_);
    std::filesystem::remove_all(*dir_);
    delete dir_;
    delete model_path_;
  }

  static std::unique_ptr<Scheduler> make(int parallel, int context = 256, bool warm_up = true,
                                         uint64_t prompt_cache_bytes = 0, StateShares* shares = nullptr,
                                         SpeculationOptions speculation = {}) {
    SchedulerOptions o;
    o.speculation = std::move(speculation);
    o.prompt_cache_bytes = prompt_cache_bytes;
    o.parallel = parallel;
    o.context = context;
    o.warm_up = warm_up;
    o.threads = 1;            // the test machine's two cores are shared: spinning thread pools would crawl
    o.max_prompt_chunk = 32;  // below flash attention's 64-row tile: see docs/engine-protocol.md
    auto s = Scheduler::create(model_, o, shares);
    EXPECT_TRUE(s.is_ok()) << s.status().to_string();
    return s.is_ok() ? std::move(s.value()) : nullptr;
  }

  // Runs one request to its end and returns the final event; text into *text when given.
  static EngineEvent run(Scheduler& s, const std::string& id, RequestKind kind, const json& body,
                         std::string* text = nullptr) {
    auto c = std::make_shared<EventCollector>();
    Status st = s.submit(id, kind, body.dump(), [c](const EngineEvent& e) { (*c)(e); });
    EXPECT_TRUE(st.is_ok()) << st.to_string();
    if (!st.is_ok()) return {};
    EXPECT_TRUE(c->wait());
    if (text) *text = c->text();
    return c->final_event();
  }

  // Submits every body at once and returns their final events, in order.
  static std::vector<EngineEvent> run_together(Scheduler& s, const std::vector<json>& bodies) {
    std::vector<std::shared_ptr<EventCollector>> collectors;
    for (size_t i = 0; i < bodies.size(); ++i) {
      auto c = std::make_shared<EventCollector>();
      const Status st = s.submit("c" + std::to_string(i), RequestKind::completion, bodies[i].dump(),
                                 [c](const EngineEvent& e) { (*c)(e); });
      EXPECT_TRUE(st.is_ok()) << st.to_string();
      collectors.push_back(c);
    }
    std::vector<EngineEvent> out;
    for (auto& c : collectors) {
      EXPECT_TRUE(c->wait());
      out.push_back(c->final_event());
    }
    return out;
  }

  static json greedy(const std::string& prompt, int n) {
    return {{"prompt", prompt}, {"max_tokens", n}, {"temperature", 0}, {"ignore_eos", true}, {"return_tokens", true}};
  }

  static std::string* dir_;
  static std::string* model_path_;
  static llama_model* model_;
};
std::string* SchedulerTest::dir_ = nullptr;
std::string* SchedulerTest::model_path_ = nullptr;
llama_model* SchedulerTest::model_ = nullptr;

TEST_F(SchedulerTest, GreedyDecodingIsDeterministic) {
  auto s = make(1);
  std::string a_text, b_text;
  EngineEvent a = run(*s, "a", RequestKind::completion, greedy("The cable between the two boxes", 24), &a_text);
  EngineEvent b = run(*s, "b", RequestKind::completion, greedy("The cable between the two boxes", 24), &b_text);
  ASSERT_EQ(a.type, EngineEvent::Type::done) << a.message;
  EXPECT_EQ(a.tokens.size(), 24u);
  EXPECT_EQ(a.tokens, b.tokens);
  EXPECT_EQ(a_text, b_text);
  EXPECT_EQ(a.finish_reason, "length");
  EXPECT_EQ(a.usage.completion_tokens, 24);
  EXPECT_GT(a.usage.prompt_tokens, 3);
  // The second run reuses the first one's prompt from the slot's cache.
  EXPECT_EQ(b.usage.cached_tokens, b.usage.prompt_tokens - 1);
}

TEST_F(SchedulerTest, TheWarmUpLeavesNothingInTheCacheOrTheTokens) {
  ::testing::internal::CaptureStderr();
  auto warm = make(2, 256, true);
  const std::string log = ::testing::internal::GetCapturedStderr();
  EXPECT_NE(log.find("warm-up: a 32-token prompt step and a decode step in"), std::string::npos) << log;
  auto cold = make(2, 256, false);
  // A prompt that starts as the warm-up's did (the BOS token, which the tokenizer adds): no prefix
  // of it may be found in a slot, and the tokens must be those of a scheduler that never warmed up.
  const json body = greedy("Two boxes, one cable", 16);
  EngineEvent a = run(*warm, "a", RequestKind::completion, body);
  EngineEvent b = run(*cold, "b", RequestKind::completion, body);
  ASSERT_EQ(a.type, EngineEvent::Type::done) << a.message;
  ASSERT_EQ(b.type, EngineEvent::Type::done) << b.message;
  EXPECT_EQ(a.usage.cached_tokens, 0);
  EXPECT_EQ(a.tokens, b.tokens);
  EXPECT_EQ(a.usage.prompt_tokens, b.usage.prompt_tokens);
  EXPECT_EQ(warm->stats().tokens_generated, 16u);  // the warm-up's steps are not counted
}

TEST_F(SchedulerTest, EightConcurrentRequestsGetTheTokensTheyGetAlone) {
  auto s = make(8);
  std::vector<json> bodies;
  for (int i = 0; i < 8; ++i) {
    std::string prompt = "Request number " + std::to_string(i) + ":";
    for (int w = 0; w < i * 7; ++w) prompt += " word" + std::to_string(w);
    bodies.push_back(greedy(prompt, 8 + 5 * i));
  }
  std::vector<std::vector<int32_t>> alone;
  for (int i = 0; i < 8; ++i) {
    EngineEvent e = run(*s, "alone" + std::to_string(i), RequestKind::completion, bodies[i]);
    ASSERT_EQ(e.type, EngineEvent::Type::done) << e.message;
    alone.push_back(e.tokens);
  }
  // A fresh scheduler, so no prompt is served from a cache filled by the runs above.
  s = make(8);
  const std::vector<EngineEvent> together = run_together(*s, bodies);
  for (int i = 0; i < 8; ++i) {
    ASSERT_EQ(together[i].type, EngineEvent::Type::done) << together[i].message;
    EXPECT_EQ(together[i].tokens, alone[i]) << "request " << i;
  }
}

// The prompt cache's counts once the decode thread has saved what it saves while idle (it does
// so right after a request ends, so a test reads them after waiting for `saves`).
PromptCacheStats settled(Scheduler& s, uint64_t saves) {
  for (int i = 0; i < 200 && s.stats().prompt_cache.saves < saves; ++i)
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  return s.stats().prompt_cache;
}

// Two conversations take turns on one slot: with the prompt cache the returning one restores its
// prefix instead of evaluating it and gets the tokens a fresh prefill gives; without it, it
// evaluates everything again. Each slot's state is saved as soon as it idles.
TEST_F(SchedulerTest, AReturningConversationRestoresItsPrefixFromThePromptCache) {
  std::string a = "Alice asks:", b = "Bob says:";
  for (int i = 0; i < 30; ++i) a += " the quick brown fox", b += " a lazy dog sleeps";
  for (uint64_t bytes : {uint64_t{0}, uint64_t{64} << 20}) {
    auto s = make(1, 512, true, bytes);
    ASSERT_TRUE(s);
    const EngineEvent first = run(*s, "a1", RequestKind::completion, greedy(a, 8));
    ASSERT_EQ(first.type, EngineEvent::Type::done);
    ASSERT_GT(first.usage.prompt_tokens, 100);
    if (bytes != 0) EXPECT_EQ(settled(*s, 1).entries, 1u) << "a's state, saved when its request ended";
    ASSERT_EQ(run(*s, "b1", RequestKind::completion, greedy(b, 8)).type, EngineEvent::Type::done);
    if (bytes != 0) EXPECT_EQ(settled(*s, 2).entries, 2u) << "b's state too";
    const EngineEvent again = run(*s, "a2", RequestKind::completion, greedy(a, 8));
    ASSERT_EQ(again.type, EngineEvent::Type::done);
    EXPECT_EQ(again.tokens, first.tokens) << (bytes ? "restored" : "evaluated again");
    if (bytes == 0) {
      EXPECT_LE(again.usage.cached_tokens, 1);  // the BOS token both prompts begin with
      EXPECT_EQ(s->stats().prompt_cache.entries, 0u);
      continue;
    }
    EXPECT_EQ(again.usage.cached_tokens, first.usage.prompt_tokens - 1);
    const PromptCacheStats c = settled(*s, 3);
    EXPECT_EQ(c.hits, 1u);
    EXPECT_EQ(c.restored_tokens, static_cast<uint64_t>(first.usage.prompt_tokens - 1));
    EXPECT_EQ(c.failed_restores, 0u);
    EXPECT_EQ(c.entries, 2u) << "b's, and a's saved again with its new tokens";
    EXPECT_EQ(c.saves, 3u);
    EXPECT_GT(c.bytes, 0u);
    EXPECT_LE(c.bytes, c.max_bytes);
    EXPECT_EQ(c.worker_bytes, 0u) << "no worker here";
  }
}

// The prompt cache saves and restores its states through the StateShares it is given
// (engine/prompt_cache.h), here a fake node that keeps the first bytes of each: a returning
// conversation's state comes back from it whole and gives the tokens of a fresh prefill; a state
// the node no longer holds is not restored (the prompt is evaluated again, to the same tokens); and
// every state saved is dropped through it once, after its restore or with the cache.
TEST_F(SchedulerTest, ThePromptCacheSavesAndRestoresThroughItsStateShares) {
  std::string a = "Alice asks:", b = "Bob says:";
  for (int i = 0; i < 30; ++i) a += " the quick brown fox", b += " a lazy dog sleeps";
  constexpr uint64_t kKept = 4096;
  for (bool node_restarted : {false, true}) {
    SCOPED_TRACE(node_restarted ? "the node lost a's state" : "the node holds a's state");
    testing::FakeShares shares(kKept);
    {
      auto s = make(1, 512, true, uint64_t{64} << 20, &shares);
      ASSERT_TRUE(s);
      const EngineEvent first = run(*s, "a1", RequestKind::completion, greedy(a, 8));
      ASSERT_EQ(first.type, EngineEvent::Type::done);
      settled(*s, 1);
      ASSERT_EQ(run(*s, "b1", RequestKind::completion, greedy(b, 8)).type, EngineEvent::Type::done);
      const PromptCacheStats held = settled(*s, 2);
      EXPECT_EQ(held.per_worker.at("fake:1"), 2 * kKept) << "a's and b's parts, on the node";
      EXPECT_EQ(shares.held(), 2u);
      if (node_restarted) shares.forget(1);  // a's state: the first key
      const EngineEvent again = run(*s, "a2", RequestKind::completion, greedy(a, 8));
      ASSERT_EQ(again.type, EngineEvent::Type::done) << again.message;
      EXPECT_EQ(again.tokens, first.tokens);
      const PromptCacheStats c = settled(*s, 3);
      EXPECT_EQ(shares.restores(), 1u);
      if (node_restarted) {
        EXPECT_LE(again.usage.cached_tokens, 1);
        EXPECT_EQ(c.failed_restores, 1u);
      } else {
        EXPECT_EQ(again.usage.cached_tokens, first.usage.prompt_tokens - 1);
        EXPECT_EQ(c.failed_restores, 0u);
      }
      EXPECT_EQ(c.per_worker.at("fake:1"), 2 * kKept) << "b's part, and a's saved again";
      EXPECT_EQ(shares.dropped(), std::vector<uint64_t>({1})) << "a's first state, once taken";
    }
    EXPECT_EQ(shares.saves(), 3u);
    std::vector<uint64_t> dropped = shares.dropped();
    std::sort(dropped.begin(), dropped.end());
    EXPECT_EQ(dropped, std::vector<uint64_t>({1, 2, 3})) << "the cache's states went with it";
    EXPECT_EQ(shares.held(), 0u);
    EXPECT_TRUE(shares.spilled().empty());
  }
}

TEST_F(SchedulerTest, CancellationFreesTheSlotAtOnce) {
  auto s = make(1);
  auto c = std::make_shared<EventCollector>();
  json body = greedy("A long story about two machines", 200);
  ASSERT_TRUE(s->submit("long", RequestKind::completion, body.dump(), [c](const EngineEvent& e) { (*c)(e); }).is_ok());
  // A second request waits for the only slot.
  auto next = std::make_shared<EventCollector>();
  ASSERT_TRUE(s->submit("next", RequestKind::completion, greedy("Next", 4).dump(), [next](const EngineEvent& e) {
                 (*next)(e);
               }).is_ok());
  ASSERT_TRUE(c->wait_first_delta());
  s->cancel("long");
  ASSERT_TRUE(c->wait());
  EngineEvent e = c->final_event();
  EXPECT_EQ(e.type, EngineEvent::Type::error);
  EXPECT_EQ(e.code, StatusCode::cancelled);
  ASSERT_TRUE(next->wait());
  EXPECT_EQ(next->final_event().type, EngineEvent::Type::done);
  EXPECT_EQ(next->final_event().usage.completion_tokens, 4);
  // Cancelling a queued request ends it too; an unknown id is ignored.
  s->cancel("nobody");
  EXPECT_EQ(s->stats().busy, 0);
}

TEST_F(SchedulerTest, ACancelledQueuedRequestNeverRuns) {
  auto s = make(1);
  auto first = std::make_shared<EventCollector>(), queued = std::make_shared<EventCollector>();
  ASSERT_TRUE(s->submit("first", RequestKind::completion, greedy("One", 60).dump(), [first](const EngineEvent& e) {
                 (*first)(e);
               }).is_ok());
  ASSERT_TRUE(s->submit("queued", RequestKind::completion, greedy("Two", 60).dump(), [queued](const EngineEvent& e) {
                 (*queued)(e);
               }).is_ok());
  s->cancel("queued");
  ASSERT_TRUE(queued->wait());
  EXPECT_EQ(queued->final_event().code, StatusCode::cancelled);
  EXPECT_TRUE(queued->text().empty());
  ASSERT_TRUE(first->wait());
  EXPECT_EQ(first->final_event().type, EngineEvent::Type::done);
}

TEST_F(SchedulerTest, StopStringsEndTheTextAlsoWhenTheyStraddleTokens) {
  auto s = make(1);
  auto c = std::make_shared<EventCollector>();
  ASSERT_TRUE(s->submit("free", RequestKind::completion, greedy("The", 24).dump(), [c](const EngineEvent& e) {
                 (*c)(e);
               }).is_ok());
  ASSERT_TRUE(c->wait());
  // Find two neighbouring deltas (one token each) with at least 2 bytes and build a stop string
  // from the end of one and the start of the next.
  std::vector<std::string> pieces;
  for (const auto& e : c->events())
    if (e.type == EngineEvent::Type::delta) pieces.push_back(e.text);
  std::string stop, before;
  for (size_t i = 0; i + 1 < pieces.size() && stop.empty(); ++i) {
    const std::string& a = pieces[i];
    const std::string& b = pieces[i + 1];
    if (a.size() >= 2 && b.size() >= 2 && (a.back() & 0x80) == 0 && (b[1] & 0x80) == 0) {
      stop = a.substr(a.size() - 2) + b.substr(0, 2);
    }
  }
  ASSERT_FALSE(stop.empty()) << "no two neighbouring multi-byte pieces";
  const std::string full = c->text();
  const std::string expected = full.substr(0, full.find(stop));
  json body = greedy("The", 24);
  body["stop"] = json::array({"never-there", stop});
  std::string text;
  EngineEvent e = run(*s, "stopped", RequestKind::completion, body, &text);
  ASSERT_EQ(e.type, EngineEvent::Type::done) << e.message;
  EXPECT_EQ(e.finish_reason, "stop");
  EXPECT_EQ(text, expected);
}

TEST_F(SchedulerTest, TheSameSeedGivesTheSameSample) {
  auto s = make(2);
  json body = {{"prompt", "Sampling with a seed"},
               {"max_tokens", 16},
               {"temperature", 1.0},
               {"top_k", 50},
               {"top_p", 0.9},
               {"min_p", 0.01},
               {"seed", 1234},
               {"ignore_eos", true},
               {"return_tokens", true},
               {"presence_penalty", 0.5},
               {"frequency_penalty", 0.2},
               {"repeat_penalty", 1.1}};
  EngineEvent a = run(*s, "a", RequestKind::completion, body);
  EngineEvent b = run(*s, "b", RequestKind::completion, body);
  body["seed"] = 99;
  EngineEvent other = run(*s, "c", RequestKind::completion, body);
  ASSERT_EQ(a.type, EngineEvent::Type::done) << a.message;
  EXPECT_EQ(a.tokens, b.tokens);
  EXPECT_NE(a.tokens, other.tokens);
}

TEST_F(SchedulerTest, LogitBiasSteersTheSample) {
  auto s = make(1);
  json body = greedy("Bias", 5);
  body["logit_bias"] = {{"1234", 100}};
  EngineEvent e = run(*s, "b", RequestKind::completion, body);
  ASSERT_EQ(e.type, EngineEvent::Type::done) << e.message;
  EXPECT_EQ(e.tokens, std::vector<int32_t>(5, 1234));
}

TEST_F(SchedulerTest, JsonSchemaOutputParsesAndValidates) {
  auto s = make(1, 512);
  json schema = {{"type", "object"},
                 {"properties",
                  {{"name", {{"type", "string"}, {"maxLength", 6}}},
                   {"age", {{"type", "integer"}, {"minimum", 0}, {"maximum", 150}}},
                   {"kind", {{"enum", json::array({"cat", "dog"})}}}}},
                 {"required", json::array({"name", "age", "kind"})},
                 {"additionalProperties", false}};
  // Completions only: with the tiny model's SPM vocabulary, MiniMax-M3's generation prompt does
  // not tokenize the way the chat format's grammar expects (llama-server refuses it the same way).
  for (const std::string kind : {"completion"}) {
    json body = {
        {"max_tokens", 200},
        {"temperature", 0},
        {"response_format", {{"type", "json_schema"}, {"json_schema", {{"name", "pet"}, {"schema", schema}}}}}};
    if (kind == "chat")
      body["messages"] = json::array({{{"role", "user"}, {"content", "A pet, please."}}});
    else
      body["prompt"] = "A pet as JSON:";
    std::string text;
    EngineEvent e = run(*s, kind, kind == "chat" ? RequestKind::chat : RequestKind::completion, body, &text);
    ASSERT_EQ(e.type, EngineEvent::Type::done) << e.message;
    EXPECT_EQ(e.finish_reason, "stop") << text;
    json out = json::parse(text, nullptr, false);
    ASSERT_TRUE(out.is_object()) << kind << ": " << text;
    EXPECT_EQ(out.size(), 3u) << text;
    ASSERT_TRUE(out["name"].is_string()) << text;
    EXPECT_LE(out["name"].get<std::string>().size(), 6u * 4) << text;  // 6 characters, UTF-8
    ASSERT_TRUE(out["age"].is_number_integer()) << text;
    EXPECT_GE(out["age"].get<int>(), 0);
    EXPECT_LE(out["age"].get<int>(), 150);
    EXPECT_TRUE(out["kind"] == "cat" || out["kind"] == "dog") << text;
  }
}

// A request says how much of its prompt it reuses before its first token: the started event.
TEST_F(SchedulerTest, TheStartedEventGivesThePromptAndItsCachedPartBeforeTheFirstToken) {
  auto s = make(1);
  for (int turn = 0; turn < 2; ++turn) {
    auto c = std::make_shared<EventCollector>();
    ASSERT_TRUE(s->submit("t" + std::to_string(turn), RequestKind::completion,
                          greedy("The cable between the two boxes", 4).dump(), [c](const EngineEvent& e) { (*c)(e); })
                    .is_ok());
    ASSERT_TRUE(c->wait());
    const auto events = c->events();
    ASSERT_GE(events.size(), 2u);
    EXPECT_EQ(events[0].type, EngineEvent::Type::started);
    const EngineEvent done = c->final_event();
    ASSERT_EQ(done.type, EngineEvent::Type::done) << done.message;
    EXPECT_EQ(events[0].usage.prompt_tokens, done.usage.prompt_tokens);
    EXPECT_EQ(events[0].usage.cached_tokens, done.usage.cached_tokens);
    if (turn == 0) EXPECT_EQ(done.usage.cached_tokens, 0);
    if (turn == 1) EXPECT_EQ(done.usage.cached_tokens, done.usage.prompt_tokens - 1);  // the last one runs again
  }
}

// tool_choice is obeyed by the grammar: required and a named tool force a call (of that tool),
// none forbids one; every tool stays in the prompt whichever is chosen.
TEST_F(SchedulerTest, ToolChoiceForcesOrForbidsACall) {
  auto s = make(1, 1024);
  auto tool = [](const std::string& name) {
    return json{{"type", "function"},
                {"function",
                 {{"name", name},
                  {"parameters",
                   {{"type", "object"}, {"properties", {{"city", {{"type", "string"}}}}}, {"required", {"city"}}}}}}};
  };
  const json messages = json::array({{{"role", "user"}, {"content", "What is the weather in Paris?"}}});
  const json tools = json::array({tool("get_weather"), tool("get_time")});
  struct Case {
    json choice;
    std::string called;  // the tool whose call is forced; "" = none may be made
  };
  for (const Case& k :
       {Case{"required", "*"}, Case{{{"type", "function"}, {"function", {{"name", "get_time"}}}}, "get_time"},
        Case{"none", ""}}) {
    json body = {
        {"messages", messages}, {"tools", tools}, {"tool_choice", k.choice}, {"max_tokens", 96}, {"temperature", 0}};
    auto c = std::make_shared<EventCollector>();
    ASSERT_TRUE(s->submit("tc", RequestKind::chat, body.dump(), [c](const EngineEvent& e) { (*c)(e); }).is_ok());
    ASSERT_TRUE(c->wait());
    std::string names;
    for (const auto& e : c->events())
      for (const auto& t : e.tool_calls) names += t.name;
    const EngineEvent done = c->final_event();
    ASSERT_EQ(done.type, EngineEvent::Type::done) << done.message;
    if (k.called.empty()) {
      EXPECT_EQ(names, "") << k.choice.dump();
      EXPECT_NE(done.finish_reason, "tool_calls");
    } else {
      // The answer is the call from its first token (a random model may not finish its arguments
      // within max_tokens: finish length, the call named all the same).
      EXPECT_EQ(c->text(), "") << k.choice.dump();
      if (k.called != "*") EXPECT_EQ(names, k.called) << k.choice.dump();
      EXPECT_FALSE(names.empty()) << k.choice.dump() << ": " << done.finish_reason;
    }
  }
  // Where the generation prompt opens the model's reasoning (MiniMax-M3 with thinking on), the
  // grammar wants the reasoning closed before a call: the request runs under the grammar alone.
  {
    json body = {{"messages", messages},      {"tools", tools},
                 {"tool_choice", "required"}, {"chat_template_kwargs", {{"thinking_mode", "enabled"}}},
                 {"max_tokens", 16},          {"temperature", 0}};
    EngineEvent done = run(*s, "think", RequestKind::chat, body);
    EXPECT_EQ(done.type, EngineEvent::Type::done) << done.message;
  }
  // A name no tool has, and required without tools, are refused with the field's name.
  auto refused = [&](const json& body) {
    Status st = s->submit("bad", RequestKind::chat, body.dump(), [](const EngineEvent&) {});
    return st.is_ok() ? std::string() : st.message();
  };
  EXPECT_NE(refused({{"messages", messages},
                     {"tools", tools},
                     {"tool_choice", {{"type", "function"}, {"function", {{"name", "nope"}}}}}})
                .find("tool_choice"),
            std::string::npos);
  EXPECT_NE(refused({{"messages", messages}, {"tool_choice", "required"}}).find("tool_choice"), std::string::npos);
}

TEST_F(SchedulerTest, InvalidRequestsAreErrorsThatNameTheField) {
  auto s = make(1, 64);
  auto submit = [&](const json& body, RequestKind kind = RequestKind::completion) {
    return s->submit("x", kind, body.dump(),
                     [](const EngineEvent&) { ADD_FAILURE() << "an invalid request got an event"; });
  };
  const std::vector<std::pair<json, std::string>> cases = {
      {{{"prompt", "a"}, {"temperature", 3}}, "temperature must be a number in [0, 2], got 3"},
      {{{"prompt", "a"}, {"top_p", -0.5}}, "top_p must be a number in [0, 1]"},
      {{{"prompt", "a"}, {"top_k", "many"}}, "top_k must be an integer in [0, "},
      {{{"prompt", "a"}, {"presence_penalty", 9}}, "presence_penalty must be a number in [-2, 2]"},
      {{{"prompt", "a"}, {"max_tokens", 0}}, "max_tokens must be an integer in [1, "},
      {{{"prompt", "a"}, {"seed", -1}}, "seed must be an integer in [0, "},
      {{{"prompt", "a"}, {"logit_bias", {{"99999999", 1}}}}, "logit_bias: '99999999' is not a token id"},
      {{{"prompt", "a"}, {"stop", json::array({1})}}, "stop: every entry must be a non-empty string"},
      {{{"prompt", "a"}, {"grammar", "root ::= [unclosed"}}, "grammar does not parse"},
      {{{"prompt", "a"},
        {"response_format",
         {{"type", "json_schema"},
          {"json_schema", {{"schema", {{"type", "object"}, {"properties", {{"a", {{"$ref", "#/nowhere"}}}}}}}}}}}},
       "JSON schema"},
      {{{"prompt", "a"}, {"response_format", {{"type", "xml"}}}}, "response_format.type must be one of"},
      {{{"prompt", 5}}, "prompt must be a string"},
      {{{"messages", "hi"}}, "messages must be a non-empty array"},
      {{{"prompt", std::string(2000, 'a') + " b c d e f g h i j k l m n o p q r s t u v w x y z"}},
       "tokens, but the context holds " + std::to_string(s->context_per_request()) + " tokens"},
  };
  for (const auto& [body, why] : cases) {
    const RequestKind kind = body.contains("messages") ? RequestKind::chat : RequestKind::completion;
    Status st = submit(body, kind);
    ASSERT_FALSE(st.is_ok()) << body.dump();
    EXPECT_EQ(st.code(), StatusCode::invalid_argument);
    EXPECT_NE(st.message().find(why), std::string::npos) << body.dump() << " -> " << st.message();
  }
  EXPECT_EQ(s->stats().busy, 0);
}

}  // namespace
}  // namespace tandem::engine

namespace tandem::engine {
namespace {

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
// one it mostly refuses.
TEST_F(SchedulerTest, WithSamplingTheRepliesAreTheModelsOwnDraws) {
  auto off = make(1, 512);
  auto ngram = make(1, 512, true, 0, nullptr, SpeculationOptions{"ngram", "", 4});
  auto agreeing = make(1, 512, true, 0, nullptr, SpeculationOptions{"draft", *model_path_, 4});
  auto refused = make(1, 512, true, 0, nullptr, SpeculationOptions{"draft", disagreeing_draft(*dir_), 4});
  ASSERT_TRUE(ngram && agreeing && refused);
  const std::vector<Scheduler*> speculating = {ngram.get(), agreeing.get(), refused.get()};
  std::set<std::vector<int32_t>> distinct;
  for (uint32_t seed = 1; seed <= 8; ++seed) {
    json body = {{"prompt", repeating_prompt()},
                 {"max_tokens", 24},
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
  EXPECT_GT(distinct.size(), 4u) << "the seeds should give different replies: the sampling is not greedy";
  for (Scheduler* s : speculating) EXPECT_GT(s->stats().speculation.steps, 0u) << s->stats().speculative;
  EXPECT_GT(agreeing->stats().speculation.accepted, 0u);
  const SpeculationStats st = refused->stats().speculation;
  EXPECT_LT(st.accepted, st.drafted) << "no draft was refused";
}

// Benchmarks' synthetic acceptance keeps drafted tokens by chance, whatever the model samples: with
// a draft the model disagrees with, a length of draft_max + 1 keeps every drafted token, 1 none, and
// 2.5 about 1.5 of them a step (the seed fixes the draws). The times of drafting and checking add up.
TEST_F(SchedulerTest, SyntheticAcceptanceKeepsDraftsByChanceAtTheLengthAsked) {
  const std::string other = disagreeing_draft(*dir_);
  json body = greedy("The cable between the two boxes", 160);
  body["seed"] = 11;
  for (const double length : {5.0, 1.0, 2.5}) {
    auto s = make(1, 512, true, 0, nullptr, SpeculationOptions{"draft", other, 4, length});
    ASSERT_TRUE(s) << length;
    const EngineEvent e = run(*s, "synth", RequestKind::completion, body);
    ASSERT_EQ(e.type, EngineEvent::Type::done) << length << ": " << e.message;
    EXPECT_EQ(e.usage.completion_tokens, 160);
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
