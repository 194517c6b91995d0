// The scheduler on the tiny synthetic model, CPU: exactness under continuous batching, limits,
// stop strings, cancellation, sampling and errors.
#include "scheduler_fixture.h"

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
#include "synth/presets.h"
#include "synth/writer.h"
#include "test_util.h"

namespace tandem::engine {
namespace {

using json = nlohmann::json;
using testing::EventCollector;

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
