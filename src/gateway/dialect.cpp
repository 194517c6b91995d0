#include "gateway/dialect.h"

#include <mutex>
#include <set>

#include "common/log.h"
#include "gateway/openai.h"

namespace tandem::gateway {

using nlohmann::json;

std::string dump_json(const json& j) { return j.dump(-1, ' ', false, json::error_handler_t::replace); }
std::string sse_data(const json& j) { return "data: " + dump_json(j) + "\n\n"; }
std::string sse_event(const std::string& name, const json& j) {
  return "event: " + name + "\ndata: " + dump_json(j) + "\n\n";
}

Result<json> parse_json_object(const std::string& body) {
  json j;
  try {
    j = json::parse(body);
  } catch (const json::parse_error& e) {
    return Status::invalid_argument("request body is not valid JSON (at byte " + std::to_string(e.byte) +
                                    "): " + e.what());
  } catch (const json::exception& e) {
    // Valid syntax the parser still refuses, e.g. a number out of a double's range ("1e400").
    return Status::invalid_argument(std::string("request body is not valid JSON: ") + e.what());
  }
  if (!j.is_object()) return Status::invalid_argument("request body must be a JSON object");
  return j;
}

namespace {
// Whether `what` is said for the first time in this process.
// The names come from clients: past kMaxSeen the notes stop, so that no client can grow the
// gateway's memory or its log at will.
bool first_time(const std::string& what) {
  constexpr size_t kMaxSeen = 256;
  static std::mutex mutex;
  static std::set<std::string> seen;  // guarded by mutex
  std::lock_guard<std::mutex> lock(mutex);
  if (seen.size() >= kMaxSeen) return false;
  return seen.insert(what).second;
}
}  // namespace

void note_ignored(const std::string& api, const std::string& field) {
  if (!first_time(api + " " + field)) return;
  log::write(log::Level::debug, "serve", api + ": the field '" + field + "' is accepted and ignored");
}

void note_tool_left_out(const std::string& api, const std::string& tool, const std::string& type) {
  if (!first_time(api + " tool " + tool + " " + type)) return;
  log::info("serve", api + ": the tool '" + tool + "' of type '" + type +
                         "' cannot run here and is not offered to the model (said once)");
}

Status field_error(const std::string& field, const std::string& what) {
  return Status::invalid_argument(field + ": " + what);
}

namespace {
std::string path_of(const std::string& where, const char* key) { return where.empty() ? key : where + "." + key; }
}  // namespace

Status string_field(const json& o, const char* key, const std::string& where, std::string* out) {
  if (!o.contains(key) || o[key].is_null()) return Status::ok();
  if (!o[key].is_string()) return field_error(path_of(where, key), "must be a string");
  *out = o[key].get<std::string>();
  return Status::ok();
}

Status bool_field(const json& o, const char* key, const std::string& where, bool* out) {
  if (!o.contains(key) || o[key].is_null()) return Status::ok();
  if (!o[key].is_boolean()) return field_error(path_of(where, key), "must be a boolean");
  *out = o[key].get<bool>();
  return Status::ok();
}

int Dialect::http_status(const Status& error) const { return openai::http_status(error); }

void Accumulated::add(const GenerationEvent& d) {
  if (d.type == GenerationEvent::Type::started) {
    prompt_tokens = d.prompt_tokens;
    cached_tokens = d.cached_tokens;
    return;
  }
  if (d.type == GenerationEvent::Type::done) {
    finish_reason = d.finish_reason;
    stop_sequence = d.stop_sequence;
    prompt_tokens = d.prompt_tokens;
    completion_tokens = d.completion_tokens;
    cached_tokens = d.cached_tokens;
  }
  text += d.text;
  reasoning += d.reasoning;
  if (d.logprobs.is_array()) logprobs.insert(logprobs.end(), d.logprobs.begin(), d.logprobs.end());
  if (!d.tool_calls.is_array()) return;
  // Tool-call deltas carry an index; names and argument fragments are concatenated per index.
  for (const json& call : d.tool_calls) {
    const size_t index = call.value("index", 0);
    while (tool_calls.size() <= index) {
      tool_calls.push_back({{"id", ""}, {"type", "function"}, {"function", {{"name", ""}, {"arguments", ""}}}});
    }
    json& t = tool_calls[index];
    if (call.contains("id") && call["id"].is_string()) t["id"] = call["id"];
    if (call.contains("function")) {
      const json& f = call["function"];
      if (f.contains("name") && f["name"].is_string())
        t["function"]["name"] = t["function"]["name"].get<std::string>() + f["name"].get<std::string>();
      if (f.contains("arguments") && f["arguments"].is_string()) {
        t["function"]["arguments"] = t["function"]["arguments"].get<std::string>() + f["arguments"].get<std::string>();
      }
    }
  }
}

}  // namespace tandem::gateway
