#include "gateway/anthropic.h"

#include <algorithm>
#include <set>

#include "common/log.h"
#include "gateway/openai.h"

namespace tandem::gateway::anthropic {
namespace {

using nlohmann::json;

// The fields a Messages request may carry that mean nothing here; read without a word.
const std::set<std::string> kKnown = {"model",          "messages",    "system",  "max_tokens", "stream",
                                      "stop_sequences", "temperature", "top_p",   "top_k",      "tools",
                                      "tool_choice",    "thinking",    "metadata"};

// Text of a string or of text blocks ({type: text, text}); other blocks are an error naming them.
Result<std::string> text_of(const json& content, const std::string& where) {
  if (content.is_string()) return content.get<std::string>();
  if (content.is_null()) return std::string();
  if (!content.is_array()) return field_error(where, "must be a string or an array of text blocks");
  std::string out;
  for (size_t i = 0; i < content.size(); ++i) {
    const json& b = content[i];
    const std::string at = where + "[" + std::to_string(i) + "]";
    std::string type;
    if (b.is_object()) TANDEM_RETURN_IF_ERROR(string_field(b, "type", at, &type));
    if (type != "text" || !b.contains("text") || !b["text"].is_string()) {
      return field_error(at, type.empty() || type == "text" ? "must be a text block {type: text, text}"
                                                            : "'" + type + "' blocks are not supported here");
    }
    if (!out.empty()) out += "\n";
    out += b["text"].get<std::string>();
  }
  return out;
}

// Claude Code's billing line opens its system prompt ("x-anthropic-billing-header: cc_version=...;
// cc_entrypoint=cli; cch=a5145;") and its cch stamp changes with every request: left as it is, no
// request would reuse the previous one's prefix. It is set to "fffff", as llama-server does, so
// that both render the same prompt.
std::string without_stamp(std::string text) {
  static const std::string kHeader = "x-anthropic-billing-header:";
  if (text.rfind(kHeader, 0) != 0) return text;
  const size_t at = text.find("cch=", kHeader.size());
  constexpr size_t kStamp = 5;
  if (at == std::string::npos || at + 4 + kStamp >= text.size() || text[at + 4 + kStamp] != ';') return text;
  text.replace(at + 4, kStamp, std::string(kStamp, 'f'));
  return text;
}

// The top-level `system`: a string or text blocks, joined as they are (llama-server's rendering).
Result<std::string> system_text(const json& system) {
  if (system.is_string()) return without_stamp(system.get<std::string>());
  if (!system.is_array()) return field_error("system", "must be a string or an array of text blocks");
  // Checked as text blocks (errors name system[i]), then joined as they are, each one evened out.
  TANDEM_RETURN_IF_ERROR(text_of(system, "system").status());
  std::string out;
  for (const json& block : system) out += without_stamp(block["text"].get<std::string>());
  return out;
}

// A text block as an OpenAI content part: the chat template joins a turn's parts (or takes them
// as they are), exactly as for llama-server, which passes Anthropic's blocks on the same way.
Result<json> text_part(const json& b, const std::string& at) {
  if (!b.contains("text") || !b["text"].is_string()) return field_error(at + ".text", "must be a string");
  return json{{"type", "text"}, {"text", b["text"]}};
}

// A system turn inside `messages` (Claude Code sends them mid-conversation): kept where it
// stands, never moved to the front, which would change every later turn's prefix.
Status convert_system(const json& content, const std::string& where, json& messages) {
  if (content.is_string()) {
    messages.push_back({{"role", "system"}, {"content", content}});
    return Status::ok();
  }
  if (!content.is_array()) return field_error(where, "must be a string or an array of text blocks");
  json parts = json::array();
  for (size_t i = 0; i < content.size(); ++i) {
    const std::string at = where + "[" + std::to_string(i) + "]";
    const json& b = content[i];
    std::string type;
    if (b.is_object()) TANDEM_RETURN_IF_ERROR(string_field(b, "type", at, &type));
    if (type != "text") return field_error(at + ".type", "system turns hold text blocks only; got '" + type + "'");
    auto part = text_part(b, at);
    if (!part.is_ok()) return part.status();
    parts.push_back(part.value());
  }
  messages.push_back({{"role", "system"}, {"content", parts.empty() ? json("") : parts}});
  return Status::ok();
}

Status convert_user(const json& content, const std::string& where, json& messages) {
  if (content.is_string()) {
    messages.push_back({{"role", "user"}, {"content", content}});
    return Status::ok();
  }
  if (!content.is_array()) return field_error(where, "must be a string or an array of content blocks");
  json parts = json::array();
  for (size_t i = 0; i < content.size(); ++i) {
    const json& b = content[i];
    const std::string at = where + "[" + std::to_string(i) + "]";
    if (!b.is_object()) return field_error(at, "must be a content block object");
    std::string type;
    TANDEM_RETURN_IF_ERROR(string_field(b, "type", at, &type));
    if (type == "text") {
      auto part = text_part(b, at);
      if (!part.is_ok()) return part.status();
      parts.push_back(part.value());
    } else if (type == "tool_result") {
      if (!b.contains("tool_use_id") || !b["tool_use_id"].is_string())
        return field_error(at + ".tool_use_id", "must be a string");
      auto result = text_of(b.value("content", json("")), at + ".content");
      if (!result.is_ok()) return result.status();
      std::string out = result.value();
      bool is_error = false;
      TANDEM_RETURN_IF_ERROR(bool_field(b, "is_error", at, &is_error));
      if (is_error) out = "Error: " + out;
      messages.push_back({{"role", "tool"}, {"tool_call_id", b["tool_use_id"]}, {"content", out}});
    } else {
      return field_error(at + ".type",
                         "'" + type + "' blocks are not supported in user turns (text and tool_result are)");
    }
  }
  if (!parts.empty() || content.empty())
    messages.push_back({{"role", "user"}, {"content", parts.empty() ? json("") : parts}});
  return Status::ok();
}

Status convert_assistant(const json& content, const std::string& where, json& messages) {
  if (content.is_string()) {
    messages.push_back({{"role", "assistant"}, {"content", content}});
    return Status::ok();
  }
  if (!content.is_array()) return field_error(where, "must be a string or an array of content blocks");
  std::string text, reasoning;
  json calls = json::array();
  for (size_t i = 0; i < content.size(); ++i) {
    const json& b = content[i];
    const std::string at = where + "[" + std::to_string(i) + "]";
    if (!b.is_object()) return field_error(at, "must be a content block object");
    std::string type;
    TANDEM_RETURN_IF_ERROR(string_field(b, "type", at, &type));
    if (type == "text") {
      std::string t;
      TANDEM_RETURN_IF_ERROR(string_field(b, "text", at, &t));
      text += t;
    } else if (type == "thinking") {
      std::string t;
      TANDEM_RETURN_IF_ERROR(string_field(b, "thinking", at, &t));
      reasoning += t;
    } else if (type == "redacted_thinking") {
      continue;  // encrypted by Anthropic: nothing a local model can read
    } else if (type == "tool_use") {
      if (!b.contains("id") || !b["id"].is_string()) return field_error(at + ".id", "must be a string");
      if (!b.contains("name") || !b["name"].is_string()) return field_error(at + ".name", "must be a string");
      const json input = b.value("input", json::object());
      calls.push_back({{"id", b["id"]},
                       {"type", "function"},
                       {"function", {{"name", b["name"]}, {"arguments", dump_json(input)}}}});
    } else {
      return field_error(at + ".type", "'" + type + "' blocks are not supported in assistant turns");
    }
  }
  json m = {{"role", "assistant"}, {"content", text}};
  if (!reasoning.empty()) m["reasoning_content"] = reasoning;
  if (!calls.empty()) m["tool_calls"] = calls;
  messages.push_back(std::move(m));
  return Status::ok();
}

Status convert_tools(const json& body, json& out) {
  const json tools = body.value("tools", json());
  if (tools.is_null()) return Status::ok();
  if (!tools.is_array()) return field_error("tools", "must be an array");
  json converted = json::array();
  for (size_t i = 0; i < tools.size(); ++i) {
    const json& t = tools[i];
    const std::string at = "tools[" + std::to_string(i) + "]";
    if (!t.is_object() || !t.contains("name") || !t["name"].is_string())
      return field_error(at + ".name", "must be a string");
    std::string type = "custom";
    TANDEM_RETURN_IF_ERROR(string_field(t, "type", at, &type));
    if (type != "custom" || !t.contains("input_schema")) {
      // Server tools (web_search_20250305, bash_20250124, ...) run at Anthropic, not here.
      note_tool_left_out("messages", t["name"].get<std::string>(), type);
      continue;
    }
    if (!t["input_schema"].is_object()) return field_error(at + ".input_schema", "must be a JSON schema object");
    json f = {{"name", t["name"]}, {"parameters", t["input_schema"]}};
    if (t.contains("description") && t["description"].is_string()) f["description"] = t["description"];
    converted.push_back({{"type", "function"}, {"function", f}});
  }
  if (converted.empty()) return Status::ok();
  out["tools"] = converted;
  const json choice = body.value("tool_choice", json());
  if (choice.is_null()) return Status::ok();
  if (!choice.is_object() || !choice.contains("type") || !choice["type"].is_string()) {
    return field_error("tool_choice", "must be an object {type: auto|any|tool|none}");
  }
  const std::string type = choice["type"];
  bool serial = false;
  TANDEM_RETURN_IF_ERROR(bool_field(choice, "disable_parallel_tool_use", "tool_choice", &serial));
  if (serial) out["parallel_tool_calls"] = false;
  if (type == "auto") {
    out["tool_choice"] = "auto";
  } else if (type == "any") {
    out["tool_choice"] = "required";
  } else if (type == "none") {
    out["tool_choice"] = "none";
  } else if (type == "tool") {
    const json name = choice.value("name", json());
    if (!name.is_string()) return field_error("tool_choice.name", "must be a string");
    const bool known =
        std::any_of(converted.begin(), converted.end(), [&](const json& t) { return t["function"]["name"] == name; });
    if (!known) return field_error("tool_choice.name", "names no tool in tools: '" + name.get<std::string>() + "'");
    // Every tool stays in the prompt (its prefix stays the same); the grammar allows only this one.
    out["tool_choice"] = {{"type", "function"}, {"function", {{"name", name}}}};
  } else {
    return field_error("tool_choice.type", "must be one of auto, any, tool, none; got '" + type + "'");
  }
  return Status::ok();
}

Status convert_sampling(const json& body, json& out) {
  if (body.contains("max_tokens") && !body["max_tokens"].is_null()) {
    if (!body["max_tokens"].is_number_integer() || body["max_tokens"].get<int64_t>() < 1)
      return field_error("max_tokens", "must be an integer >= 1");
    out["max_tokens"] = body["max_tokens"];
  }
  for (const char* k : {"temperature", "top_p", "top_k"}) {
    if (body.contains(k) && !body[k].is_null()) out[k] = body[k];
  }
  if (body.contains("stop_sequences") && !body["stop_sequences"].is_null()) {
    const json& s = body["stop_sequences"];
    if (!s.is_array()) return field_error("stop_sequences", "must be an array of strings");
    for (const json& x : s)
      if (!x.is_string()) return field_error("stop_sequences", "must be an array of strings");
    if (!s.empty()) out["stop"] = s;
  }
  const json thinking = body.value("thinking", json());
  if (thinking.is_object()) {
    std::string type;
    TANDEM_RETURN_IF_ERROR(string_field(thinking, "type", "thinking", &type));
    if (type == "disabled")
      out["chat_template_kwargs"] = {{"enable_thinking", false}};
    else if (type != "enabled" && type != "adaptive")
      return field_error("thinking.type", "must be enabled, adaptive or disabled; got '" + type + "'");
  }
  return Status::ok();
}

// Anthropic's usage: input_tokens counts only the prompt tokens evaluated afresh, so that
// input + cache_read + cache_creation is the whole prompt (Claude Code sums them to know how full
// its context is). Nothing is billed for writing the cache here: cache_creation is 0.
json usage_of(uint64_t prompt, uint64_t output, uint64_t cached) {
  cached = std::min(cached, prompt);
  return {{"input_tokens", prompt - cached},
          {"output_tokens", output},
          {"cache_read_input_tokens", cached},
          {"cache_creation_input_tokens", 0}};
}

json tool_input(const std::string& arguments) {
  json input = json::parse(arguments, nullptr, false);
  return input.is_object() ? input : json::object();
}

}  // namespace

Result<json> to_openai(const json& body, const std::string& model_id) {
  json out = json::object();
  if (!body.contains("model") || body["model"].is_null()) {
    out["model"] = model_id;
  } else if (!body["model"].is_string()) {
    return field_error("model", "must be a string");
  } else if (body["model"] != model_id) {
    return Status::not_found("model '" + body["model"].get<std::string>() +
                             "' is not served here; this server serves '" + model_id + "'");
  } else {
    out["model"] = model_id;
  }
  for (const auto& [key, value] : body.items()) {
    if (!kKnown.count(key)) note_ignored("messages", key);
  }
  json messages = json::array();
  if (body.contains("system") && !body["system"].is_null()) {
    auto system = system_text(body["system"]);
    if (!system.is_ok()) return system.status();
    if (!system->empty()) messages.push_back({{"role", "system"}, {"content", system.value()}});
  }
  const json turns = body.value("messages", json());
  if (!turns.is_array() || turns.empty()) return field_error("messages", "must be a non-empty array");
  for (size_t i = 0; i < turns.size(); ++i) {
    const json& m = turns[i];
    const std::string at = "messages[" + std::to_string(i) + "]";
    if (!m.is_object()) return field_error(at, "must be an object");
    std::string role;
    TANDEM_RETURN_IF_ERROR(string_field(m, "role", at, &role));
    if (!m.contains("content")) return field_error(at + ".content", "is required");
    Status s = role == "user"        ? convert_user(m["content"], at + ".content", messages)
               : role == "assistant" ? convert_assistant(m["content"], at + ".content", messages)
               : role == "system"    ? convert_system(m["content"], at + ".content", messages)
                                  : field_error(at + ".role", "must be user, assistant or system; got '" + role + "'");
    TANDEM_RETURN_IF_ERROR(s);
  }
  // System turns alone leave the template nothing to answer (found by fuzzing).
  if (std::none_of(messages.begin(), messages.end(), [](const json& m) { return m["role"] != "system"; }))
    return field_error("messages", "holds no user or assistant turn");
  out["messages"] = std::move(messages);
  TANDEM_RETURN_IF_ERROR(convert_tools(body, out));
  TANDEM_RETURN_IF_ERROR(convert_sampling(body, out));
  if (body.contains("stream") && !body["stream"].is_null()) {
    if (!body["stream"].is_boolean()) return field_error("stream", "must be a boolean");
    out["stream"] = body["stream"];
  }
  return out;
}

json error_object(const std::string& type, const std::string& message) {
  return {{"type", "error"}, {"error", {{"type", type}, {"message", message}}}};
}

int http_status(const Status& s) {
  switch (s.code()) {
    case StatusCode::ok:
      return 200;
    case StatusCode::invalid_argument:
      return 400;
    case StatusCode::not_found:
      return 404;
    case StatusCode::resource_exhausted:
      return 429;
    case StatusCode::unavailable:
      return 529;
    default:
      return 500;
  }
}

std::string error_type(const Status& s) {
  switch (s.code()) {
    case StatusCode::invalid_argument:
      return "invalid_request_error";
    case StatusCode::not_found:
      return "not_found_error";
    case StatusCode::resource_exhausted:
      return "rate_limit_error";
    case StatusCode::unavailable:
      return "overloaded_error";
    default:
      return "api_error";
  }
}

std::string stop_reason(const GenerationEvent& done, const json& body, std::string* stop_sequence) {
  stop_sequence->clear();
  if (done.finish_reason == "length") return "max_tokens";
  if (done.finish_reason == "tool_calls") return "tool_use";
  if (!done.stop_sequence.empty()) {
    for (const json& s : body.value("stop", json::array())) {
      if (s == done.stop_sequence) {
        *stop_sequence = done.stop_sequence;
        return "stop_sequence";
      }
    }
  }
  return "end_turn";
}

Result<json> MessagesDialect::parse(const std::string& body, const std::string& model_id) {
  auto j = parse_json_object(body);
  if (!j.is_ok()) return j;
  auto out = to_openai(j.value(), model_id);
  if (out.is_ok()) stream_ = out->value("stream", false);
  return out;
}

std::string MessagesDialect::error_body(const Status& error) const {
  std::string message = error.message();
  // Anthropic's words for it, which clients that compact their history look for.
  if (openai::is_context_exceeded(error)) message = "prompt is too long: " + message;
  return dump_json(error_object(error_type(error), message));
}

std::string MessagesDialect::unauthorized_body(const std::string& message) const {
  return dump_json(error_object("authentication_error", message));
}

json MessagesDialect::response(const CallInfo& call, const Accumulated& a) {
  json content = json::array();
  if (!a.reasoning.empty()) content.push_back({{"type", "thinking"}, {"thinking", a.reasoning}, {"signature", ""}});
  if (!a.text.empty() || a.tool_calls.empty()) content.push_back({{"type", "text"}, {"text", a.text}});
  for (const json& t : a.tool_calls) {
    content.push_back({{"type", "tool_use"},
                       {"id", t["id"]},
                       {"name", t["function"]["name"]},
                       {"input", tool_input(t["function"]["arguments"].get<std::string>())}});
  }
  GenerationEvent done;
  done.finish_reason = a.finish_reason;
  done.stop_sequence = a.stop_sequence;
  std::string matched;
  const std::string reason = stop_reason(done, call.body, &matched);
  return {{"id", call.id},
          {"type", "message"},
          {"role", "assistant"},
          {"model", call.model_id},
          {"content", content},
          {"stop_reason", reason},
          {"stop_sequence", matched.empty() ? json(nullptr) : json(matched)},
          {"usage", usage_of(a.prompt_tokens, a.completion_tokens, a.cached_tokens)}};
}

std::string MessagesDialect::stream_started(const CallInfo& call, const Accumulated& so_far) {
  return message_start(call, so_far.prompt_tokens, so_far.cached_tokens);
}

std::string MessagesDialect::message_start(const CallInfo& call, uint64_t prompt, uint64_t cached) {
  if (started_) return "";
  started_ = true;
  json message = {{"id", call.id},
                  {"type", "message"},
                  {"role", "assistant"},
                  {"model", call.model_id},
                  {"content", json::array()},
                  {"stop_reason", nullptr},
                  {"stop_sequence", nullptr},
                  {"usage", usage_of(prompt, 0, cached)}};
  return sse_event("message_start", {{"type", "message_start"}, {"message", message}}) + stream_ping();
}

std::string MessagesDialect::open_block(Block kind, const json& start) {
  std::string out = close_block();
  block_ = kind;
  ++index_;
  return out + sse_event("content_block_start",
                         {{"type", "content_block_start"}, {"index", index_}, {"content_block", start}});
}

std::string MessagesDialect::close_block() {
  if (block_ == Block::none) return "";
  std::string out;
  if (block_ == Block::thinking) {
    // Anthropic closes a thinking block with its signature; a local model has none to give.
    out += sse_event("content_block_delta", {{"type", "content_block_delta"},
                                             {"index", index_},
                                             {"delta", {{"type", "signature_delta"}, {"signature", ""}}}});
  }
  block_ = Block::none;
  return out + sse_event("content_block_stop", {{"type", "content_block_stop"}, {"index", index_}});
}

std::string MessagesDialect::stream_event(const CallInfo& call, const GenerationEvent& e, bool) {
  // Without a started event (an engine that sends none) the stream opens with the first event.
  std::string out = message_start(call, e.prompt_tokens, e.cached_tokens);
  auto delta = [&](const json& d) {
    out += sse_event("content_block_delta", {{"type", "content_block_delta"}, {"index", index_}, {"delta", d}});
  };
  if (!e.reasoning.empty()) {
    if (block_ != Block::thinking)
      out += open_block(Block::thinking, {{"type", "thinking"}, {"thinking", ""}, {"signature", ""}});
    delta({{"type", "thinking_delta"}, {"thinking", e.reasoning}});
  }
  if (!e.text.empty()) {
    if (block_ != Block::text) out += open_block(Block::text, {{"type", "text"}, {"text", ""}});
    delta({{"type", "text_delta"}, {"text", e.text}});
  }
  if (e.tool_calls.is_array()) {
    for (const json& t : e.tool_calls) {
      const int index = t.value("index", 0);
      if (block_ != Block::tool_use || index != tool_index_) {
        const json f = t.value("function", json::object());
        out += open_block(Block::tool_use, {{"type", "tool_use"},
                                            {"id", t.value("id", "")},
                                            {"name", f.value("name", "")},
                                            {"input", json::object()}});
        tool_index_ = index;
      }
      const std::string args = t.value("function", json::object()).value("arguments", "");
      if (!args.empty()) delta({{"type", "input_json_delta"}, {"partial_json", args}});
    }
  }
  if (e.type == GenerationEvent::Type::done) {
    if (index_ < 0)
      out += open_block(Block::text, {{"type", "text"}, {"text", ""}});  // a message has at least one block
    out += close_block();
    std::string matched;
    const std::string reason = stop_reason(e, call.body, &matched);
    out += sse_event(
        "message_delta",
        {{"type", "message_delta"},
         {"delta", {{"stop_reason", reason}, {"stop_sequence", matched.empty() ? json(nullptr) : json(matched)}}},
         {"usage", usage_of(e.prompt_tokens, e.completion_tokens, e.cached_tokens)}});
    out += sse_event("message_stop", {{"type", "message_stop"}});
  }
  return out;
}

std::string MessagesDialect::stream_error(const CallInfo&, const Status& error) {
  return "event: error\ndata: " + error_body(error) + "\n\n";
}

std::string MessagesDialect::stream_ping() const {
  // Before message_start an SSE comment: clients ignore it, and a ping event may not come first.
  return started_ ? sse_event("ping", {{"type", "ping"}}) : ": ping\n\n";
}

}  // namespace tandem::gateway::anthropic
