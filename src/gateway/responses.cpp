#include "gateway/responses.h"

#include <ctime>

#include <set>

#include "common/log.h"
#include "gateway/openai.h"

namespace tandem::gateway::responses {
namespace {

using nlohmann::json;

const std::set<std::string> kKnown = {"model",        "input",
                                      "instructions", "tools",
                                      "tool_choice",  "parallel_tool_calls",
                                      "text",         "max_output_tokens",
                                      "reasoning",    "temperature",
                                      "top_p",        "stream",
                                      "store",        "previous_response_id"};

// The text of a message's content: a string, or parts of type input_text / output_text / text.
Result<std::string> content_text(const json& content, const std::string& where) {
  if (content.is_string()) return content.get<std::string>();
  if (content.is_null()) return std::string();
  if (!content.is_array()) return field_error(where, "must be a string or an array of content parts");
  std::string out;
  for (size_t i = 0; i < content.size(); ++i) {
    const json& p = content[i];
    const std::string at = where + "[" + std::to_string(i) + "]";
    std::string type, text;
    if (p.is_object()) TANDEM_RETURN_IF_ERROR(string_field(p, "type", at, &type));
    if (type != "input_text" && type != "output_text" && type != "text") {
      return field_error(at + ".type", "'" + type + "' parts are not supported (input_text and output_text are)");
    }
    TANDEM_RETURN_IF_ERROR(string_field(p, "text", at, &text));
    out += text;
  }
  return out;
}

// A message's content as OpenAI text parts: a string is one part.
Result<json> content_parts(const json& content, const std::string& where) {
  if (content.is_string() || content.is_null())
    return json::array({{{"type", "text"}, {"text", content.is_null() ? "" : content}}});
  if (!content.is_array()) return field_error(where, "must be a string or an array of content parts");
  json parts = json::array();
  for (size_t i = 0; i < content.size(); ++i) {
    const json& p = content[i];
    std::string type;
    if (p.is_object()) TANDEM_RETURN_IF_ERROR(string_field(p, "type", where + "[" + std::to_string(i) + "]", &type));
    if (type != "input_text" && type != "output_text" && type != "text") {
      return field_error(where + "[" + std::to_string(i) + "].type",
                         "'" + type + "' parts are not supported (input_text and output_text are)");
    }
    const json text = p.value("text", json(""));
    if (!text.is_string()) return field_error(where + "[" + std::to_string(i) + "].text", "must be a string");
    parts.push_back({{"type", "text"}, {"text", text}});
  }
  return parts;
}

Status convert_input(const json& input, json& messages) {
  if (input.is_string()) {
    messages.push_back({{"role", "user"}, {"content", input}});
    return Status::ok();
  }
  if (!input.is_array()) return field_error("input", "must be a string or an array of items");
  for (size_t i = 0; i < input.size(); ++i) {
    const json& it = input[i];
    const std::string at = "input[" + std::to_string(i) + "]";
    if (!it.is_object()) return field_error(at, "must be an object");
    std::string type = it.contains("role") ? "message" : "";
    TANDEM_RETURN_IF_ERROR(string_field(it, "type", at, &type));
    if (type == "message") {
      std::string role;
      TANDEM_RETURN_IF_ERROR(string_field(it, "role", at, &role));
      if (role != "user" && role != "assistant" && role != "system" && role != "developer") {
        return field_error(at + ".role", "must be user, assistant, system or developer; got '" + role + "'");
      }
      const json content = it.value("content", json());
      if (role == "assistant") {
        auto text = content_text(content, at + ".content");
        if (!text.is_ok()) return text.status();
        messages.push_back({{"role", role}, {"content", text.value()}});
        continue;
      }
      // In place and as parts, as llama-server passes them: the chat template joins them, and
      // llama.cpp's common library reads developer as system for every template but gpt-oss's.
      auto parts = content_parts(content, at + ".content");
      if (!parts.is_ok()) return parts.status();
      messages.push_back({{"role", role}, {"content", parts.value()}});
    } else if (type == "function_call") {
      if (!it.contains("call_id") || !it["call_id"].is_string())
        return field_error(at + ".call_id", "must be a string");
      if (!it.contains("name") || !it["name"].is_string()) return field_error(at + ".name", "must be a string");
      std::string arguments = "{}";  // JSON text, as the chat API has it
      TANDEM_RETURN_IF_ERROR(string_field(it, "arguments", at, &arguments));
      json call = {
          {"id", it["call_id"]}, {"type", "function"}, {"function", {{"name", it["name"]}, {"arguments", arguments}}}};
      // Calls that follow an assistant message (or each other) belong to that one message.
      const bool join = !messages.empty() && messages.back()["role"] == "assistant";
      if (join) {
        if (!messages.back().contains("tool_calls")) messages.back()["tool_calls"] = json::array();
        messages.back()["tool_calls"].push_back(call);
      } else {
        messages.push_back({{"role", "assistant"}, {"content", ""}, {"tool_calls", json::array({call})}});
      }
    } else if (type == "function_call_output") {
      if (!it.contains("call_id") || !it["call_id"].is_string())
        return field_error(at + ".call_id", "must be a string");
      const json out = it.value("output", json(""));
      auto text = out.is_string() ? Result<std::string>(out.get<std::string>()) : content_text(out, at + ".output");
      if (!text.is_ok()) return text.status();
      messages.push_back({{"role", "tool"}, {"tool_call_id", it["call_id"]}, {"content", text.value()}});
    } else {
      // reasoning items (encrypted or not), web_search_call, ...: nothing the template can show.
      note_ignored("responses", "input item of type '" + type + "'");
    }
  }
  return Status::ok();
}

Status convert_tools(const json& body, json& out) {
  bool parallel = true;  // checked with or without tools: the Response echoes it
  TANDEM_RETURN_IF_ERROR(bool_field(body, "parallel_tool_calls", "", &parallel));
  const json tools = body.value("tools", json());
  if (tools.is_null()) return Status::ok();
  if (!tools.is_array()) return field_error("tools", "must be an array");
  json converted = json::array();
  for (size_t i = 0; i < tools.size(); ++i) {
    const json& t = tools[i];
    const std::string at = "tools[" + std::to_string(i) + "]";
    std::string type;
    if (t.is_object()) TANDEM_RETURN_IF_ERROR(string_field(t, "type", at, &type));
    if (type != "function") {
      const bool named = t.is_object() && t.contains("name") && t["name"].is_string();
      note_tool_left_out("responses", named ? t["name"].get<std::string>() : at, type);
      continue;
    }
    if (!t.contains("name") || !t["name"].is_string()) return field_error(at + ".name", "must be a string");
    const json parameters = t.value("parameters", json());
    if (!parameters.is_null() && !parameters.is_object())
      return field_error(at + ".parameters", "must be a JSON schema object");
    json f = {
        {"name", t["name"]},
        {"parameters", parameters.is_null() ? json{{"type", "object"}, {"properties", json::object()}} : parameters}};
    if (t.contains("description") && t["description"].is_string()) f["description"] = t["description"];
    converted.push_back({{"type", "function"}, {"function", f}});
  }
  if (converted.empty()) return Status::ok();
  out["tools"] = converted;
  if (body.contains("parallel_tool_calls") && body["parallel_tool_calls"].is_boolean())
    out["parallel_tool_calls"] = body["parallel_tool_calls"];
  const json choice = body.value("tool_choice", json());
  if (choice.is_string()) {
    const std::string c = choice;
    if (c != "auto" && c != "none" && c != "required")
      return field_error("tool_choice", "must be auto, none, required or {type: function, name}");
    out["tool_choice"] = c;
  } else if (choice.is_object() && choice.value("type", json()) == "function") {
    const json name = choice.value("name", json());
    if (!name.is_string()) return field_error("tool_choice.name", "must be a string");
    const bool known =
        std::any_of(converted.begin(), converted.end(), [&](const json& t) { return t["function"]["name"] == name; });
    if (!known)
      return field_error("tool_choice.name", "names no function tool in tools: '" + name.get<std::string>() + "'");
    // Every tool stays in the prompt; the engine's grammar allows only this one.
    out["tool_choice"] = {{"type", "function"}, {"function", {{"name", name}}}};
  } else if (!choice.is_null()) {
    return field_error("tool_choice", "must be auto, none, required or {type: function, name}");
  }
  return Status::ok();
}

Status convert_options(const json& body, json& out) {
  if (body.contains("max_output_tokens") && !body["max_output_tokens"].is_null()) {
    if (!body["max_output_tokens"].is_number_integer() || body["max_output_tokens"].get<int64_t>() < 1) {
      return field_error("max_output_tokens", "must be an integer >= 1");
    }
    out["max_tokens"] = body["max_output_tokens"];
  }
  for (const char* k : {"temperature", "top_p"}) {
    if (body.contains(k) && !body[k].is_null()) out[k] = body[k];
  }
  const json text = body.value("text", json());
  if (!text.is_null() && !text.is_object()) return field_error("text", "must be an object");
  const json format = text.is_object() ? text.value("format", json()) : json();
  if (!format.is_null() && !format.is_object()) return field_error("text.format", "must be an object");
  if (format.is_object()) {
    std::string type = "text", name = "response";
    bool strict = false;
    TANDEM_RETURN_IF_ERROR(string_field(format, "type", "text.format", &type));
    if (type == "json_schema") {
      if (!format.contains("schema") || !format["schema"].is_object())
        return field_error("text.format.schema", "must be a JSON schema object");
      TANDEM_RETURN_IF_ERROR(string_field(format, "name", "text.format", &name));
      TANDEM_RETURN_IF_ERROR(bool_field(format, "strict", "text.format", &strict));
      out["response_format"] = {{"type", "json_schema"},
                                {"json_schema", {{"name", name}, {"schema", format["schema"]}, {"strict", strict}}}};
    } else if (type == "json_object") {
      out["response_format"] = {{"type", "json_object"}};
    } else if (type != "text") {
      return field_error("text.format.type", "must be text, json_object or json_schema; got '" + type + "'");
    }
  }
  const json reasoning = body.value("reasoning", json());
  if (reasoning.is_object() && reasoning.contains("effort") && reasoning["effort"].is_string())
    out["reasoning_effort"] = reasoning["effort"];
  return Status::ok();
}

json usage_of(uint64_t input, uint64_t output, uint64_t cached) {
  return {{"input_tokens", input},
          {"input_tokens_details", {{"cached_tokens", cached}}},
          {"output_tokens", output},
          {"output_tokens_details", {{"reasoning_tokens", 0}}},
          {"total_tokens", input + output}};
}

bool wants_summary(const json& request) {
  const json r = request.value("reasoning", json());
  return r.is_object() && r.value("summary", json()).is_string() && r["summary"] != "none";
}

json reasoning_item(const std::string& id, const std::string& text, bool summary, const std::string& status) {
  json item = {
      {"type", "reasoning"}, {"id", id}, {"summary", json::array()}, {"content", json::array()}, {"status", status}};
  if (!text.empty() || status == "completed") item["content"].push_back({{"type", "reasoning_text"}, {"text", text}});
  if (summary && !text.empty()) item["summary"].push_back({{"type", "summary_text"}, {"text", text}});
  return item;
}

json output_text_part(const std::string& text) {
  return {{"type", "output_text"}, {"text", text}, {"annotations", json::array()}, {"logprobs", json::array()}};
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
  if (body.contains("previous_response_id") && !body["previous_response_id"].is_null()) {
    return field_error("previous_response_id", "tandem does not store responses; send the whole conversation as input");
  }
  for (const auto& [key, value] : body.items()) {
    if (!kKnown.count(key)) note_ignored("responses", key);
  }
  json messages = json::array();
  if (body.contains("instructions") && body["instructions"].is_string() &&
      !body["instructions"].get<std::string>().empty()) {
    messages.push_back({{"role", "system"}, {"content", body["instructions"]}});
  }
  if (!body.contains("input")) return field_error("input", "is required");
  TANDEM_RETURN_IF_ERROR(convert_input(body["input"], messages));
  const bool any_turn = std::any_of(messages.begin(), messages.end(),
                                    [](const json& m) { return m["role"] != "system" && m["role"] != "developer"; });
  if (!any_turn) return field_error("input", "holds no message to answer");
  out["messages"] = std::move(messages);
  TANDEM_RETURN_IF_ERROR(convert_tools(body, out));
  TANDEM_RETURN_IF_ERROR(convert_options(body, out));
  if (body.contains("stream") && !body["stream"].is_null()) {
    if (!body["stream"].is_boolean()) return field_error("stream", "must be a boolean");
    out["stream"] = body["stream"];
  }
  return out;
}

Result<json> ResponsesDialect::parse(const std::string& body, const std::string& model_id) {
  auto j = parse_json_object(body);
  if (!j.is_ok()) return j;
  request_ = j.value();
  auto out = to_openai(request_, model_id);
  if (out.is_ok()) stream_ = out->value("stream", false);
  return out;
}

std::string ResponsesDialect::error_body(const Status& error) const { return openai::error_body(error); }

std::string ResponsesDialect::unauthorized_body(const std::string& message) const {
  return openai::OpenAiDialect(Endpoint::chat).unauthorized_body(message);
}

json ResponsesDialect::envelope(const CallInfo& call, const std::string& status, json output) const {
  const json reasoning = request_.value("reasoning", json());
  json r = {{"id", call.id},
            {"object", "response"},
            {"created_at", call.created},
            {"completed_at", nullptr},
            {"status", status},
            {"error", nullptr},
            {"incomplete_details", nullptr},
            {"instructions", request_.value("instructions", json())},
            {"max_output_tokens", request_.value("max_output_tokens", json())},
            {"model", call.model_id},
            {"output", std::move(output)},
            {"parallel_tool_calls", request_.value("parallel_tool_calls", json()) != false},
            {"previous_response_id", nullptr},
            {"reasoning",
             {{"effort", reasoning.is_object() ? reasoning.value("effort", json()) : json()},
              {"summary", reasoning.is_object() ? reasoning.value("summary", json()) : json()}}},
            {"store", false},  // nothing is stored, whatever the request says
            {"temperature", request_.value("temperature", json(1.0))},
            {"text", request_.value("text", json{{"format", {{"type", "text"}}}})},
            {"tool_choice", request_.value("tool_choice", json("auto"))},
            {"tools", request_.value("tools", json::array())},
            {"top_p", request_.value("top_p", json(1.0))},
            {"truncation", "disabled"},
            {"usage", nullptr},
            {"metadata", request_.value("metadata", json::object())}};
  if (status == "incomplete") r["incomplete_details"] = {{"reason", "max_output_tokens"}};
  // When it ended, as OpenAI and llama-server say (a finished response only).
  if (status == "completed" || status == "incomplete") r["completed_at"] = static_cast<int64_t>(std::time(nullptr));
  return r;
}

json ResponsesDialect::response(const CallInfo& call, const Accumulated& a) {
  json output = json::array();
  const bool incomplete = a.finish_reason == "length";
  const std::string item_status = incomplete ? "incomplete" : "completed";
  if (!a.reasoning.empty())
    output.push_back(reasoning_item("rs_" + call.id, a.reasoning, wants_summary(request_), "completed"));
  if (!a.text.empty() || a.tool_calls.empty()) {
    output.push_back({{"type", "message"},
                      {"id", "msg_" + call.id},
                      {"status", item_status},
                      {"role", "assistant"},
                      {"content", json::array({output_text_part(a.text)})}});
  }
  for (size_t i = 0; i < a.tool_calls.size(); ++i) {
    const json& t = a.tool_calls[i];
    output.push_back({{"type", "function_call"},
                      {"id", "fc_" + call.id + "_" + std::to_string(i)},
                      {"call_id", t["id"]},
                      {"name", t["function"]["name"]},
                      {"arguments", t["function"]["arguments"]},
                      {"status", "completed"}});
  }
  json r = envelope(call, incomplete ? "incomplete" : "completed", std::move(output));
  r["output_text"] = a.text;
  r["usage"] = usage_of(a.prompt_tokens, a.completion_tokens, a.cached_tokens);
  return r;
}

std::string ResponsesDialect::event(const std::string& type, json fields) {
  fields["type"] = type;
  fields["sequence_number"] = sequence_++;
  return sse_event(type, fields);
}

std::string ResponsesDialect::stream_open(const CallInfo& call) {
  const json r = envelope(call, "in_progress", json::array());
  std::string out = event("response.created", {{"response", r}});  // two statements: numbered in order
  return out + event("response.in_progress", {{"response", r}});
}

std::string ResponsesDialect::open_item(Item kind, json item) {
  std::string out = close_item();
  item_ = kind;
  current_ = std::move(item);
  const int index = static_cast<int>(output_.size());
  out += event("response.output_item.added", {{"output_index", index}, {"item", current_}});
  const json id = current_["id"];
  if (kind == Item::message) {
    current_["content"] = json::array({output_text_part("")});
    out += event("response.content_part.added",
                 {{"item_id", id}, {"output_index", index}, {"content_index", 0}, {"part", output_text_part("")}});
  } else if (kind == Item::reasoning) {
    current_["content"] = json::array({{{"type", "reasoning_text"}, {"text", ""}}});
    out += event("response.content_part.added", {{"item_id", id},
                                                 {"output_index", index},
                                                 {"content_index", 0},
                                                 {"part", {{"type", "reasoning_text"}, {"text", ""}}}});
  }
  return out;
}

std::string ResponsesDialect::close_item() {
  if (item_ == Item::none) return "";
  std::string out;
  const int index = static_cast<int>(output_.size());
  const json id = current_["id"];
  if (item_ == Item::message) {
    const json part = current_["content"][0];
    out += event("response.output_text.done", {{"item_id", id},
                                               {"output_index", index},
                                               {"content_index", 0},
                                               {"text", part["text"]},
                                               {"logprobs", json::array()}});
    out += event("response.content_part.done",
                 {{"item_id", id}, {"output_index", index}, {"content_index", 0}, {"part", part}});
  } else if (item_ == Item::reasoning) {
    const json part = current_["content"][0];
    out += event("response.reasoning_text.done",
                 {{"item_id", id}, {"output_index", index}, {"content_index", 0}, {"text", part["text"]}});
    out += event("response.content_part.done",
                 {{"item_id", id}, {"output_index", index}, {"content_index", 0}, {"part", part}});
    current_ = reasoning_item(id, part["text"], wants_summary(request_), "completed");
  } else {
    out += event(
        "response.function_call_arguments.done",
        {{"item_id", id}, {"output_index", index}, {"name", current_["name"]}, {"arguments", current_["arguments"]}});
  }
  current_["status"] = "completed";
  out += event("response.output_item.done", {{"output_index", index}, {"item", current_}});
  output_.push_back(std::move(current_));
  current_ = json();
  item_ = Item::none;
  return out;
}

std::string ResponsesDialect::stream_event(const CallInfo& call, const GenerationEvent& e, bool) {
  std::string out;
  const int index = static_cast<int>(output_.size());
  if (!e.reasoning.empty()) {
    if (item_ != Item::reasoning)
      out += open_item(Item::reasoning,
                       reasoning_item("rs_" + call.id + "_" + std::to_string(index), "", false, "in_progress"));
    current_["content"][0]["text"] = current_["content"][0]["text"].get<std::string>() + e.reasoning;
    out += event(
        "response.reasoning_text.delta",
        {{"item_id", current_["id"]}, {"output_index", output_.size()}, {"content_index", 0}, {"delta", e.reasoning}});
  }
  if (!e.text.empty()) {
    if (item_ != Item::message) {
      out += open_item(Item::message, {{"type", "message"},
                                       {"id", "msg_" + call.id + "_" + std::to_string(output_.size())},
                                       {"status", "in_progress"},
                                       {"role", "assistant"},
                                       {"content", json::array()}});
    }
    current_["content"][0]["text"] = current_["content"][0]["text"].get<std::string>() + e.text;
    out += event("response.output_text.delta", {{"item_id", current_["id"]},
                                                {"output_index", output_.size()},
                                                {"content_index", 0},
                                                {"delta", e.text},
                                                {"logprobs", json::array()}});
  }
  if (e.tool_calls.is_array()) {
    for (const json& t : e.tool_calls) {
      const int ti = t.value("index", 0);
      const json f = t.value("function", json::object());
      if (item_ != Item::function_call || ti != tool_index_) {
        out += open_item(Item::function_call, {{"type", "function_call"},
                                               {"id", "fc_" + call.id + "_" + std::to_string(output_.size())},
                                               {"call_id", t.value("id", "")},
                                               {"name", f.value("name", "")},
                                               {"arguments", ""},
                                               {"status", "in_progress"}});
        tool_index_ = ti;
      }
      const std::string args = f.value("arguments", "");
      if (args.empty()) continue;
      current_["arguments"] = current_["arguments"].get<std::string>() + args;
      out += event("response.function_call_arguments.delta",
                   {{"item_id", current_["id"]}, {"output_index", output_.size()}, {"delta", args}});
    }
  }
  if (e.type == GenerationEvent::Type::done) {
    out += close_item();
    const bool incomplete = e.finish_reason == "length";
    json r = envelope(call, incomplete ? "incomplete" : "completed", output_);
    r["usage"] = usage_of(e.prompt_tokens, e.completion_tokens, e.cached_tokens);
    out += event(incomplete ? "response.incomplete" : "response.completed", {{"response", r}});
  }
  return out;
}

std::string ResponsesDialect::stream_error(const CallInfo& call, const Status& error) {
  json r = envelope(call, "failed", output_);
  const json e = json::parse(openai::error_body(error))["error"];
  r["error"] = {{"code", e["code"].is_null() ? json(e["type"]) : e["code"]}, {"message", error.message()}};
  return event("response.failed", {{"response", r}});
}

}  // namespace tandem::gateway::responses
