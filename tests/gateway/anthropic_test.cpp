// The Anthropic Messages API: request conversion, the Message, the stream's event sequence and
// the errors, through a real ApiServer over the scripted backend.
#include "gateway/anthropic.h"

#include "server_fixture.h"

namespace tandem::gateway {
namespace {

using nlohmann::json;
using testing::ServerTest;

json claude_code_body() {
  // The shape Claude Code sends (captured), cut down.
  return {{"model", "tiny"},
          {"max_tokens", 32000},
          {"stream", false},
          {"system",
           {{{"type", "text"}, {"text", "You are Claude Code."}, {"cache_control", {{"type", "ephemeral"}}}},
            {{"type", "text"}, {"text", "Be brief."}}}},
          {"messages", {{{"role", "user"}, {"content", {{{"type", "text"}, {"text", "list files"}}}}}}},
          {"tools",
           {{{"name", "Bash"},
             {"description", "Run a command"},
             {"input_schema", {{"type", "object"}, {"properties", {{"command", {{"type", "string"}}}}}}}},
            {{"type", "web_search_20250305"}, {"name", "web_search"}, {"max_uses", 5}}}},
          {"thinking", {{"type", "adaptive"}}},
          {"metadata", {{"user_id", "u"}}},
          {"context_management", {{"edits", json::array()}}},
          {"output_config", {{"effort", "high"}}}};
}

TEST(AnthropicConvert, SystemBlocksToolsAndUnknownFields) {
  auto r = anthropic::to_openai(claude_code_body(), "tiny");
  ASSERT_TRUE(r.is_ok()) << r.status().to_string();
  const json& b = r.value();
  EXPECT_EQ(b["model"], "tiny");
  EXPECT_EQ(b["max_tokens"], 32000);  // the engine clamps it to the context; never refused
  ASSERT_EQ(b["messages"].size(), 2u);
  // System blocks are joined as they are and text blocks stay parts, as llama-server passes them.
  EXPECT_EQ(b["messages"][0], (json{{"role", "system"}, {"content", "You are Claude Code.Be brief."}}));
  EXPECT_EQ(b["messages"][1],
            (json{{"role", "user"}, {"content", json::array({{{"type", "text"}, {"text", "list files"}}})}}));
  // The server tool is left out; the client tool becomes a function.
  ASSERT_EQ(b["tools"].size(), 1u);
  EXPECT_EQ(b["tools"][0]["type"], "function");
  EXPECT_EQ(b["tools"][0]["function"]["name"], "Bash");
  EXPECT_EQ(b["tools"][0]["function"]["parameters"]["properties"]["command"]["type"], "string");
  EXPECT_FALSE(b.contains("context_management"));
  EXPECT_FALSE(b.contains("metadata"));
}

TEST(AnthropicConvert, ToolUseAndToolResultTurnsBecomeToolCallsAndToolMessages) {
  json body = {
      {"model", "tiny"},
      {"max_tokens", 10},
      {"messages",
       {{{"role", "user"}, {"content", "weather?"}},
        {{"role", "assistant"},
         {"content",
          {{{"type", "thinking"}, {"thinking", "use the tool"}, {"signature", "x"}},
           {{"type", "text"}, {"text", "Checking."}},
           {{"type", "tool_use"}, {"id", "toolu_1"}, {"name", "get_weather"}, {"input", {{"city", "Paris"}}}}}}},
        {{"role", "user"},
         {"content",
          {{{"type", "tool_result"}, {"tool_use_id", "toolu_1"}, {"content", {{{"type", "text"}, {"text", "sunny"}}}}},
           {{"type", "text"}, {"text", "and tomorrow?"}}}}}}},
      {"stop_sequences", {"END"}},
      {"temperature", 0.5},
      {"top_k", 5},
      {"tool_choice", {{"type", "tool"}, {"name", "get_weather"}}},
      {"tools",
       {{{"name", "get_weather"}, {"input_schema", {{"type", "object"}}}},
        {{"name", "other"}, {"input_schema", {{"type", "object"}}}}}},
      {"thinking", {{"type", "disabled"}}}};
  auto r = anthropic::to_openai(body, "tiny");
  ASSERT_TRUE(r.is_ok()) << r.status().to_string();
  const json& m = r.value()["messages"];
  ASSERT_EQ(m.size(), 4u) << m.dump();
  EXPECT_EQ(m[1]["role"], "assistant");
  EXPECT_EQ(m[1]["content"], "Checking.");
  EXPECT_EQ(m[1]["reasoning_content"], "use the tool");
  EXPECT_EQ(m[1]["tool_calls"][0]["id"], "toolu_1");
  EXPECT_EQ(m[1]["tool_calls"][0]["function"]["name"], "get_weather");
  EXPECT_EQ(json::parse(m[1]["tool_calls"][0]["function"]["arguments"].get<std::string>()), (json{{"city", "Paris"}}));
  EXPECT_EQ(m[2], (json{{"role", "tool"}, {"tool_call_id", "toolu_1"}, {"content", "sunny"}}));
  EXPECT_EQ(m[3], (json{{"role", "user"}, {"content", json::array({{{"type", "text"}, {"text", "and tomorrow?"}}})}}));
  EXPECT_EQ(r.value()["stop"], json::array({"END"}));
  EXPECT_EQ(r.value()["temperature"], 0.5);
  EXPECT_EQ(r.value()["top_k"], 5);
  // tool_choice {type: tool} names the tool for the engine's grammar; every tool stays in the
  // prompt, so the conversation keeps its prefix.
  EXPECT_EQ(r.value()["tool_choice"], (json{{"type", "function"}, {"function", {{"name", "get_weather"}}}}));
  ASSERT_EQ(r.value()["tools"].size(), 2u);
  EXPECT_EQ(r.value()["chat_template_kwargs"]["enable_thinking"], false);
}

TEST(AnthropicConvert, ErrorsNameTheField) {
  json body = {
      {"model", "tiny"}, {"max_tokens", 5}, {"messages", {{{"role", "user"}, {"content", {{{"type", "image"}}}}}}}};
  auto r = anthropic::to_openai(body, "tiny");
  ASSERT_FALSE(r.is_ok());
  EXPECT_NE(r.status().message().find("messages[0].content[0].type"), std::string::npos) << r.status().message();
  body = {{"model", "claude-x"}, {"max_tokens", 5}, {"messages", {{{"role", "user"}, {"content", "hi"}}}}};
  EXPECT_EQ(anthropic::to_openai(body, "tiny").status().code(), StatusCode::not_found);
  body = {{"max_tokens", 5}, {"messages", {{{"role", "tool"}, {"content", "hi"}}}}};
  EXPECT_NE(anthropic::to_openai(body, "tiny").status().message().find("messages[0].role"), std::string::npos);
  body = {{"max_tokens", 5}, {"messages", {{{"role", "system"}, {"content", {{{"type", "image"}}}}}}}};
  EXPECT_NE(anthropic::to_openai(body, "tiny").status().message().find("messages[0].content[0].type"),
            std::string::npos);
  body = {{"max_tokens", 5},
          {"messages", {{{"role", "user"}, {"content", "hi"}}}},
          {"tools", {{{"name", "a"}, {"input_schema", {{"type", "object"}}}}}},
          {"tool_choice", {{"type", "tool"}, {"name", "b"}}}};
  EXPECT_NE(anthropic::to_openai(body, "tiny").status().message().find("tool_choice.name"), std::string::npos);
  body = {{"max_tokens", 5},
          {"system", {{{"type", "text"}, {"text", "ok"}}, {{"type", "image"}}}},
          {"messages", {{{"role", "user"}, {"content", "hi"}}}}};
  const std::string m = anthropic::to_openai(body, "tiny").status().message();
  EXPECT_EQ(m.rfind("system[1]: ", 0), 0u) << m;
  // No model: the one served.
  body = {{"max_tokens", 5}, {"messages", {{{"role", "user"}, {"content", "hi"}}}}};
  EXPECT_EQ(anthropic::to_openai(body, "tiny").value()["model"], "tiny");
}

// Claude Code sends system turns inside `messages` (its mid-conversation-system beta): each stays
// where it stands, so that the conversation's prefix never changes from one turn to the next.
TEST(AnthropicConvert, SystemTurnsStayWhereTheyStand) {
  json body = {{"max_tokens", 5},
               {"system", "top"},
               {"messages",
                {{{"role", "user"}, {"content", "one"}},
                 {{"role", "system"},
                  {"content", {{{"type", "text"}, {"text", "env"}, {"cache_control", {{"type", "ephemeral"}}}}}}},
                 {{"role", "assistant"}, {"content", "two"}},
                 {{"role", "system"}, {"content", "reminder"}},
                 {{"role", "user"}, {"content", "three"}}}}};
  auto r = anthropic::to_openai(body, "tiny");
  ASSERT_TRUE(r.is_ok()) << r.status().to_string();
  std::vector<std::string> roles;
  for (const json& m : r.value()["messages"]) roles.push_back(m["role"]);
  EXPECT_EQ(roles, (std::vector<std::string>{"system", "user", "system", "assistant", "system", "user"}));
  EXPECT_EQ(r.value()["messages"][2]["content"], json::array({{{"type", "text"}, {"text", "env"}}}));
  EXPECT_EQ(r.value()["messages"][4]["content"], "reminder");
}

// The billing line Claude Code puts first in its system prompt carries a stamp that changes with
// every request; it is evened out (as llama-server does) so that two turns share their prefix.
TEST(AnthropicConvert, TheBillingStampDoesNotChangeThePrompt) {
  auto system_of = [](const std::string& stamp) {
    json body = {
        {"max_tokens", 5},
        {"system",
         {{{"type", "text"},
           {"text", "x-anthropic-billing-header: cc_version=2.1.332.0b8; cc_entrypoint=cli; cch=" + stamp + ";"}},
          {{"type", "text"}, {"text", "You are Claude Code."}}}},
        {"messages", {{{"role", "user"}, {"content", "hi"}}}}};
    return anthropic::to_openai(body, "tiny").value()["messages"][0]["content"].get<std::string>();
  };
  EXPECT_EQ(system_of("a5145"), system_of("0c3e9"));
  EXPECT_EQ(system_of("a5145"),
            "x-anthropic-billing-header: cc_version=2.1.332.0b8; cc_entrypoint=cli; cch=fffff;You are Claude Code.");
  // Text that only looks like it is left alone.
  json body = {
      {"max_tokens", 5}, {"system", "say cch=a5145; please"}, {"messages", {{{"role", "user"}, {"content", "hi"}}}}};
  EXPECT_EQ(anthropic::to_openai(body, "tiny").value()["messages"][0]["content"], "say cch=a5145; please");
}

class MessagesTest : public ServerTest {};

// Anthropic's usage counts the uncached input apart: input + cache read + cache creation is the
// prompt, in message_start (before the first token) as in the final usage.
TEST_F(MessagesTest, UsageCountsTheUncachedInputApartFromTheCacheReadOnes) {
  backend_.cached_tokens = 5;
  json body = {{"model", "tiny"}, {"max_tokens", 8}, {"messages", {{{"role", "user"}, {"content", "hi"}}}}};
  auto r = post("/v1/messages", body);
  ASSERT_TRUE(r && r->status == 200) << (r ? r->body : "no answer");
  const json u = json::parse(r->body)["usage"];
  EXPECT_EQ(u["input_tokens"], 2);
  EXPECT_EQ(u["cache_read_input_tokens"], 5);
  EXPECT_EQ(u["cache_creation_input_tokens"], 0);
  body["stream"] = true;
  r = post("/v1/messages", body);
  ASSERT_TRUE(r && r->status == 200);
  auto events = parse_sse(r->body);
  ASSERT_FALSE(events.empty());
  EXPECT_EQ(events[0].event, "message_start") << r->body;
  const json start = events[0].data["message"]["usage"];
  EXPECT_EQ(start["input_tokens"], 2);
  EXPECT_EQ(start["cache_read_input_tokens"], 5);
  const json end = events[events.size() - 2].data["usage"];
  EXPECT_EQ(end["input_tokens"], 2);
  EXPECT_EQ(end["cache_read_input_tokens"], 5);
}

TEST_F(MessagesTest, AMessageWithThinkingTextAndAToolUse) {
  backend_.script = {reasoning("I should "), reasoning("call it."), text("Let me check."),
                     tool(0, "call_1", "get_weather", "{\"city\":"), tool(0, "", "", "\"Paris\"}")};
  backend_.finish_reason = "tool_calls";
  auto r = post("/v1/messages?beta=true", claude_code_body(),
                {{"x-api-key", key_},
                 {"anthropic-version", "2023-06-01"},
                 {"anthropic-beta", "claude-code-20250219,interleaved-thinking-2025-05-14"}});
  ASSERT_TRUE(r);
  ASSERT_EQ(r->status, 200) << r->body;
  json m = json::parse(r->body);
  EXPECT_EQ(m["type"], "message");
  EXPECT_EQ(m["role"], "assistant");
  EXPECT_EQ(m["model"], "tiny");
  EXPECT_EQ(m["id"].get<std::string>().rfind("msg_", 0), 0u);
  ASSERT_EQ(m["content"].size(), 3u) << m.dump();
  EXPECT_EQ(m["content"][0]["type"], "thinking");
  EXPECT_EQ(m["content"][0]["thinking"], "I should call it.");
  EXPECT_EQ(m["content"][1], (json{{"type", "text"}, {"text", "Let me check."}}));
  EXPECT_EQ(m["content"][2],
            (json{{"type", "tool_use"}, {"id", "call_1"}, {"name", "get_weather"}, {"input", {{"city", "Paris"}}}}));
  EXPECT_EQ(m["stop_reason"], "tool_use");
  EXPECT_EQ(m["stop_sequence"], nullptr);
  EXPECT_EQ(m["usage"]["input_tokens"], 7);
  EXPECT_EQ(m["usage"]["output_tokens"], 5);
  // What reached the backend is the converted body.
  std::lock_guard<std::mutex> lock(backend_.mutex_);
  EXPECT_EQ(backend_.last_body["messages"][0]["role"], "system");
}

TEST_F(MessagesTest, StopReasonsMaxTokensAndStopSequence) {
  json body = {{"model", "tiny"}, {"max_tokens", 4}, {"messages", {{{"role", "user"}, {"content", "hi"}}}}};
  auto r = post("/v1/messages", body);
  ASSERT_EQ(r->status, 200) << r->body;
  EXPECT_EQ(json::parse(r->body)["stop_reason"], "max_tokens");  // the fake ends with "length"
  EXPECT_EQ(json::parse(r->body)["content"][0]["text"], "Hello, world!");
}

TEST_F(MessagesTest, TheStreamHasTheRealEventSequence) {
  backend_.script = {reasoning("hmm"), text("Hi"), text(" there"), tool(0, "call_9", "Bash", "{\"command\""),
                     tool(0, "", "", ":\"ls\"}")};
  backend_.finish_reason = "tool_calls";
  json body = claude_code_body();
  body["stream"] = true;
  auto r = post("/v1/messages?beta=true", body);
  ASSERT_TRUE(r);
  ASSERT_EQ(r->status, 200) << r->body;
  EXPECT_EQ(r->get_header_value("Content-Type"), "text/event-stream");
  auto events = parse_sse(r->body);
  std::vector<std::string> seq;
  for (const auto& e : names(events))
    if (e != "ping") seq.push_back(e);
  const std::vector<std::string> expected = {
      "message_start",       "content_block_start", "content_block_delta", "content_block_delta", "content_block_stop",
      "content_block_start", "content_block_delta", "content_block_delta", "content_block_stop",  "content_block_start",
      "content_block_delta", "content_block_delta", "content_block_stop",  "message_delta",       "message_stop"};
  EXPECT_EQ(seq, expected) << r->body;
  std::string thinking, text_out, json_out;
  for (const auto& e : events) {
    EXPECT_EQ(e.data["type"], e.event) << "the data's type names its event";
    if (e.event != "content_block_delta") continue;
    const json& d = e.data["delta"];
    if (d["type"] == "thinking_delta") thinking += d["thinking"].get<std::string>();
    if (d["type"] == "text_delta") text_out += d["text"].get<std::string>();
    if (d["type"] == "input_json_delta") json_out += d["partial_json"].get<std::string>();
  }
  EXPECT_EQ(thinking, "hmm");
  EXPECT_EQ(text_out, "Hi there");
  EXPECT_EQ(json::parse(json_out), (json{{"command", "ls"}}));
  EXPECT_EQ(events[0].data["message"]["role"], "assistant");
  // Block indices count up from 0; the tool_use block names the tool.
  int tool_block = -1;
  for (const auto& e : events) {
    if (e.event == "content_block_start" && e.data["content_block"]["type"] == "tool_use") {
      tool_block = e.data["index"];
      EXPECT_EQ(e.data["content_block"]["name"], "Bash");
      EXPECT_EQ(e.data["content_block"]["id"], "call_9");
    }
  }
  EXPECT_EQ(tool_block, 2);
  const json& delta = events[events.size() - 2].data;
  EXPECT_EQ(delta["delta"]["stop_reason"], "tool_use");
  EXPECT_EQ(delta["usage"]["output_tokens"], 5);
  EXPECT_EQ(delta["usage"]["input_tokens"], 7);
}

TEST_F(MessagesTest, AnErrorMidStreamIsAnErrorEvent) {
  backend_.fail_midway = Status::unavailable("worker box-b lost");
  json body = {
      {"model", "tiny"}, {"max_tokens", 8}, {"stream", true}, {"messages", {{{"role", "user"}, {"content", "hi"}}}}};
  auto r = post("/v1/messages", body);
  ASSERT_EQ(r->status, 200);
  auto events = parse_sse(r->body);
  ASSERT_FALSE(events.empty());
  EXPECT_EQ(events.back().event, "error");
  EXPECT_EQ(events.back().data["type"], "error");
  EXPECT_EQ(events.back().data["error"]["type"], "overloaded_error");
  EXPECT_NE(events.back().data["error"]["message"].get<std::string>().find("box-b"), std::string::npos);
  for (const auto& e : events) EXPECT_NE(e.event, "message_stop");
}

TEST_F(MessagesTest, ErrorsAreAnthropicErrorObjectsWithTheirStatus) {
  json body = {{"model", "tiny"}, {"max_tokens", 8}, {"messages", {{{"role", "user"}, {"content", "hi"}}}}};
  auto r = post("/v1/messages", body, {{"x-api-key", "wrong"}});
  ASSERT_EQ(r->status, 401);
  EXPECT_EQ(json::parse(r->body),
            anthropic::error_object("authentication_error", json::parse(r->body)["error"]["message"]));
  // Authorization: Bearer works as well, the scheme in any case.
  EXPECT_EQ(post("/v1/messages", body, {{"Authorization", "bearer " + key_}})->status, 200);
  r = post("/v1/messages", {{"model", "tiny"}, {"messages", "nope"}});
  ASSERT_EQ(r->status, 400);
  EXPECT_EQ(json::parse(r->body)["error"]["type"], "invalid_request_error");
  r = post("/v1/messages",
           {{"model", "claude-opus-4"}, {"max_tokens", 8}, {"messages", {{{"role", "user"}, {"content", "hi"}}}}});
  ASSERT_EQ(r->status, 404);
  EXPECT_EQ(json::parse(r->body)["error"]["type"], "not_found_error");
  health_.accepting = false;
  health_.state = ServeState::loading;
  r = post("/v1/messages", body);
  ASSERT_EQ(r->status, 529);
  EXPECT_EQ(json::parse(r->body)["error"]["type"], "overloaded_error");
  EXPECT_FALSE(r->get_header_value("Retry-After").empty());
  health_.accepting = true;
  backend_.fail_first =
      Status::invalid_argument("the prompt has 600 tokens, but the context holds 512 tokens per request");
  r = post("/v1/messages", body);
  ASSERT_EQ(r->status, 400);
  EXPECT_EQ(json::parse(r->body)["error"]["message"].get<std::string>().rfind("prompt is too long", 0), 0u) << r->body;
}

TEST_F(MessagesTest, CountTokensCountsTheConvertedConversation) {
  json body = claude_code_body();
  body.erase("max_tokens");
  auto r = post("/v1/messages/count_tokens?beta=true", body);
  ASSERT_TRUE(r);
  ASSERT_EQ(r->status, 200) << r->body;
  const int n = json::parse(r->body)["input_tokens"];
  {
    std::lock_guard<std::mutex> lock(backend_.mutex_);
    // The fake counts what the converted body holds: the system text is in it.
    EXPECT_NE(backend_.last_count_body["messages"][0]["content"].get<std::string>().find("Claude Code"),
              std::string::npos);
  }
  body["messages"][0]["content"][0]["text"] = "list all the files in this folder please";
  EXPECT_GT(json::parse(post("/v1/messages/count_tokens", body)->body)["input_tokens"].get<int>(), n);
  EXPECT_EQ(post("/v1/messages/count_tokens", body, {{"x-api-key", "nope"}})->status, 401);
}

}  // namespace
}  // namespace tandem::gateway
