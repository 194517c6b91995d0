// The engine protocol end to end: `tandem engine --socket` as a child process, EngineClient as
// the gateway would use it; and the scheduler through remote RPC servers.
#include <gtest/gtest.h>

#include <memory>
#include <nlohmann/json.hpp>
#include <thread>

#include "common/build_info.h"
#include "engine/client.h"
#include "engine/model_loader.h"
#include "engine/scheduler.h"
#include "event_collector.h"
#include "support/process.h"
#include "synth/presets.h"
#include "synth/writer.h"
#include "test_util.h"

namespace tandem::engine {
namespace {

using json = nlohmann::json;
using tandem::testing::ChildProcess;
using tandem::testing::ScratchDir;
using testing::EventCollector;

// A Unix socket path must fit in 108 bytes; the build's scratch folders may not.
std::string short_socket_path() {
  static int n = 0;
  const std::string p = "/tmp/tandem-engine-test-" + std::to_string(::getpid()) + "-" + std::to_string(n++) + ".sock";
  std::filesystem::remove(p);
  return p;
}

// Waits until the engine reports `state`; false after `timeout_ms`.
bool wait_for_state(EngineClient& c, EngineState state, int timeout_ms) {
  const auto end = std::chrono::steady_clock::now() + std::chrono::milliseconds(timeout_ms);
  while (std::chrono::steady_clock::now() < end) {
    auto s = c.status(5000);
    if (s.is_ok() && s->state == state) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  return false;
}

TEST(EngineServer, SubmitStreamCancelStatusAndMalformedLinesOverTheSocket) {
  ScratchDir dir;
  const std::string model = dir.file("tiny.gguf"), socket = short_socket_path();
  ASSERT_TRUE(synth::write_model(synth::preset("tiny").value(), model, {}).is_ok());
  ChildProcess engine(
      {TANDEM_BINARY, "engine", "--model", model, "--socket", socket, "--context", "256", "--parallel", "2", "-t", "1"},
      dir.file("engine.log"));
  std::mutex m;
  std::vector<EngineStatus> pushed;
  auto client = EngineClient::connect(socket, 30000, [&](const EngineStatus& s) {
    std::lock_guard<std::mutex> lock(m);
    pushed.push_back(s);
  });
  ASSERT_TRUE(client.is_ok()) << client.status().to_string();
  EngineClient& c = *client.value();
  ASSERT_TRUE(wait_for_state(c, EngineState::ready, 60000));
  auto st = c.status(5000);
  ASSERT_TRUE(st.is_ok());
  EXPECT_EQ(st->slots_total, 2);
  EXPECT_EQ(st->load.fraction, 1.0);
  EXPECT_GT(st->load.total_bytes, 1000000u);

  // A streamed completion: several deltas, then done with usage.
  auto a = std::make_shared<EventCollector>();
  json body = {{"prompt", "Two boxes and a cable"}, {"max_tokens", 12}, {"temperature", 0}, {"ignore_eos", true}};
  ASSERT_TRUE(c.submit("a", RequestKind::completion, body.dump(), [a](const EngineEvent& e) { (*a)(e); }).is_ok());
  ASSERT_TRUE(a->wait());
  EngineEvent done = a->final_event();
  ASSERT_EQ(done.type, EngineEvent::Type::done) << done.message;
  EXPECT_EQ(done.finish_reason, "length");
  EXPECT_EQ(done.usage.completion_tokens, 12);
  EXPECT_GT(a->events().size(), 2u);
  EXPECT_FALSE(a->text().empty());

  // A chat request with the model's template.
  auto chat = std::make_shared<EventCollector>();
  json chat_body = {
      {"messages", json::array({{{"role", "user"}, {"content", "Hi"}}})}, {"max_tokens", 4}, {"temperature", 0}};
  ASSERT_TRUE(
      c.submit("chat", RequestKind::chat, chat_body.dump(), [chat](const EngineEvent& e) { (*chat)(e); }).is_ok());
  ASSERT_TRUE(chat->wait());
  EXPECT_EQ(chat->final_event().type, EngineEvent::Type::done) << chat->final_event().message;

  // Cancel while streaming.
  auto b = std::make_shared<EventCollector>();
  json long_body = {{"prompt", "A long story"}, {"max_tokens", 200}, {"temperature", 0}, {"ignore_eos", true}};
  ASSERT_TRUE(c.submit("b", RequestKind::completion, long_body.dump(), [b](const EngineEvent& e) { (*b)(e); }).is_ok());
  ASSERT_TRUE(b->wait_first_delta());
  ASSERT_TRUE(c.cancel("b").is_ok());
  ASSERT_TRUE(b->wait());
  EXPECT_EQ(b->final_event().type, EngineEvent::Type::error);
  EXPECT_EQ(b->final_event().code, StatusCode::cancelled);

  // Malformed lines get an error event and the engine keeps running.
  auto orphan = std::make_shared<EventCollector>();
  c.on_orphan_error([orphan](const EngineEvent& e) { (*orphan)(e); });
  ASSERT_TRUE(c.send_raw("this is not json").is_ok());
  ASSERT_TRUE(orphan->wait(30000));
  EXPECT_EQ(orphan->final_event().code, StatusCode::invalid_argument);
  EXPECT_NE(orphan->final_event().message.find("not valid JSON"), std::string::npos);

  // An invalid request is an error event that names the field.
  auto bad = std::make_shared<EventCollector>();
  json bad_body = {{"prompt", "x"}, {"top_p", 2}};
  ASSERT_TRUE(
      c.submit("bad", RequestKind::completion, bad_body.dump(), [bad](const EngineEvent& e) { (*bad)(e); }).is_ok());
  ASSERT_TRUE(bad->wait(30000));
  EXPECT_EQ(bad->final_event().code, StatusCode::invalid_argument);
  EXPECT_NE(bad->final_event().message.find("top_p must be a number in [0, 1], got 2"), std::string::npos)
      << bad->final_event().message;

  st = c.status(5000);
  ASSERT_TRUE(st.is_ok());
  EXPECT_EQ(st->state, EngineState::ready);
  EXPECT_EQ(st->slots_busy, 0);
  EXPECT_TRUE(engine.running());
  {
    std::lock_guard<std::mutex> lock(m);
    EXPECT_FALSE(pushed.empty());
  }

  // A second client works at the same time and may reuse ids of the first.
  auto second = EngineClient::connect(socket, 5000);
  ASSERT_TRUE(second.is_ok());
  auto again = std::make_shared<EventCollector>();
  ASSERT_TRUE(second.value()
                  ->submit("a", RequestKind::completion, body.dump(), [again](const EngineEvent& e) { (*again)(e); })
                  .is_ok());
  ASSERT_TRUE(again->wait());
  EXPECT_EQ(again->text(), a->text());  // greedy: the same text

  // SIGTERM: the engine exits cleanly and removes its socket.
  ASSERT_TRUE(engine.signal(SIGTERM));
  EXPECT_EQ(engine.wait(30000), 0);
  EXPECT_FALSE(std::filesystem::exists(socket));
}

TEST(EngineServer, LoadFailureIsReportedInStatusAndSubmitsAreRefused) {
  ScratchDir dir;
  const std::string model = dir.file("broken.gguf"), socket = short_socket_path();
  tandem::testing::write_file(model, "GGUF not really");
  ChildProcess engine({TANDEM_BINARY, "engine", "--model", model, "--socket", socket}, dir.file("engine.log"));
  auto client = EngineClient::connect(socket, 30000);
  ASSERT_TRUE(client.is_ok()) << client.status().to_string();
  ASSERT_TRUE(wait_for_state(*client.value(), EngineState::failed, 30000));
  auto st = client.value()->status(5000);
  ASSERT_TRUE(st.is_ok());
  EXPECT_NE(st->error.find("broken.gguf"), std::string::npos) << st->error;
  auto c = std::make_shared<EventCollector>();
  ASSERT_TRUE(client.value()
                  ->submit("x", RequestKind::completion, R"({"prompt":"a"})", [c](const EngineEvent& e) { (*c)(e); })
                  .is_ok());
  ASSERT_TRUE(c->wait(30000));
  EXPECT_EQ(c->final_event().code, StatusCode::unavailable);
  EXPECT_NE(c->final_event().message.find("failed to load"), std::string::npos);
}

TEST(SchedulerSplit, ThroughRpcServersGivesTheTokensOfOneProcess) {
  ScratchDir dir;
  const std::string model = dir.file("tiny.gguf");
  ASSERT_TRUE(synth::write_model(synth::preset("tiny").value(), model, {}).is_ok());
  const std::vector<json> bodies = {
      {{"prompt", "Two desktop boxes joined by one cable"},
       {"max_tokens", 16},
       {"temperature", 0},
       {"ignore_eos", true},
       {"return_tokens", true}},
      {{"prompt", "A second, longer request that runs at the same time as the first"},
       {"max_tokens", 12},
       {"temperature", 0},
       {"ignore_eos", true},
       {"return_tokens", true}},
  };
  auto run_all = [&](const Placement& placement) {
    LoadOptions lo;
    lo.model = model;
    lo.placement = placement;
    auto m = load_model(lo);
    EXPECT_TRUE(m.is_ok()) << m.status().to_string();
    std::vector<std::vector<int32_t>> tokens;
    if (!m.is_ok()) return tokens;
    SchedulerOptions o;
    o.parallel = 2;
    o.context = 128;
    o.threads = 1;
    o.max_prompt_chunk = 32;
    auto s = Scheduler::create(m.value().get(), o);
    EXPECT_TRUE(s.is_ok()) << s.status().to_string();
    if (!s.is_ok()) return tokens;
    // Both at once: they share batches, and still get the tokens of one process.
    std::vector<std::shared_ptr<EventCollector>> cs;
    for (size_t i = 0; i < bodies.size(); ++i) {
      auto c = std::make_shared<EventCollector>();
      EXPECT_TRUE(s.value()
                      ->submit(std::to_string(i), RequestKind::completion, bodies[i].dump(),
                               [c](const EngineEvent& e) { (*c)(e); })
                      .is_ok());
      cs.push_back(c);
    }
    for (auto& c : cs) {
      EXPECT_TRUE(c->wait());
      tokens.push_back(c->final_event().tokens);
    }
    return tokens;
  };
  Placement one;
  one.cpu_weight_repack = false;  // the RPC server's CPU backend never repacks
  const auto alone = run_all(one);
  ASSERT_EQ(alone.size(), 2u);
  EXPECT_EQ(alone[0].size(), 16u);

  const int p1 = tandem::testing::free_port(), p2 = tandem::testing::free_port();
  ChildProcess s1({TANDEM_LLAMA_RPC_SERVER_EXE, "-H", "127.0.0.1", "-p", std::to_string(p1)}, dir.file("rpc1.log"));
  ChildProcess s2({TANDEM_LLAMA_RPC_SERVER_EXE, "-H", "127.0.0.1", "-p", std::to_string(p2)}, dir.file("rpc2.log"));
  ASSERT_TRUE(tandem::testing::wait_for_port(p1, 10000));
  ASSERT_TRUE(tandem::testing::wait_for_port(p2, 10000));
  Placement split;
  split.rpc_servers = {"127.0.0.1:" + std::to_string(p1), "127.0.0.1:" + std::to_string(p2)};
  split.cpu_layers = 1;
  split.device_layers = {2, 1};
  split.cpu_weight_repack = false;  // layer 0 stays here: the same kernels as the reference
  EXPECT_EQ(run_all(split), alone);
}

// tokenize / detokenize / count answered by the loaded model's tokenizer, and logprobs of the
// tokens a greedy completion picks.
TEST(EngineServer, TokenizeDetokenizeCountAndLogprobsOverTheSocket) {
  ScratchDir dir;
  const std::string model = dir.file("tiny.gguf"), socket = short_socket_path();
  ASSERT_TRUE(synth::write_model(synth::preset("tiny").value(), model, {}).is_ok());
  ChildProcess engine({TANDEM_BINARY, "engine", "--model", model, "--socket", socket, "--context", "512", "-t", "1"},
                      dir.file("engine.log"));
  auto client = EngineClient::connect(socket, 30000);
  ASSERT_TRUE(client.is_ok()) << client.status().to_string();
  EngineClient& c = *client.value();
  ASSERT_TRUE(wait_for_state(c, EngineState::ready, 60000));

  EngineRequest t;
  t.op = EngineRequest::Op::tokenize;
  t.content = "Two boxes, one cable";
  auto tokens = c.query(t, 5000);
  ASSERT_TRUE(tokens.is_ok()) << tokens.status().to_string();
  ASSERT_EQ(tokens->type, EngineEvent::Type::result);
  ASSERT_GT(tokens->tokens.size(), 2u);
  ASSERT_EQ(tokens->pieces.size(), tokens->tokens.size());
  std::string joined;
  for (const auto& p : tokens->pieces) joined += p;
  EXPECT_EQ(joined, t.content);
  EngineRequest d;
  d.op = EngineRequest::Op::detokenize;
  d.tokens = tokens->tokens;
  auto text = c.query(d, 5000);
  ASSERT_TRUE(text.is_ok()) << text.status().to_string();
  EXPECT_EQ(text->content, t.content);
  d.tokens = {-1};
  auto bad = c.query(d, 5000);
  ASSERT_FALSE(bad.is_ok());
  EXPECT_NE(bad.status().message().find("tokens[0] = -1"), std::string::npos) << bad.status().message();

  // count: the chat template's rendering, more than the bare text.
  EngineRequest n;
  n.op = EngineRequest::Op::count;
  n.kind = RequestKind::chat;
  n.body = json{{"messages", {{{"role", "user"}, {"content", t.content}}}}}.dump();
  auto counted = c.query(n, 5000);
  ASSERT_TRUE(counted.is_ok()) << counted.status().to_string();
  EXPECT_GT(counted->count, static_cast<int>(tokens->tokens.size()));
  // ...and the prompt_tokens of the same request when generated.
  auto gen = std::make_shared<EventCollector>();
  json chat_body = json::parse(n.body);
  chat_body["max_tokens"] = 1;
  ASSERT_TRUE(c.submit("g", RequestKind::chat, chat_body.dump(), [gen](const EngineEvent& e) { (*gen)(e); }).is_ok());
  ASSERT_TRUE(gen->wait());
  EXPECT_EQ(gen->final_event().usage.prompt_tokens, counted->count);

  // logprobs: one entry per generated token, the greedy pick is the most likely, top sorted.
  auto a = std::make_shared<EventCollector>();
  json body = {{"prompt", "Two boxes and a cable"},
               {"max_tokens", 6},
               {"temperature", 0},
               {"ignore_eos", true},
               {"logprobs", 3},
               {"return_tokens", true}};
  ASSERT_TRUE(c.submit("lp", RequestKind::completion, body.dump(), [a](const EngineEvent& e) { (*a)(e); }).is_ok());
  ASSERT_TRUE(a->wait());
  ASSERT_EQ(a->final_event().type, EngineEvent::Type::done) << a->final_event().message;
  std::vector<TokenLogprob> lps;
  for (const auto& e : a->events()) lps.insert(lps.end(), e.logprobs.begin(), e.logprobs.end());
  ASSERT_EQ(lps.size(), 6u);
  const std::vector<int32_t>& ids = a->final_event().tokens;
  ASSERT_EQ(ids.size(), 6u);
  for (size_t i = 0; i < lps.size(); ++i) {
    EXPECT_EQ(lps[i].token.id, ids[i]);
    ASSERT_EQ(lps[i].top.size(), 3u);
    EXPECT_EQ(lps[i].top[0].id, ids[i]) << "greedy picks the most likely token";
    EXPECT_LE(lps[i].token.logprob, 0.0f);
    EXPECT_GE(lps[i].top[0].logprob, lps[i].top[1].logprob);
    EXPECT_GE(lps[i].top[1].logprob, lps[i].top[2].logprob);
  }
  // Without logprobs, none.
  auto plain = std::make_shared<EventCollector>();
  body.erase("logprobs");
  ASSERT_TRUE(
      c.submit("p", RequestKind::completion, body.dump(), [plain](const EngineEvent& e) { (*plain)(e); }).is_ok());
  ASSERT_TRUE(plain->wait());
  for (const auto& e : plain->events()) EXPECT_TRUE(e.logprobs.empty());
}

}  // namespace
}  // namespace tandem::engine
