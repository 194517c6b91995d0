// What a dialect's conversion (Anthropic Messages, OpenAI Responses) must hand the chat path,
// whatever the client sent: checked by the messages_request and responses_request targets, so that
// fuzzing finds bodies the backend would refuse or misread, not only crashes. A violation aborts
// with its reason on stderr (libFuzzer keeps the input; the replay test fails on it).
#pragma once

#include <cstdio>
#include <cstdlib>
#include <string>

#include <nlohmann/json.hpp>

#include "gateway/dialect.h"
#include "gateway/openai.h"

namespace tandem::fuzz {

// The first rule `out` breaks, or "" when it is a chat body the engine can take.
inline std::string chat_body_problem(const nlohmann::json& out, const std::string& model_id) {
  using nlohmann::json;
  auto is_text = [](const json& c) {
    if (c.is_string() || c.is_null()) return true;
    if (!c.is_array()) return false;
    for (const json& p : c)
      if (!p.is_object() || p.value("type", json()) != "text" || !p.contains("text") || !p["text"].is_string())
        return false;
    return true;
  };
  if (!out.is_object()) return "not an object";
  if (out.value("model", json()) != model_id) return "model is not the served one";
  if (!out.contains("messages") || !out["messages"].is_array() || out["messages"].empty())
    return "messages is not a non-empty array";
  bool turn = false;
  for (const json& m : out["messages"]) {
    if (!m.is_object() || !m.contains("role") || !m["role"].is_string()) return "a message without a string role";
    const std::string role = m["role"];
    if (role != "system" && role != "developer" && role != "user" && role != "assistant" && role != "tool")
      return "role '" + role + "'";
    if (role != "system" && role != "developer") turn = true;
    if (!m.contains("content") || !is_text(m["content"])) return "a " + role + " message's content is not text";
    if (role == "tool" && (!m.contains("tool_call_id") || !m["tool_call_id"].is_string()))
      return "a tool message without a string tool_call_id";
    if (m.contains("tool_calls")) {
      if (role != "assistant" || !m["tool_calls"].is_array()) return "tool_calls outside an assistant message";
      for (const json& c : m["tool_calls"]) {
        if (!c.is_object() || !c.contains("id") || !c["id"].is_string() || c.value("type", json()) != "function" ||
            !c.contains("function") || !c["function"].is_object())
          return "a tool call of the wrong shape";
        const json& f = c["function"];
        if (!f.contains("name") || !f["name"].is_string() || !f.contains("arguments") || !f["arguments"].is_string())
          return "a tool call whose name or arguments is not a string";
      }
    }
  }
  if (!turn) return "only system messages";
  if (out.contains("tools")) {
    if (!out["tools"].is_array() || out["tools"].empty()) return "tools is not a non-empty array";
    for (const json& t : out["tools"]) {
      if (!t.is_object() || t.value("type", json()) != "function" || !t.contains("function") ||
          !t["function"].is_object())
        return "a tool of the wrong shape";
      const json& f = t["function"];
      if (!f.contains("name") || !f["name"].is_string()) return "a tool without a string name";
      if (!f.contains("parameters") || !f["parameters"].is_object()) return "a tool whose parameters is not an object";
    }
  }
  if (out.contains("tool_choice")) {
    const json& c = out["tool_choice"];
    if (c.is_object()) {
      // A named tool: {type: function, function: {name}}, one of the tools offered.
      const json f = c.value("function", json());
      if (c.value("type", json()) != "function" || !f.is_object() || !f.contains("name") || !f["name"].is_string())
        return "a named tool_choice of the wrong shape";
      bool offered = false;
      for (const json& t : out.value("tools", json::array())) offered = offered || t["function"]["name"] == f["name"];
      if (!offered) return "tool_choice names a tool not in tools";
    } else if (c != "auto" && c != "none" && c != "required") {
      return "tool_choice is not auto, none, required or a named function";
    }
    if (c == "required" && !out.contains("tools")) return "tool_choice required without tools";
  }
  for (const char* k : {"stream", "parallel_tool_calls"})
    if (out.contains(k) && !out[k].is_boolean()) return std::string(k) + " is not a boolean";
  if (out.contains("max_tokens") && (!out["max_tokens"].is_number_integer() || out["max_tokens"].get<int64_t>() < 1))
    return "max_tokens is not an integer >= 1";
  if (out.contains("stop")) {
    if (!out["stop"].is_array()) return "stop is not an array";
    for (const json& s : out["stop"])
      if (!s.is_string()) return "stop holds a non-string";
  }
  for (const char* k : {"chat_template_kwargs", "response_format"})
    if (out.contains(k) && !out[k].is_object()) return std::string(k) + " is not an object";
  if (out.contains("reasoning_effort") && !out["reasoning_effort"].is_string())
    return "reasoning_effort is not a string";
  // The chat door's own checks pass on it: it is what /v1/chat/completions would take.
  auto again = gateway::openai::parse_request(gateway::dump_json(out), gateway::Endpoint::chat, model_id);
  if (!again.is_ok()) return "the chat checks refuse it: " + again.status().message();
  return "";
}

inline void require_chat_body(const nlohmann::json& out, const std::string& model_id) {
  const std::string problem = chat_body_problem(out, model_id);
  if (problem.empty()) return;
  std::fprintf(stderr, "converted body breaks a rule: %s\n%s\n", problem.c_str(), gateway::dump_json(out).c_str());
  std::abort();
}

}  // namespace tandem::fuzz
