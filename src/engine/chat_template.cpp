#include "engine/chat_template.h"

#include <random>

#include "common.h"
#include "json-schema-to-grammar.h"

namespace tandem::engine {
namespace {

using json = nlohmann::json;

common_json to_common(const json& j) { return common_json::parse(j.dump()); }

std::string random_id() {
  static const char alphabet[] = "0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz";
  thread_local std::mt19937 gen{std::random_device{}()};
  std::string s(32, ' ');
  for (char& c : s) c = alphabet[gen() % (sizeof alphabet - 1)];
  return s;
}

Status check_messages(const json& messages) {
  if (!messages.is_array() || messages.empty()) return Status::invalid_argument("messages must be a non-empty array");
  for (size_t i = 0; i < messages.size(); ++i) {
    const json& m = messages[i];
    const std::string where = "messages[" + std::to_string(i) + "]";
    if (!m.is_object()) return Status::invalid_argument(where + " must be an object");
    const std::string role = m.value("role", "");
    if (role.empty()) return Status::invalid_argument(where + ".role is missing");
    if (role == "assistant") {
      if (!m.contains("content") && !m.contains("tool_calls"))
        return Status::invalid_argument(where + ": an assistant message needs content or tool_calls");
      continue;
    }
    if (!m.contains("content")) return Status::invalid_argument(where + ".content is missing");
    const json& c = m["content"];
    if (c.is_string() || c.is_null()) continue;
    if (!c.is_array()) return Status::invalid_argument(where + ".content must be a string or an array of parts");
    for (const json& p : c) {
      if (!p.is_object() || p.value("type", "") != "text")
        return Status::invalid_argument(where + ".content: only parts of type text are supported");
    }
  }
  return Status::ok();
}

// OpenAI's tool_choice: "auto", "none", "required", or {"type": "function", "function": {"name"}},
// which forces a call of that tool (its name is returned in `forced`).
Result<std::string> tool_choice_of(const json& body, const json& tools, std::string* forced) {
  const json c = body.value("tool_choice", json());
  const bool any_tool = tools.is_array() && !tools.empty();
  if (c.is_null()) return std::string("auto");
  if (c.is_string()) {
    const std::string s = c;
    if (s != "auto" && s != "none" && s != "required")
      return Status::invalid_argument(
          "tool_choice must be auto, none, required or {type: function, function: {name}}; got '" + s + "'");
    if (s == "required" && !any_tool) return Status::invalid_argument("tool_choice 'required' needs tools");
    return s;
  }
  auto name_of = [](const json& o) {  // o.function.name, or null
    const json f = o.is_object() && o.contains("function") ? o["function"] : json();
    return f.is_object() && f.contains("name") ? f["name"] : json();
  };
  const json name = name_of(c);
  if (!c.is_object() || !c.contains("type") || c["type"] != "function" || !name.is_string())
    return Status::invalid_argument("tool_choice must be auto, none, required or {type: function, function: {name}}");
  bool known = false;
  for (const json& t : any_tool ? tools : json::array()) known = known || name_of(t) == name;
  if (!known)
    return Status::invalid_argument("tool_choice.function.name names no tool in tools: '" + name.get<std::string>() +
                                    "'");
  *forced = name.get<std::string>();
  return std::string("required");
}

Status fill_inputs(const json& body, const common_chat_templates* tmpls, common_chat_templates_inputs& in,
                   std::string* forced) {
  TANDEM_RETURN_IF_ERROR(check_messages(body.value("messages", json())));
  const json tools = body.value("tools", json());
  if (!tools.is_null() && !tools.is_array()) return Status::invalid_argument("tools must be an array");
  auto choice = tool_choice_of(body, tools, forced);
  if (!choice.is_ok()) return choice.status();
  const std::string tool_choice = choice.value();
  auto schema = response_schema(body);
  if (!schema.is_ok()) return schema.status();
  const std::string grammar = body.value("grammar", "");

  auto caps = common_chat_templates_get_caps(tmpls);
  in.messages = common_chat_msgs_parse_oaicompat(to_common(body["messages"]));
  in.tools = common_chat_tools_parse_oaicompat(to_common(tools.is_null() ? json::array() : tools));
  in.tool_choice = common_chat_tool_choice_parse_oaicompat(tool_choice);
  in.json_schema = schema->schema.is_null() ? "" : schema->schema.dump();
  in.grammar = grammar;
  in.use_jinja = true;
  in.parallel_tool_calls = body.value("parallel_tool_calls", caps["supports_parallel_tool_calls"]);
  in.add_generation_prompt = body.value("add_generation_prompt", true);
  in.reasoning_format = COMMON_REASONING_FORMAT_DEEPSEEK;  // llama-server's default
  if (body.contains("reasoning_format"))
    in.reasoning_format = common_reasoning_format_from_name(body["reasoning_format"].get<std::string>());
  if (!in.tools.empty() && in.tool_choice != COMMON_CHAT_TOOL_CHOICE_NONE && !grammar.empty()) {
    return Status::invalid_argument("grammar cannot be combined with tools");
  }
  const json kwargs = body.value("chat_template_kwargs", json::object());
  if (!kwargs.is_object()) return Status::invalid_argument("chat_template_kwargs must be an object");
  for (const auto& [key, value] : kwargs.items()) in.chat_template_kwargs[key] = value.dump();
  if (auto it = in.chat_template_kwargs.find("enable_thinking"); it != in.chat_template_kwargs.end()) {
    if (it->second == "true")
      in.enable_thinking = true;
    else if (it->second == "false")
      in.enable_thinking = false;
    else
      return Status::invalid_argument("chat_template_kwargs.enable_thinking must be a boolean");
  }
  const std::string effort = body.value("reasoning_effort", "");
  if (effort == "none") {
    in.enable_thinking = false;
    in.chat_template_kwargs.erase("reasoning_effort");
  } else if (!effort.empty()) {
    in.chat_template_kwargs["reasoning_effort"] = json(effort).dump();
  }
  return Status::ok();
}

}  // namespace

Result<SchemaGrammar> response_schema(const json& body) {
  SchemaGrammar out;
  json schema = body.value("json_schema", json());
  if (body.contains("response_format") && !body["response_format"].is_null()) {
    const json& rf = body["response_format"];
    if (!rf.is_object()) return Status::invalid_argument("response_format must be an object");
    const std::string type = rf.value("type", "");
    if (type == "json_object") {
      if (rf.contains("schema") || schema.is_null()) schema = rf.value("schema", json::object());
    } else if (type == "json_schema") {
      const json wrapper = rf.value("json_schema", json::object());
      if (!wrapper.is_object() || !wrapper.contains("schema"))
        return Status::invalid_argument("response_format.json_schema.schema is missing");
      schema = wrapper["schema"];
    } else if (!type.empty() && type != "text") {
      return Status::invalid_argument("response_format.type must be one of text, json_object, json_schema, got '" +
                                      type + "'");
    }
  }
  if (schema.is_null()) return out;
  if (!schema.is_object()) return Status::invalid_argument("the JSON schema must be an object");
  if (schema.empty()) schema["type"] = "object";  // json_object without a schema: any object
  if (body.contains("grammar"))
    return Status::invalid_argument("a JSON schema (response_format) and grammar cannot be used together");
  try {
    out.grammar = json_schema_to_grammar(to_common(schema));
  } catch (const std::exception& e) {
    return Status::invalid_argument(std::string("response_format: the JSON schema cannot be used: ") + e.what());
  }
  out.schema = std::move(schema);
  return out;
}

Result<ChatTemplates> ChatTemplates::load(const llama_model* model) {
  try {
    ChatTemplates t;
    t.templates_ = std::shared_ptr<common_chat_templates>(common_chat_templates_init(model, "").release(),
                                                          common_chat_templates_free);
    if (!t.templates_) return Status::internal("loading the chat template failed");
    return t;
  } catch (const std::exception& e) {
    return Status::invalid_argument(std::string("the model's chat template does not parse: ") + e.what());
  }
}

Result<ChatPrompt> ChatTemplates::render(const json& body) const {
  try {
    common_chat_templates_inputs in;
    std::string forced;
    TANDEM_RETURN_IF_ERROR(fill_inputs(body, templates_.get(), in, &forced));
    ChatPrompt out;
    out.params = common_chat_templates_apply(templates_.get(), in);
    out.prompt = out.params.prompt;
    if (!forced.empty()) {
      // A named tool: the prompt shows every tool (the same prefix as any other turn of the
      // conversation), the grammar and the parser know only that one, so its call is forced.
      std::erase_if(in.tools, [&](const common_chat_tool& t) { return t.name != forced; });
      out.params = common_chat_templates_apply(templates_.get(), in);
    }
    out.call_required = in.tool_choice == COMMON_CHAT_TOOL_CHOICE_REQUIRED && !in.tools.empty();
    out.parser = common_chat_parser_params(out.params);
    out.parser.reasoning_format = in.reasoning_format;
    if (!out.params.parser.empty()) out.parser.parser.load(out.params.parser);
    return out;
  } catch (const std::exception& e) {
    // common throws for what it cannot render: unknown roles, malformed tools, template errors.
    return Status::invalid_argument(std::string("messages could not be rendered with the model's chat template: ") +
                                    e.what());
  }
}

ChatStream::ChatStream(common_chat_parser_params parser) : parser_(std::move(parser)) {}

void ChatStream::update(const std::string& text, bool partial, EngineEvent* delta) {
  common_chat_msg next;
  try {
    next = common_chat_parse(text, partial, parser_);
  } catch (const std::exception&) {
    // A partial parse may fail until more text arrives; the final one falls back to plain content.
    if (partial) return;
    next = common_chat_msg();
    next.role = "assistant";
    next.content = text;
  }
  if (next.empty()) return;
  next.set_tool_call_ids(tool_call_ids_, random_id);
  std::vector<common_chat_msg_diff> diffs;
  try {
    diffs = common_chat_msg_diff::compute_diffs(message_, next);
  } catch (const std::exception&) {
    // A partial parse may read a half-written marker as content and take it back once the
    // marker completes; what was sent cannot be taken back, so wait for a parse that extends it.
    return;
  }
  for (const auto& d : diffs) {
    delta->text += d.content_delta;
    delta->reasoning += d.reasoning_content_delta;
    if (d.tool_call_index != std::string::npos) {
      delta->tool_calls.push_back({static_cast<int>(d.tool_call_index), d.tool_call_delta.id, d.tool_call_delta.name,
                                   d.tool_call_delta.arguments});
    }
  }
  message_ = std::move(next);
}

}  // namespace tandem::engine
