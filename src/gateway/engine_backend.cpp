#include "gateway/engine_backend.h"

namespace tandem::gateway {
namespace {

constexpr int kQueryTimeoutMs = 30000;  // a long conversation's template takes a while to render

nlohmann::json bytes_of(const std::string& s) {
  nlohmann::json b = nlohmann::json::array();
  for (char c : s) b.push_back(static_cast<unsigned char>(c));
  return b;
}

nlohmann::json logprob_json(const engine::TopLogprob& t) {
  return {{"token", t.piece}, {"bytes", bytes_of(t.piece)}, {"logprob", t.logprob}};
}

nlohmann::json logprobs_json(const std::vector<engine::TokenLogprob>& lps) {
  if (lps.empty()) return nullptr;
  nlohmann::json out = nlohmann::json::array();
  for (const auto& lp : lps) {
    nlohmann::json j = logprob_json(lp.token);
    j["top_logprobs"] = nlohmann::json::array();
    for (const auto& t : lp.top) j["top_logprobs"].push_back(logprob_json(t));
    out.push_back(std::move(j));
  }
  return out;
}

}  // namespace

void EngineBackend::set_client(std::shared_ptr<engine::EngineClient> client) {
  std::shared_ptr<engine::EngineClient> old;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    if (client) reason_.clear();  // a new engine has no failure yet
    old = std::move(client_);
    client_ = std::move(client);
  }
  // Destroyed outside the lock: its reader thread delivers final errors through callbacks that
  // take the lock.
  old.reset();
}

void EngineBackend::set_failure_reason(const std::string& why) {
  std::lock_guard<std::mutex> lock(mutex_);
  reason_ = why;
}

std::shared_ptr<engine::EngineClient> EngineBackend::client() {
  std::lock_guard<std::mutex> lock(mutex_);
  return client_;
}

GenerationEvent EngineBackend::convert(const engine::EngineEvent& e) {
  GenerationEvent g;
  switch (e.type) {
    case engine::EngineEvent::Type::delta: {
      g.type = GenerationEvent::Type::delta;
      g.text = e.text;
      g.reasoning = e.reasoning;
      if (!e.tool_calls.empty()) {
        g.tool_calls = nlohmann::json::array();
        for (const auto& t : e.tool_calls) {
          nlohmann::json call = {{"index", t.index}, {"type", "function"}, {"function", {{"arguments", t.arguments}}}};
          if (!t.id.empty()) call["id"] = t.id;
          if (!t.name.empty()) call["function"]["name"] = t.name;
          g.tool_calls.push_back(call);
        }
      }
      g.logprobs = logprobs_json(e.logprobs);
      break;
    }
    case engine::EngineEvent::Type::started:
      g.type = GenerationEvent::Type::started;
      g.prompt_tokens = static_cast<uint64_t>(e.usage.prompt_tokens);
      g.cached_tokens = static_cast<uint64_t>(e.usage.cached_tokens);
      break;
    case engine::EngineEvent::Type::done:
      g.type = GenerationEvent::Type::done;
      g.finish_reason = e.finish_reason;
      g.prompt_tokens = static_cast<uint64_t>(e.usage.prompt_tokens);
      g.completion_tokens = static_cast<uint64_t>(e.usage.completion_tokens);
      g.cached_tokens = static_cast<uint64_t>(e.usage.cached_tokens);
      g.stop_sequence = e.stop_sequence;
      g.logprobs = logprobs_json(e.logprobs);
      break;
    default: {
      g.type = GenerationEvent::Type::error;
      switch (e.code) {
        case StatusCode::invalid_argument:
          g.error = Status::invalid_argument(e.message);
          break;
        case StatusCode::resource_exhausted:
          g.error = Status::resource_exhausted(e.message);
          break;
        case StatusCode::cancelled:
          g.error = Status::cancelled(e.message);
          break;
        case StatusCode::internal:
          g.error = Status::internal(e.message);
          break;
        default:
          g.error = Status::unavailable(e.message);
          break;
      }
    }
  }
  return g;
}

Status EngineBackend::submit(const GenerationRequest& request, EventSink sink) {
  auto c = client();
  if (!c || !c->connected()) return Status::unavailable("the engine is not running");
  const auto kind = request.endpoint == Endpoint::chat ? engine::RequestKind::chat : engine::RequestKind::completion;
  return c->submit(request.id, kind, request.body.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace),
                   [this, sink](const engine::EngineEvent& e) {
                     // A cancelled request ends like one that stopped: the client asked for it.
                     if (e.type == engine::EngineEvent::Type::error && e.code == StatusCode::cancelled) {
                       GenerationEvent done;
                       done.type = GenerationEvent::Type::done;
                       done.finish_reason = "stop";
                       sink(done);
                       return;
                     }
                     GenerationEvent g = convert(e);
                     if (g.type == GenerationEvent::Type::error && g.error.code() == StatusCode::unavailable) {
                       std::lock_guard<std::mutex> lock(mutex_);
                       if (!reason_.empty()) g.error = Status::unavailable(reason_ + " (" + g.error.message() + ")");
                     }
                     sink(g);
                   });
}

void EngineBackend::cancel(const std::string& id) {
  if (auto c = client()) c->cancel(id);
}

namespace {
Result<engine::EngineEvent> ask(const std::shared_ptr<engine::EngineClient>& c, engine::EngineRequest r) {
  if (!c || !c->connected()) return Status::unavailable("the engine is not running");
  return c->query(std::move(r), kQueryTimeoutMs);
}
}  // namespace

Result<std::vector<Backend::Token>> EngineBackend::tokenize(const std::string& text, bool add_special) {
  engine::EngineRequest r;
  r.op = engine::EngineRequest::Op::tokenize;
  r.content = text;
  r.add_special = add_special;
  auto e = ask(client(), std::move(r));
  if (!e.is_ok()) return e.status();
  std::vector<Token> out;
  for (size_t i = 0; i < e->tokens.size(); ++i) out.push_back({e->tokens[i], i < e->pieces.size() ? e->pieces[i] : ""});
  return out;
}

Result<std::string> EngineBackend::detokenize(const std::vector<int32_t>& tokens) {
  engine::EngineRequest r;
  r.op = engine::EngineRequest::Op::detokenize;
  r.tokens = tokens;
  auto e = ask(client(), std::move(r));
  if (!e.is_ok()) return e.status();
  return e->content;
}

Result<Backend::Rendered> EngineBackend::render(Endpoint endpoint, const nlohmann::json& body) {
  engine::EngineRequest r;
  r.op = engine::EngineRequest::Op::count;
  r.kind = endpoint == Endpoint::chat ? engine::RequestKind::chat : engine::RequestKind::completion;
  r.body = body.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
  auto e = ask(client(), std::move(r));
  if (!e.is_ok()) return e.status();
  return Rendered{e->content, e->count};
}

}  // namespace tandem::gateway
