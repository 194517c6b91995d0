#include "engine/protocol.h"

#include <limits>
#include <nlohmann/json.hpp>
#include <stdexcept>

#include "common/name_table.h"

namespace tandem::engine {
namespace {

using json = nlohmann::json;

std::string dump(const json& j) { return j.dump(-1, ' ', false, json::error_handler_t::replace); }

const char* kind_name(RequestKind k) { return k == RequestKind::chat ? "chat" : "completion"; }

// An integer that fits T. nlohmann's get<T>() and value() convert a float such as 1e30 with a
// plain cast, which is undefined behaviour outside T's range (found by fuzzing); here anything
// but an integer that fits is the peer's error, thrown for decode_* to catch.
template <typename T>
T int_value(const json& v, const char* name) {
  bool fits = false;
  if (v.is_number_unsigned()) {
    fits = v.get<uint64_t>() <= static_cast<uint64_t>(std::numeric_limits<T>::max());
  } else if (v.is_number_integer()) {
    const int64_t x = v.get<int64_t>();
    fits = x >= static_cast<int64_t>(std::numeric_limits<T>::min()) &&
           (x < 0 || static_cast<uint64_t>(x) <= static_cast<uint64_t>(std::numeric_limits<T>::max()));
  }
  if (!fits) throw std::invalid_argument(std::string("'") + name + "' must be an integer in range, got " + v.dump());
  return v.is_number_unsigned() ? static_cast<T>(v.get<uint64_t>()) : static_cast<T>(v.get<int64_t>());
}

// The same for an optional field: `fallback` when absent or null.
template <typename T>
T int_field(const json& j, const char* key, T fallback) {
  auto it = j.find(key);
  return it == j.end() || it->is_null() ? fallback : int_value<T>(*it, key);
}

StatusCode code_from_wire(const std::string& s) {
  if (s == "invalid_argument") return StatusCode::invalid_argument;
  if (s == "resource_exhausted") return StatusCode::resource_exhausted;
  if (s == "unavailable") return StatusCode::unavailable;
  if (s == "cancelled") return StatusCode::cancelled;
  return StatusCode::internal;
}

json prompt_cache_json(const PromptCacheStats& c) {
  json j = {{"per_worker", c.per_worker}, {"per_worker_disk", c.per_worker_disk}};
  for (const PromptCacheField& f : kPromptCacheFields) j[std::string(f.name)] = c.*f.member;
  return j;
}

PromptCacheStats prompt_cache_from(const json& j) {
  PromptCacheStats c;
  if (!j.is_object()) return c;
  for (const PromptCacheField& f : kPromptCacheFields) {
    const std::string name(f.name);
    c.*f.member = int_field(j, name.c_str(), uint64_t{0});
  }
  for (auto [name, out] : {std::pair{"per_worker", &c.per_worker}, std::pair{"per_worker_disk", &c.per_worker_disk}}) {
    const json per = j.value(name, json::object());
    if (!per.is_object()) continue;
    for (const auto& [endpoint, bytes] : per.items()) {
      if (bytes.is_number_unsigned()) (*out)[endpoint] = bytes.get<uint64_t>();
    }
  }
  return c;
}

json speculation_json(const std::string& mode, const SpeculationStats& st) {
  json j = {{"mode", mode}};
  for (const SpeculationField& f : kSpeculationFields) j[std::string(f.name)] = st.*f.member;
  for (const SpeculationTime& f : kSpeculationTimes) j[std::string(f.name)] = st.*f.member;
  if (st.synth_len > 0) j["synthetic_length"] = st.synth_len;
  return j;
}

json status_json(const EngineStatus& s) {
  json j = {{"state", std::string(engine_state_name(s.state))},
            {"load",
             {{"fraction", s.load.fraction},
              {"bytes", s.load.bytes},
              {"total_bytes", s.load.total_bytes},
              {"rate", s.load.rate}}},
            {"slots", {{"busy", s.slots_busy}, {"total", s.slots_total}, {"waiting", s.waiting}}},
            {"tokens_per_s", s.tokens_per_s},
            {"prompt_cache", prompt_cache_json(s.prompt_cache)},
            {"speculative", speculation_json(s.speculative, s.speculation)},
            {"protocol", kProtocolVersion}};
  if (!s.error.empty()) j["error"] = s.error;
  return j;
}

EngineStatus status_from(const json& j) {
  EngineStatus s;
  const std::string state = j.value("state", "");
  const auto known = engine_state_from_name(state);
  if (!known)
    throw std::invalid_argument("'state' must be one of loading, ready, failed, stopped, got '" + state + "'");
  s.state = *known;
  const json load = j.value("load", json::object()), slots = j.value("slots", json::object());
  s.load.fraction = load.value("fraction", 0.0);
  s.load.bytes = int_field(load, "bytes", uint64_t{0});
  s.load.total_bytes = int_field(load, "total_bytes", uint64_t{0});
  s.load.rate = load.value("rate", 0.0);
  s.slots_busy = int_field(slots, "busy", 0);
  s.slots_total = int_field(slots, "total", 0);
  s.waiting = int_field(slots, "waiting", 0);
  s.tokens_per_s = j.value("tokens_per_s", 0.0);
  s.prompt_cache = prompt_cache_from(j.value("prompt_cache", json::object()));
  const json spec = j.value("speculative", json::object());
  if (spec.is_object()) {
    s.speculative = spec.value("mode", "off");
    for (const SpeculationField& f : kSpeculationFields) {
      s.speculation.*f.member = int_field(spec, std::string(f.name).c_str(), uint64_t{0});
    }
    for (const SpeculationTime& f : kSpeculationTimes) s.speculation.*f.member = spec.value(std::string(f.name), 0.0);
    s.speculation.synth_len = spec.value("synthetic_length", 0.0);
  }
  s.error = j.value("error", "");
  return s;
}

Result<json> parse_object(std::string_view line) {
  if (line.size() > kMaxLineBytes)
    return Status::invalid_argument("line of " + std::to_string(line.size()) + " bytes exceeds the limit");
  json j = json::parse(line.begin(), line.end(), nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded()) return Status::invalid_argument("not valid JSON");
  if (!j.is_object()) return Status::invalid_argument("expected a JSON object");
  return j;
}

bool valid_utf8(const std::string& s) {
  try {
    (void)json(s).dump();
    return true;
  } catch (const json::type_error&) {
    return false;
  }
}

// A token's piece may end inside a UTF-8 character (byte-level BPE): then its bytes travel as
// numbers too, since JSON text cannot hold them.
json top_json(const TopLogprob& t) {
  json j = {{"id", t.id}, {"piece", t.piece}, {"logprob", t.logprob}};
  if (!valid_utf8(t.piece)) {
    json bytes = json::array();
    for (char c : t.piece) bytes.push_back(static_cast<unsigned char>(c));
    j["bytes"] = std::move(bytes);
  }
  return j;
}

json logprobs_json(const std::vector<TokenLogprob>& lps) {
  json out = json::array();
  for (const auto& lp : lps) {
    json j = top_json(lp.token);
    json top = json::array();
    for (const auto& t : lp.top) top.push_back(top_json(t));
    j["top"] = std::move(top);
    out.push_back(std::move(j));
  }
  return out;
}

TopLogprob top_from(const json& j) {
  TopLogprob t;
  t.id = int_field(j, "id", int32_t{0});
  t.piece = j.value("piece", "");
  if (j.contains("bytes") && j["bytes"].is_array()) {
    t.piece.clear();
    for (const json& b : j["bytes"]) t.piece.push_back(static_cast<char>(int_value<uint8_t>(b, "bytes")));
  }
  t.logprob = j.value("logprob", 0.0f);
  return t;
}

std::vector<TokenLogprob> logprobs_from(const json& j) {
  std::vector<TokenLogprob> out;
  if (!j.is_array()) return out;
  for (const json& e : j) {
    TokenLogprob lp;
    lp.token = top_from(e);
    for (const json& t : e.value("top", json::array())) lp.top.push_back(top_from(t));
    out.push_back(std::move(lp));
  }
  return out;
}

}  // namespace

std::string_view engine_state_name(EngineState state) { return name_in(kEngineStateNames, state); }

std::optional<EngineState> engine_state_from_name(std::string_view name) { return state_in(kEngineStateNames, name); }

const char* wire_code(StatusCode code) {
  switch (code) {
    case StatusCode::invalid_argument:
    case StatusCode::not_found:
      return "invalid_argument";
    case StatusCode::resource_exhausted:
      return "resource_exhausted";
    case StatusCode::unavailable:
      return "unavailable";
    case StatusCode::cancelled:
      return "cancelled";
    default:
      return "internal";
  }
}

std::string encode_request(const EngineRequest& r) {
  json j;
  switch (r.op) {
    case EngineRequest::Op::submit: {
      j = {{"op", "submit"}, {"id", r.id}, {"kind", kind_name(r.kind)}};
      json body = json::parse(r.body, nullptr, false);
      j["body"] = body.is_discarded() ? json(r.body) : body;  // an unparsable body is the engine's to refuse
      break;
    }
    case EngineRequest::Op::cancel:
      j = {{"op", "cancel"}, {"id", r.id}};
      break;
    case EngineRequest::Op::status:
      j = {{"op", "status"}};
      break;
    case EngineRequest::Op::tokenize:
      j = {{"op", "tokenize"},
           {"id", r.id},
           {"content", r.content},
           {"add_special", r.add_special},
           {"parse_special", r.parse_special}};
      break;
    case EngineRequest::Op::detokenize:
      j = {{"op", "detokenize"}, {"id", r.id}, {"tokens", r.tokens}};
      break;
    case EngineRequest::Op::count: {
      j = {{"op", "count"}, {"id", r.id}, {"kind", kind_name(r.kind)}};
      json body = json::parse(r.body, nullptr, false);
      j["body"] = body.is_discarded() ? json(r.body) : body;
      break;
    }
  }
  return dump(j);
}

std::string encode_event(const EngineEvent& e) {
  json j;
  switch (e.type) {
    case EngineEvent::Type::delta: {
      j = {{"event", "delta"}, {"id", e.id}};
      if (!e.text.empty()) j["text"] = e.text;
      if (!e.reasoning.empty()) j["reasoning"] = e.reasoning;
      if (!e.tool_calls.empty()) {
        json calls = json::array();
        for (const auto& c : e.tool_calls) {
          json call = {{"index", c.index}, {"arguments", c.arguments}};
          if (!c.id.empty()) call["id"] = c.id;
          if (!c.name.empty()) call["name"] = c.name;
          calls.push_back(std::move(call));
        }
        j["tool_calls"] = std::move(calls);
      }
      if (!e.logprobs.empty()) j["logprobs"] = logprobs_json(e.logprobs);
      break;
    }
    case EngineEvent::Type::started:
      j = {{"event", "started"},
           {"id", e.id},
           {"usage", {{"prompt_tokens", e.usage.prompt_tokens}, {"cached_tokens", e.usage.cached_tokens}}}};
      break;
    case EngineEvent::Type::done:
      j = {{"event", "done"},
           {"id", e.id},
           {"finish_reason", e.finish_reason},
           {"usage",
            {{"prompt_tokens", e.usage.prompt_tokens},
             {"completion_tokens", e.usage.completion_tokens},
             {"cached_tokens", e.usage.cached_tokens}}}};
      if (!e.tokens.empty()) j["tokens"] = e.tokens;
      if (!e.stop_sequence.empty()) j["stop_sequence"] = e.stop_sequence;
      if (!e.logprobs.empty()) j["logprobs"] = logprobs_json(e.logprobs);
      break;
    case EngineEvent::Type::result:
      j = {{"event", "result"},  {"id", e.id},           {"tokens", e.tokens},
           {"pieces", e.pieces}, {"content", e.content}, {"count", e.count}};
      break;
    case EngineEvent::Type::error:
      j = {{"event", "error"}, {"code", wire_code(e.code)}, {"message", e.message}};
      j["id"] = e.id.empty() ? json(nullptr) : json(e.id);
      break;
    case EngineEvent::Type::status:
      j = status_json(e.status);
      j["event"] = "status";
      break;
  }
  return dump(j);
}

static Result<EngineRequest> decode_request_json(std::string_view line) {
  auto parsed = parse_object(line);
  if (!parsed.is_ok()) return parsed.status();
  const json& j = parsed.value();
  EngineRequest r;
  const json op = j.value("op", json());
  if (!op.is_string())
    return Status::invalid_argument("'op' must be one of submit, cancel, status, tokenize, detokenize, count");
  const std::string name = op.get<std::string>();
  if (name == "status") {
    r.op = EngineRequest::Op::status;
    return r;
  }
  static const char* kOps = "'op' must be one of submit, cancel, status, tokenize, detokenize, count";
  if (name == "submit")
    r.op = EngineRequest::Op::submit;
  else if (name == "cancel")
    r.op = EngineRequest::Op::cancel;
  else if (name == "tokenize")
    r.op = EngineRequest::Op::tokenize;
  else if (name == "detokenize")
    r.op = EngineRequest::Op::detokenize;
  else if (name == "count")
    r.op = EngineRequest::Op::count;
  else
    return Status::invalid_argument(std::string(kOps) + ", got '" + name + "'");
  if (!j.contains("id") || !j["id"].is_string() || j["id"].get<std::string>().empty()) {
    return Status::invalid_argument("'" + name + "' needs 'id', a non-empty string");
  }
  r.id = j["id"].get<std::string>();
  if (r.op == EngineRequest::Op::cancel) return r;
  if (r.op == EngineRequest::Op::tokenize) {
    if (!j.contains("content") || !j["content"].is_string())
      return Status::invalid_argument("'tokenize' needs 'content', a string");
    r.content = j["content"].get<std::string>();
    r.add_special = j.value("add_special", false);
    r.parse_special = j.value("parse_special", true);
    return r;
  }
  if (r.op == EngineRequest::Op::detokenize) {
    if (!j.contains("tokens") || !j["tokens"].is_array())
      return Status::invalid_argument("'detokenize' needs 'tokens', an array of token ids");
    for (const json& t : j["tokens"]) r.tokens.push_back(int_value<int32_t>(t, "tokens"));
    return r;
  }
  const std::string kind = j.value("kind", "chat");
  if (kind != "chat" && kind != "completion")
    return Status::invalid_argument("'kind' must be chat or completion, got '" + kind + "'");
  r.kind = kind == "chat" ? RequestKind::chat : RequestKind::completion;
  if (!j.contains("body") || !j["body"].is_object())
    return Status::invalid_argument("'" + name + "' needs 'body', the OpenAI request object");
  r.body = dump(j["body"]);
  return r;
}

static Result<EngineEvent> decode_event_json(std::string_view line) {
  auto parsed = parse_object(line);
  if (!parsed.is_ok()) return parsed.status();
  const json& j = parsed.value();
  EngineEvent e;
  const std::string type = j.value("event", "");
  if (j.contains("id") && j["id"].is_string()) e.id = j["id"].get<std::string>();
  if (type == "delta") {
    e.type = EngineEvent::Type::delta;
    e.text = j.value("text", "");
    e.reasoning = j.value("reasoning", "");
    for (const json& c : j.value("tool_calls", json::array())) {
      e.tool_calls.push_back(
          {int_field(c, "index", 0), c.value("id", ""), c.value("name", ""), c.value("arguments", "")});
    }
    e.logprobs = logprobs_from(j.value("logprobs", json()));
  } else if (type == "started") {
    e.type = EngineEvent::Type::started;
    const json u = j.value("usage", json::object());
    e.usage.prompt_tokens = int_field(u, "prompt_tokens", 0);
    e.usage.cached_tokens = int_field(u, "cached_tokens", 0);
  } else if (type == "done") {
    e.type = EngineEvent::Type::done;
    e.finish_reason = j.value("finish_reason", "");
    e.stop_sequence = j.value("stop_sequence", "");
    const json u = j.value("usage", json::object());
    e.usage = {int_field(u, "prompt_tokens", 0), int_field(u, "completion_tokens", 0),
               int_field(u, "cached_tokens", 0)};
    for (const json& t : j.value("tokens", json::array())) {
      e.tokens.push_back(int_value<int32_t>(t, "tokens"));
    }
    e.logprobs = logprobs_from(j.value("logprobs", json()));
  } else if (type == "result") {
    e.type = EngineEvent::Type::result;
    for (const json& t : j.value("tokens", json::array())) e.tokens.push_back(int_value<int32_t>(t, "tokens"));
    for (const json& p : j.value("pieces", json::array()))
      e.pieces.push_back(p.is_string() ? p.get<std::string>() : "");
    e.content = j.value("content", "");
    e.count = int_field(j, "count", 0);
  } else if (type == "error") {
    e.type = EngineEvent::Type::error;
    e.code = code_from_wire(j.value("code", ""));
    e.message = j.value("message", "");
  } else if (type == "status") {
    e.type = EngineEvent::Type::status;
    e.status = status_from(j);
  } else {
    return Status::invalid_argument("unknown event '" + type + "'");
  }
  return e;
}

// A field of the wrong type makes nlohmann throw: that is the peer's error, never a crash.
Result<EngineRequest> decode_request(std::string_view line) {
  try {
    return decode_request_json(line);
  } catch (const std::exception& e) {
    return Status::invalid_argument(e.what());
  }
}

Result<EngineEvent> decode_event(std::string_view line) {
  try {
    return decode_event_json(line);
  } catch (const std::exception& e) {
    return Status::invalid_argument(e.what());
  }
}

}  // namespace tandem::engine
