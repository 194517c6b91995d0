// The rest of the OpenAI surface and the browser: one model, tokenize, logprobs, error codes,
// keys in other headers, CORS.
#include "server_fixture.h"

namespace tandem::gateway {
namespace {

using nlohmann::json;
using testing::ServerTest;

class ClientRoutesTest : public ServerTest {
 protected:
  httplib::Headers bearer() { return {{"Authorization", "Bearer " + key_}}; }
  json chat() { return {{"messages", {{{"role", "user"}, {"content", "hi"}}}}}; }
  static GenerationEvent with_logprobs(const std::string& t, double lp) {
    GenerationEvent e;
    e.text = t;
    e.logprobs =
        json::array({{{"token", t},
                      {"bytes", json::array()},
                      {"logprob", lp},
                      {"top_logprobs", json::array({{{"token", t}, {"bytes", json::array()}, {"logprob", lp}}})}}});
    return e;
  }
};

TEST_F(ClientRoutesTest, OneModelByIdAndRequestsWithoutAModel) {
  auto r = client_->Get("/v1/models/tiny", bearer());
  ASSERT_EQ(r->status, 200) << r->body;
  EXPECT_EQ(json::parse(r->body)["id"], "tiny");
  EXPECT_EQ(json::parse(r->body)["object"], "model");
  r = client_->Get("/v1/models/gpt-4", bearer());
  ASSERT_EQ(r->status, 404);
  EXPECT_EQ(json::parse(r->body)["error"]["code"], "model_not_found");
  EXPECT_EQ(client_->Get("/v1/models/tiny")->status, 401);
  // The listing says which model a request without `model` gets.
  EXPECT_EQ(json::parse(client_->Get("/v1/models", bearer())->body)["data"][0]["default"], true);
  r = post("/v1/chat/completions", chat(), bearer());
  ASSERT_EQ(r->status, 200) << r->body;
  EXPECT_EQ(json::parse(r->body)["model"], "tiny");
}

TEST_F(ClientRoutesTest, KeysInXApiKeyAndBearerInAnyCase) {
  EXPECT_EQ(post("/v1/chat/completions", chat(), {{"X-Api-Key", key_}})->status, 200);
  EXPECT_EQ(post("/v1/chat/completions", chat(), {{"Authorization", "BEARER " + key_}})->status, 200);
  EXPECT_EQ(post("/v1/chat/completions", chat(), {{"Authorization", "bearer " + key_}})->status, 200);
  auto r = post("/v1/chat/completions", chat(), {{"Authorization", "Basic " + key_}});
  EXPECT_EQ(r->status, 401);
  EXPECT_EQ(json::parse(r->body)["error"]["code"], "invalid_api_key");
}

TEST_F(ClientRoutesTest, TokenizeAndDetokenizeUseTheBackendsTokenizer) {
  auto r = post("/tokenize", {{"content", "Hi"}}, bearer());
  ASSERT_EQ(r->status, 200) << r->body;
  EXPECT_EQ(json::parse(r->body)["tokens"], (json::array({'H', 'i'})));  // the fake: one token per byte
  r = post("/tokenize", {{"content", "Hi"}, {"add_special", true}, {"with_pieces", true}}, bearer());
  EXPECT_EQ(json::parse(r->body)["tokens"][0], (json{{"id", 1000}, {"piece", "<s>"}}));
  r = post("/detokenize", {{"tokens", {'H', 'i'}}}, bearer());
  ASSERT_EQ(r->status, 200) << r->body;
  EXPECT_EQ(json::parse(r->body)["content"], "Hi");
  r = post("/detokenize", {{"tokens", {9999}}}, bearer());
  EXPECT_EQ(r->status, 400);
  EXPECT_NE(r->body.find("9999"), std::string::npos);
  EXPECT_EQ(post("/tokenize", {{"content", 5}}, bearer())->status, 400);
  EXPECT_EQ(post("/tokenize", {{"content", "x"}}, {{"X-Api-Key", "nope"}})->status, 401);
}

TEST_F(ClientRoutesTest, ChatLogprobsInOpenAisShapeStreamingAndNot) {
  backend_.script = {with_logprobs("Hel", -0.5), with_logprobs("lo", -1.5)};
  json body = chat();
  body["logprobs"] = true;
  body["top_logprobs"] = 1;
  auto r = post("/v1/chat/completions", body, bearer());
  ASSERT_EQ(r->status, 200) << r->body;
  const json lp = json::parse(r->body)["choices"][0]["logprobs"];
  ASSERT_EQ(lp["content"].size(), 2u) << lp.dump();
  EXPECT_EQ(lp["content"][0]["token"], "Hel");
  EXPECT_EQ(lp["content"][1]["logprob"], -1.5);
  EXPECT_EQ(lp["content"][1]["top_logprobs"][0]["token"], "lo");
  body["stream"] = true;
  auto events = parse_sse(post("/v1/chat/completions", body, bearer())->body);
  int with = 0;
  for (const auto& e : events) {
    if (e.data.is_object() && !e.data["choices"].empty() && e.data["choices"][0]["logprobs"].is_object()) ++with;
  }
  EXPECT_EQ(with, 2);
}

TEST_F(ClientRoutesTest, CompletionLogprobsInTheLegacyShapeAndTokenIdPrompts) {
  backend_.script = {with_logprobs("ab", -0.25), with_logprobs("c", -2.0)};
  auto r = post("/v1/completions", {{"prompt", {1, 2, 3}}, {"logprobs", 1}}, bearer());
  ASSERT_EQ(r->status, 200) << r->body;
  const json lp = json::parse(r->body)["choices"][0]["logprobs"];
  EXPECT_EQ(lp["tokens"], (json::array({"ab", "c"})));
  EXPECT_EQ(lp["token_logprobs"], (json::array({-0.25, -2.0})));
  EXPECT_EQ(lp["text_offset"], (json::array({0, 2})));
  EXPECT_EQ(lp["top_logprobs"][1], (json{{"c", -2.0}}));
  {
    std::lock_guard<std::mutex> lock(backend_.mutex_);
    EXPECT_EQ(backend_.last_body["prompt"], (json::array({1, 2, 3})));
  }
  EXPECT_EQ(post("/v1/completions", {{"prompt", {{1, 2}}}}, bearer())->status, 200);
  EXPECT_EQ(post("/v1/completions", {{"prompt", {1, "x"}}}, bearer())->status, 400);
}

TEST_F(ClientRoutesTest, ALongPromptIsContextLengthExceededWithItsParam) {
  backend_.fail_first =
      Status::invalid_argument("the prompt has 600 tokens, but the context holds 512 tokens per request");
  auto r = post("/v1/chat/completions", chat(), bearer());
  ASSERT_EQ(r->status, 400);
  json e = json::parse(r->body)["error"];
  EXPECT_EQ(e["code"], "context_length_exceeded");
  EXPECT_EQ(e["param"], "messages");
  r = post("/v1/completions", {{"prompt", "x"}}, bearer());
  EXPECT_EQ(json::parse(r->body)["error"]["param"], "prompt");
  // The gateway's own field errors carry their field as param.
  backend_.fail_first = Status::ok();
  r = post("/v1/chat/completions", {{"messages", {{{"role", "robot"}, {"content", "hi"}}}}}, bearer());
  EXPECT_EQ(json::parse(r->body)["error"]["param"], "messages[0].role");
}

TEST_F(ClientRoutesTest, CorsIsOffByDefault) {
  auto r = client_->Options("/v1/chat/completions",
                            {{"Origin", "https://chat.example.org"}, {"Access-Control-Request-Method", "POST"}});
  ASSERT_TRUE(r);
  EXPECT_FALSE(r->has_header("Access-Control-Allow-Origin"));
  r = post("/v1/chat/completions", chat(),
           {{"Authorization", "Bearer " + key_}, {"Origin", "https://chat.example.org"}});
  EXPECT_EQ(r->status, 200);
  EXPECT_FALSE(r->has_header("Access-Control-Allow-Origin"));
}

TEST_F(ClientRoutesTest, CorsAnswersPreflightsAndMarksResponsesOfAllowedOriginsOnly) {
  ApiOptions o;
  o.cors_origins = {"https://chat.example.org"};
  start(o);
  auto r = client_->Options("/v1/messages",
                            {{"Origin", "https://chat.example.org"},
                             {"Access-Control-Request-Method", "POST"},
                             {"Access-Control-Request-Headers", "x-api-key, anthropic-version, content-type"}});
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 204);
  EXPECT_EQ(r->get_header_value("Access-Control-Allow-Origin"), "https://chat.example.org");
  EXPECT_NE(r->get_header_value("Access-Control-Allow-Methods").find("POST"), std::string::npos);
  for (const char* h :
       {"authorization", "x-api-key", "content-type", "anthropic-version", "anthropic-beta", "openai-beta"}) {
    EXPECT_NE(r->get_header_value("Access-Control-Allow-Headers").find(h), std::string::npos) << h;
  }
  r = post("/v1/chat/completions", chat(),
           {{"Authorization", "Bearer " + key_}, {"Origin", "https://chat.example.org"}});
  EXPECT_EQ(r->status, 200);
  EXPECT_EQ(r->get_header_value("Access-Control-Allow-Origin"), "https://chat.example.org");
  // Another origin: the preflight is refused and responses carry no allow header.
  r = client_->Options("/v1/messages", {{"Origin", "https://evil.example"}, {"Access-Control-Request-Method", "POST"}});
  EXPECT_EQ(r->status, 403);
  EXPECT_FALSE(r->has_header("Access-Control-Allow-Origin"));
  r = post("/v1/chat/completions", chat(), {{"Authorization", "Bearer " + key_}, {"Origin", "https://evil.example"}});
  EXPECT_FALSE(r->has_header("Access-Control-Allow-Origin"));
  o.cors_origins = {"*"};
  start(o);
  r = client_->Options("/v1/responses",
                       {{"Origin", "http://localhost:3000"}, {"Access-Control-Request-Method", "POST"}});
  EXPECT_EQ(r->status, 204);
  EXPECT_EQ(r->get_header_value("Access-Control-Allow-Origin"), "http://localhost:3000");
}

}  // namespace
}  // namespace tandem::gateway
