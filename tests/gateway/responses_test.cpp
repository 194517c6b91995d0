// The OpenAI Responses API: request conversion, the Response object, the stream's events with
// their sequence numbers, through a real ApiServer over the scripted backend.
#include "gateway/responses.h"

#include "server_fixture.h"

namespace tandem::gateway {
namespace {

using nlohmann::json;
using testing::ServerTest;

json codex_body() {
  // The shape Codex CLI sends (captured), cut down.
  return {
      {"model", "tiny"},
      {"instructions", "You are Codex."},
      {"input",
       {{{"type", "message"}, {"role", "developer"}, {"content", {{{"type", "input_text"}, {"text", "env: linux"}}}}},
        {{"type", "message"}, {"role", "user"}, {"content", {{{"type", "input_text"}, {"text", "run ls"}}}}},
        {{"type", "reasoning"}, {"summary", json::array()}, {"encrypted_content", "xx"}},
        {{"type", "function_call"}, {"call_id", "c1"}, {"name", "shell"}, {"arguments", "{\"cmd\":\"ls\"}"}},
        {{"type", "function_call_output"}, {"call_id", "c1"}, {"output", "a.txt"}}}},
      {"tools",
       {{{"type", "function"},
         {"name", "shell"},
         {"description", "Run"},
         {"parameters", {{"type", "object"}}},
         {"strict", false}},
        {{"type", "web_search"}},
        {{"type", "namespace"}, {"name", "mcp"}}}},
      {"tool_choice", "auto"},
      {"parallel_tool_calls", false},
      {"reasoning", {{"effort", "medium"}, {"summary", "auto"}}},
      {"store", false},
      {"stream", false},
      {"include", {"reasoning.encrypted_content"}},
      {"prompt_cache_key", "abc"},
      {"client_metadata", {{"x", "y"}}}};
}

TEST(ResponsesConvert, InputItemsToolsAndOptions) {
  auto r = responses::to_openai(codex_body(), "tiny");
  ASSERT_TRUE(r.is_ok()) << r.status().to_string();
  const json& m = r.value()["messages"];
  ASSERT_EQ(m.size(), 5u) << m.dump();
  EXPECT_EQ(m[0], (json{{"role", "system"}, {"content", "You are Codex."}}));
  // Messages keep their role, their place and their parts, as llama-server passes them on (llama.cpp
  // reads developer as system for every template but gpt-oss's).
  auto parts = [](const std::string& text) { return json::array({{{"type", "text"}, {"text", text}}}); };
  EXPECT_EQ(m[1], (json{{"role", "developer"}, {"content", parts("env: linux")}}));
  EXPECT_EQ(m[2], (json{{"role", "user"}, {"content", parts("run ls")}}));
  EXPECT_EQ(m[3]["role"], "assistant");
  EXPECT_EQ(m[3]["tool_calls"][0]["id"], "c1");
  EXPECT_EQ(m[3]["tool_calls"][0]["function"]["arguments"], "{\"cmd\":\"ls\"}");
  EXPECT_EQ(m[4], (json{{"role", "tool"}, {"tool_call_id", "c1"}, {"content", "a.txt"}}));
  ASSERT_EQ(r.value()["tools"].size(), 1u);  // web_search and namespace cannot run here
  EXPECT_EQ(r.value()["tools"][0]["function"]["name"], "shell");
  EXPECT_EQ(r.value()["parallel_tool_calls"], false);
  EXPECT_EQ(r.value()["reasoning_effort"], "medium");
  EXPECT_FALSE(r.value().contains("prompt_cache_key"));
}

// A named function in tool_choice becomes OpenAI's named form for the engine's grammar; every
// tool stays (the prompt keeps its prefix). A name no tool has is refused naming the field.
TEST(ResponsesConvert, ANamedToolChoiceKeepsEveryToolAndNamesTheOne) {
  json body = codex_body();
  body["tools"].push_back({{"type", "function"}, {"name", "apply_patch"}, {"parameters", {{"type", "object"}}}});
  body["tool_choice"] = {{"type", "function"}, {"name", "apply_patch"}};
  auto r = responses::to_openai(body, "tiny");
  ASSERT_TRUE(r.is_ok()) << r.status().to_string();
  EXPECT_EQ(r.value()["tool_choice"], (json{{"type", "function"}, {"function", {{"name", "apply_patch"}}}}));
  EXPECT_EQ(r.value()["tools"].size(), 2u);
  body["tool_choice"] = {{"type", "function"}, {"name", "nope"}};
  EXPECT_NE(responses::to_openai(body, "tiny").status().message().find("tool_choice.name"), std::string::npos);
}

TEST(ResponsesConvert, TextFormatMaxOutputTokensAndTheRefusals) {
  json body = {{"input", "hi"},
               {"max_output_tokens", 20},
               {"text",
                {{"format",
                  {{"type", "json_schema"},
                   {"name", "person"},
                   {"strict", true},
                   {"schema", {{"type", "object"}, {"properties", {{"name", {{"type", "string"}}}}}}}}}}}};
  auto r = responses::to_openai(body, "tiny");
  ASSERT_TRUE(r.is_ok()) << r.status().to_string();
  EXPECT_EQ(r.value()["model"], "tiny");
  EXPECT_EQ(r.value()["messages"], (json::array({{{"role", "user"}, {"content", "hi"}}})));
  EXPECT_EQ(r.value()["max_tokens"], 20);
  EXPECT_EQ(r.value()["response_format"]["type"], "json_schema");
  EXPECT_EQ(r.value()["response_format"]["json_schema"]["schema"]["properties"]["name"]["type"], "string");
  body["text"] = {{"format", {{"type", "json_object"}}}};
  EXPECT_EQ(responses::to_openai(body, "tiny").value()["response_format"], (json{{"type", "json_object"}}));
  body["previous_response_id"] = "resp_1";
  auto refused = responses::to_openai(body, "tiny");
  ASSERT_FALSE(refused.is_ok());
  EXPECT_NE(refused.status().message().find("does not store responses; send the whole conversation as input"),
            std::string::npos);
  EXPECT_NE(
      responses::to_openai(
          {{"input", {{{"type", "message"}, {"role", "user"}, {"content", {{{"type", "input_image"}}}}}}}}, "tiny")
          .status()
          .message()
          .find("input[0].content[0].type"),
      std::string::npos);
}

class ResponsesTest : public ServerTest {};

TEST_F(ResponsesTest, AResponseWithReasoningTextAndAFunctionCall) {
  backend_.script = {reasoning("think"), text("Running it."), tool(0, "call_7", "shell", "{\"cmd\":"),
                     tool(0, "", "", "\"ls\"}")};
  backend_.finish_reason = "tool_calls";
  auto r = post("/v1/responses", codex_body(),
                {{"Authorization", "Bearer " + key_}, {"OpenAI-Beta", "responses=experimental"}});
  ASSERT_TRUE(r);
  ASSERT_EQ(r->status, 200) << r->body;
  json j = json::parse(r->body);
  EXPECT_EQ(j["object"], "response");
  EXPECT_EQ(j["status"], "completed");
  EXPECT_EQ(j["id"].get<std::string>().rfind("resp_", 0), 0u);
  EXPECT_EQ(j["store"], false);
  ASSERT_EQ(j["output"].size(), 3u) << j.dump();
  EXPECT_EQ(j["output"][0]["type"], "reasoning");
  EXPECT_EQ(j["output"][0]["content"][0]["text"], "think");
  EXPECT_EQ(j["output"][0]["summary"][0]["text"], "think");  // summary "auto" was asked for
  EXPECT_EQ(j["output"][1]["type"], "message");
  EXPECT_EQ(j["output"][1]["content"][0], (json{{"type", "output_text"},
                                                {"text", "Running it."},
                                                {"annotations", json::array()},
                                                {"logprobs", json::array()}}));
  EXPECT_EQ(j["output"][2]["type"], "function_call");
  EXPECT_EQ(j["output"][2]["call_id"], "call_7");
  EXPECT_EQ(j["output"][2]["name"], "shell");
  EXPECT_EQ(j["output"][2]["arguments"], "{\"cmd\":\"ls\"}");
  EXPECT_EQ(j["output_text"], "Running it.");
  EXPECT_EQ(j["usage"]["input_tokens"], 7);
  EXPECT_EQ(j["usage"]["output_tokens"], 4);
  EXPECT_EQ(j["usage"]["total_tokens"], 11);
  EXPECT_TRUE(j["usage"]["input_tokens_details"].contains("cached_tokens"));
}

TEST_F(ResponsesTest, MaxOutputTokensMakesItIncomplete) {
  auto r = post("/v1/responses", {{"input", "hi"}, {"max_output_tokens", 4}});
  ASSERT_EQ(r->status, 200) << r->body;
  json j = json::parse(r->body);
  EXPECT_EQ(j["status"], "incomplete");  // the fake ends with "length"
  EXPECT_EQ(j["incomplete_details"]["reason"], "max_output_tokens");
  EXPECT_EQ(j["output_text"], "Hello, world!");
}

TEST_F(ResponsesTest, TheStreamHasItsEventsInOrderWithSequenceNumbers) {
  backend_.script = {reasoning("r"), text("A"), text("B"), tool(0, "call_1", "shell", "{}")};
  backend_.finish_reason = "tool_calls";
  json body = codex_body();
  body["stream"] = true;
  auto r = post("/v1/responses", body);
  ASSERT_EQ(r->status, 200) << r->body;
  auto events = parse_sse(r->body);
  std::vector<std::string> seq = names(events);
  const std::vector<std::string> expected = {"response.created",
                                             "response.in_progress",
                                             "response.output_item.added",
                                             "response.content_part.added",
                                             "response.reasoning_text.delta",
                                             "response.reasoning_text.done",
                                             "response.content_part.done",
                                             "response.output_item.done",
                                             "response.output_item.added",
                                             "response.content_part.added",
                                             "response.output_text.delta",
                                             "response.output_text.delta",
                                             "response.output_text.done",
                                             "response.content_part.done",
                                             "response.output_item.done",
                                             "response.output_item.added",
                                             "response.function_call_arguments.delta",
                                             "response.function_call_arguments.done",
                                             "response.output_item.done",
                                             "response.completed"};
  EXPECT_EQ(seq, expected) << r->body;
  for (size_t i = 0; i < events.size(); ++i) {
    EXPECT_EQ(events[i].data["type"], events[i].event);
    EXPECT_EQ(events[i].data["sequence_number"], static_cast<int>(i));
  }
  EXPECT_EQ(events[12].data["text"], "AB");
  EXPECT_EQ(events[12].data["output_index"], 1);
  const json& done = events.back().data["response"];
  EXPECT_EQ(done["status"], "completed");
  ASSERT_EQ(done["output"].size(), 3u);
  EXPECT_EQ(done["output"][1]["content"][0]["text"], "AB");
  EXPECT_EQ(done["output"][2]["arguments"], "{}");
  EXPECT_EQ(done["usage"]["output_tokens"], 4);
}

TEST_F(ResponsesTest, AFailureMidStreamIsResponseFailed) {
  backend_.fail_midway = Status::unavailable("worker w1 lost");
  auto r = post("/v1/responses", {{"input", "hi"}, {"stream", true}});
  ASSERT_EQ(r->status, 200);
  auto events = parse_sse(r->body);
  ASSERT_FALSE(events.empty());
  EXPECT_EQ(events.back().event, "response.failed");
  EXPECT_EQ(events.back().data["response"]["status"], "failed");
  EXPECT_NE(events.back().data["response"]["error"]["message"].get<std::string>().find("w1"), std::string::npos);
}

TEST_F(ResponsesTest, PreviousResponseIdIsAClear400) {
  auto r = post("/v1/responses", {{"input", "hi"}, {"previous_response_id", "resp_x"}});
  ASSERT_EQ(r->status, 400);
  json e = json::parse(r->body)["error"];
  EXPECT_EQ(e["type"], "invalid_request_error");
  EXPECT_EQ(e["param"], nullptr);
  EXPECT_NE(e["message"].get<std::string>().find("send the whole conversation as input"), std::string::npos);
}

}  // namespace
}  // namespace tandem::gateway
