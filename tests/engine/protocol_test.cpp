#include "engine/protocol.h"

#include <gtest/gtest.h>

#include <iterator>
#include <map>
#include <set>

namespace tandem::engine {
namespace {

TEST(Protocol, RequestsRoundTrip) {
  EngineRequest r;
  r.op = EngineRequest::Op::submit;
  r.id = "r1";
  r.kind = RequestKind::completion;
  r.body = R"({"prompt":"hi","max_tokens":3})";
  auto back = decode_request(encode_request(r));
  ASSERT_TRUE(back.is_ok()) << back.status().to_string();
  EXPECT_EQ(back->op, EngineRequest::Op::submit);
  EXPECT_EQ(back->id, "r1");
  EXPECT_EQ(back->kind, RequestKind::completion);
  EXPECT_NE(back->body.find("\"prompt\":\"hi\""), std::string::npos) << back->body;
}

TEST(Protocol, MalformedRequestsAreErrorsThatSayWhy) {
  const std::vector<std::pair<std::string, std::string>> cases = {
      {"{", "not valid JSON"},
      {"[1]", "expected a JSON object"},
      {R"({"op":"dance"})", "'op' must be one of submit, cancel, status"},
      {R"({"op":"submit","body":{}})", "needs 'id'"},
      {R"({"op":"submit","id":"x"})", "needs 'body'"},
      {R"({"op":"submit","id":"x","kind":"embed","body":{}})", "'kind' must be chat or completion"},
      {R"({"op":"submit","id":"x","kind":7,"body":{}})", "type"},
      {R"({"op":"cancel","id":5})", "needs 'id'"},
  };
  for (const auto& [line, why] : cases) {
    auto r = decode_request(line);
    ASSERT_FALSE(r.is_ok()) << line;
    EXPECT_NE(r.status().message().find(why), std::string::npos) << line << " -> " << r.status().message();
  }
}

// Found by fuzzing (tests/fuzz/engine_protocol_fuzz.cpp): numbers that do not fit their field
// were converted with a plain cast (undefined behaviour); they are errors now.
TEST(Protocol, NumbersOutOfRangeAreErrorsNotCasts) {
  const std::vector<std::pair<std::string, std::string>> cases = {
      {R"({"event":"done","id":"r1","tokens":[7777777777777777777777777771,2]})",
       "'tokens' must be an integer in range"},
      {R"({"event":"done","id":"r1","tokens":[4294967296]})", "'tokens'"},
      {R"({"event":"done","id":"r1","usage":{"prompt_tokens":1e30}})", "'prompt_tokens'"},
      {R"({"event":"delta","id":"r1","tool_calls":[{"index":-1e300}]})", "'index'"},
      {R"({"event":"status","state":"loading","load":{"bytes":-1}})", "'bytes'"},
      {R"({"event":"status","state":"ready","slots":{"busy":2.5}})", "'busy'"},
  };
  for (const auto& [line, why] : cases) {
    auto e = decode_event(line);
    ASSERT_FALSE(e.is_ok()) << line;
    EXPECT_NE(e.status().message().find(why), std::string::npos) << line << " -> " << e.status().message();
  }
  auto ok = decode_event(
      R"({"event":"done","id":"r1","usage":{"prompt_tokens":3,"completion_tokens":null},"tokens":[-5,7]})");
  ASSERT_TRUE(ok.is_ok()) << ok.status().message();
  EXPECT_EQ(ok->usage.prompt_tokens, 3);
  EXPECT_EQ(ok->tokens, (std::vector<int32_t>{-5, 7}));
}

TEST(Protocol, EventsRoundTrip) {
  EngineEvent d;
  d.type = EngineEvent::Type::delta;
  d.id = "a";
  d.text = "hé";
  d.reasoning = "hmm";
  d.tool_calls = {{0, "call_1", "get_weather", "{\"ci"}};
  auto back = decode_event(encode_event(d));
  ASSERT_TRUE(back.is_ok());
  EXPECT_EQ(back->text, "hé");
  EXPECT_EQ(back->reasoning, "hmm");
  ASSERT_EQ(back->tool_calls.size(), 1u);
  EXPECT_EQ(back->tool_calls[0].name, "get_weather");
  EXPECT_EQ(back->tool_calls[0].arguments, "{\"ci");

  EngineEvent started;
  started.type = EngineEvent::Type::started;
  started.id = "a";
  started.usage = {13000, 0, 12900};
  back = decode_event(encode_event(started));
  ASSERT_TRUE(back.is_ok());
  EXPECT_EQ(back->type, EngineEvent::Type::started);
  EXPECT_EQ(back->id, "a");
  EXPECT_EQ(back->usage.prompt_tokens, 13000);
  EXPECT_EQ(back->usage.cached_tokens, 12900);

  EngineEvent e;
  e.type = EngineEvent::Type::error;
  e.id = "a";
  e.code = StatusCode::resource_exhausted;
  e.message = "full";
  back = decode_event(encode_event(e));
  ASSERT_TRUE(back.is_ok());
  EXPECT_EQ(back->code, StatusCode::resource_exhausted);
  EXPECT_NE(encode_event(e).find("\"code\":\"resource_exhausted\""), std::string::npos);

  EngineEvent s;
  s.type = EngineEvent::Type::status;
  s.status.state = EngineState::loading;
  s.status.load = {0.5, 100, 200, 50.0};
  back = decode_event(encode_event(s));
  ASSERT_TRUE(back.is_ok());
  EXPECT_EQ(back->status.state, EngineState::loading);
  EXPECT_EQ(back->status.load.total_bytes, 200u);

  // The prompt cache's figures, each worker's share by its endpoint among them.
  s.status.prompt_cache.max_bytes = 8ull << 30;
  s.status.prompt_cache.bytes = 5000000000ull;
  s.status.prompt_cache.hits = 3;
  s.status.prompt_cache.evictions = 2;
  s.status.prompt_cache.per_worker = {{"127.0.0.1:4000", 123}, {"127.0.0.1:4001", 456}};
  back = decode_event(encode_event(s));
  ASSERT_TRUE(back.is_ok());
  EXPECT_EQ(back->status.prompt_cache.max_bytes, 8ull << 30);
  EXPECT_EQ(back->status.prompt_cache.bytes, 5000000000ull);
  EXPECT_EQ(back->status.prompt_cache.hits, 3u);
  EXPECT_EQ(back->status.prompt_cache.evictions, 2u);
  EXPECT_EQ(back->status.prompt_cache.per_worker, s.status.prompt_cache.per_worker);
}

// The engine's states travel by the one name table; a name outside it is the peer's error.
TEST(Protocol, EngineStatesRoundTripByName) {
  for (const EngineStateName& n : kEngineStateNames) {
    EXPECT_EQ(engine_state_name(n.state), n.name);
    EXPECT_EQ(engine_state_from_name(n.name), n.state);
    EngineEvent e;
    e.type = EngineEvent::Type::status;
    e.status.state = n.state;
    const std::string line = encode_event(e);
    EXPECT_NE(line.find("\"state\":\"" + std::string(n.name) + "\""), std::string::npos) << line;
    auto back = decode_event(line);
    ASSERT_TRUE(back.is_ok()) << back.status().message();
    EXPECT_EQ(back->status.state, n.state);
  }
  EXPECT_EQ(engine_state_from_name("sleeping"), std::nullopt);
  auto bad = decode_event(R"({"event":"status","state":"sleeping"})");
  ASSERT_FALSE(bad.is_ok());
  EXPECT_NE(bad.status().message().find("'state' must be one of"), std::string::npos) << bad.status().message();
}

// Every counter of the prompt cache's statistics has one row in the table, and travels by it.
TEST(Protocol, PromptCacheStatsTravelByTheirFieldTable) {
  // A counter added to the struct without a row changes its size: this fails until the row is there.
  constexpr size_t rows = std::size(kPromptCacheFields);
  EXPECT_EQ(sizeof(PromptCacheStats), rows * sizeof(uint64_t) + 2 * sizeof(std::map<std::string, uint64_t>));
  std::set<std::string_view> names, health, metrics;
  EngineEvent e;
  e.type = EngineEvent::Type::status;
  e.status.state = EngineState::ready;
  uint64_t v = 1000;
  for (const PromptCacheField& f : kPromptCacheFields) {
    EXPECT_TRUE(names.insert(f.name).second) << f.name;
    if (!f.health.empty()) EXPECT_TRUE(health.insert(f.health).second) << f.health;
    if (!f.metric.empty()) {
      EXPECT_TRUE(metrics.insert(f.metric).second) << f.metric;
      EXPECT_TRUE(f.metric_type == "gauge" || f.metric_type == "counter") << f.metric;
      EXPECT_EQ(f.metric.rfind("tandem_prompt_cache_", 0), 0u) << f.metric;
      EXPECT_FALSE(f.metric_help.empty()) << f.metric;
    }
    e.status.prompt_cache.*f.member = v++;
  }
  e.status.prompt_cache.per_worker = {{"127.0.0.1:1", 5}};
  e.status.prompt_cache.per_worker_disk = {{"127.0.0.1:1", 6}};
  const std::string line = encode_event(e);
  auto back = decode_event(line);
  ASSERT_TRUE(back.is_ok()) << back.status().message();
  v = 1000;
  for (const PromptCacheField& f : kPromptCacheFields) {
    EXPECT_EQ(back->status.prompt_cache.*f.member, v++) << f.name;
    EXPECT_NE(line.find("\"" + std::string(f.name) + "\":"), std::string::npos) << f.name;
  }
  EXPECT_EQ(back->status.prompt_cache.per_worker, e.status.prompt_cache.per_worker);
  EXPECT_EQ(back->status.prompt_cache.per_worker_disk, e.status.prompt_cache.per_worker_disk);
}

TEST(Protocol, InvalidUtf8IsReplacedNotThrown) {
  EngineEvent d;
  d.type = EngineEvent::Type::delta;
  d.id = "a";
  d.text = "bad \xC3";
  EXPECT_TRUE(decode_event(encode_event(d)).is_ok());
}

TEST(Protocol, TokenizerOpsResultsAndLogprobsRoundTrip) {
  EngineRequest t;
  t.op = EngineRequest::Op::tokenize;
  t.id = "q1";
  t.content = "héllo";
  t.add_special = true;
  auto back = decode_request(encode_request(t));
  ASSERT_TRUE(back.is_ok()) << back.status().to_string();
  EXPECT_EQ(back->op, EngineRequest::Op::tokenize);
  EXPECT_EQ(back->content, "héllo");
  EXPECT_TRUE(back->add_special);
  EngineRequest d;
  d.op = EngineRequest::Op::detokenize;
  d.id = "q2";
  d.tokens = {1, 2, 300};
  EXPECT_EQ(decode_request(encode_request(d))->tokens, d.tokens);
  EngineRequest n;
  n.op = EngineRequest::Op::count;
  n.id = "q3";
  n.body = R"({"messages":[{"role":"user","content":"hi"}]})";
  back = decode_request(encode_request(n));
  EXPECT_EQ(back->op, EngineRequest::Op::count);
  EXPECT_EQ(back->kind, RequestKind::chat);
  EXPECT_FALSE(decode_request(R"({"op":"count","id":"x"})").is_ok());
  EXPECT_NE(decode_request(R"({"op":"tokenise","id":"x"})").status().message().find("tokenize, detokenize, count"),
            std::string::npos);

  EngineEvent r;
  r.type = EngineEvent::Type::result;
  r.id = "q1";
  r.tokens = {5, 6};
  r.pieces = {"a", "b"};
  r.count = 9;
  auto e = decode_event(encode_event(r));
  ASSERT_TRUE(e.is_ok());
  EXPECT_EQ(e->type, EngineEvent::Type::result);
  EXPECT_EQ(e->tokens, r.tokens);
  EXPECT_EQ(e->pieces, r.pieces);
  EXPECT_EQ(e->count, 9);

  // A piece that ends inside a UTF-8 character keeps its bytes.
  EngineEvent delta;
  delta.type = EngineEvent::Type::delta;
  delta.id = "r";
  delta.text = "x";
  delta.logprobs = {{{7, std::string("\xc3"), -0.5f}, {{7, std::string("\xc3"), -0.5f}, {8, "y", -1.0f}}}};
  e = decode_event(encode_event(delta));
  ASSERT_TRUE(e.is_ok()) << e.status().to_string();
  ASSERT_EQ(e->logprobs.size(), 1u);
  EXPECT_EQ(e->logprobs[0].token.piece, std::string("\xc3"));
  EXPECT_EQ(e->logprobs[0].top[1].id, 8);
  EXPECT_FLOAT_EQ(e->logprobs[0].top[1].logprob, -1.0f);
}

}  // namespace
}  // namespace tandem::engine
