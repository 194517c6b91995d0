// The routes beyond OpenAI's chat and completions: Anthropic Messages (and its token count),
// OpenAI Responses, one model's object, and llama-server's /tokenize and /detokenize.
#include <httplib.h>

#include <ctime>

#include "gateway/anthropic.h"
#include "gateway/api_server.h"
#include "gateway/http_server.h"
#include "gateway/openai.h"
#include "gateway/responses.h"

namespace tandem::gateway {
namespace {

using nlohmann::json;

void send(httplib::Response& res, const Dialect& d, const Status& s) {
  res.status = d.http_status(s);
  res.set_content(d.error_body(s), "application/json");
}

// The token ids of a /detokenize body ({"tokens": [..]}).
Result<std::vector<int32_t>> token_ids(const json& body) {
  const json t = body.value("tokens", json());
  if (!t.is_array()) return Status::invalid_argument("'tokens' must be an array of token ids");
  std::vector<int32_t> ids;
  for (const json& x : t) {
    if (!x.is_number_integer() || x.get<int64_t>() < 0 || x.get<int64_t>() > INT32_MAX) {
      return Status::invalid_argument("'tokens' must hold token ids (integers >= 0), got " + x.dump());
    }
    ids.push_back(static_cast<int32_t>(x.get<int64_t>()));
  }
  return ids;
}

}  // namespace

void ApiServer::install_client_routes() {
  // httplib matches the path without its query string: Claude Code's /v1/messages?beta=true
  // lands here too.
  server_->Post("/v1/messages", [this](const httplib::Request& req, httplib::Response& res) {
    generate(req, res, std::make_unique<anthropic::MessagesDialect>());
  });
  server_->Post("/v1/messages/count_tokens", [this](const httplib::Request& req, httplib::Response& res) {
    anthropic::MessagesDialect d;
    KeyRecord key;
    if (!authenticate(req, res, &key, &d)) return;
    auto body = parse_json_object(req.body);
    if (!body.is_ok()) return send(res, d, body.status());
    auto chat = anthropic::to_openai(body.value(), options_.model_id);
    if (!chat.is_ok()) return send(res, d, chat.status());
    auto n = backend_->render(Endpoint::chat, chat.value());
    if (!n.is_ok()) return send(res, d, n.status());
    res.set_content(dump_json({{"input_tokens", n->tokens}}), "application/json");
  });
  // llama-server's shape: an OpenAI chat body → {prompt}, the text the model's template renders
  // it to (to check what a client's conversation becomes, and that it keeps its prefix).
  server_->Post("/apply-template", [this](const httplib::Request& req, httplib::Response& res) {
    const openai::OpenAiDialect d(Endpoint::chat);
    KeyRecord key;
    if (!authenticate(req, res, &key)) return;
    auto body = parse_json_object(req.body);
    if (!body.is_ok()) return send(res, d, body.status());
    auto rendered = backend_->render(Endpoint::chat, body.value());
    if (!rendered.is_ok()) return send(res, d, rendered.status());
    res.set_content(dump_json({{"prompt", rendered->prompt}, {"tokens", rendered->tokens}}), "application/json");
  });
  server_->Post("/v1/responses", [this](const httplib::Request& req, httplib::Response& res) {
    generate(req, res, std::make_unique<responses::ResponsesDialect>());
  });
  server_->Get(R"(/v1/models/(.+))", [this](const httplib::Request& req, httplib::Response& res) {
    KeyRecord key;
    if (!authenticate(req, res, &key)) return;
    const std::string id = req.matches[1];
    if (id != options_.model_id) {
      res.status = 404;
      json e = {{"message", "model '" + id + "' is not served here; this server serves '" + options_.model_id + "'"},
                {"type", "invalid_request_error"},
                {"param", "model"},
                {"code", "model_not_found"}};
      res.set_content(dump_json({{"error", e}}), "application/json");
      return;
    }
    res.set_content(dump_json(openai::model_object(options_.model_id, std::time(nullptr))), "application/json");
  });
  // llama-server's shapes: {content, add_special?, with_pieces?} → {tokens}; {tokens} → {content}.
  server_->Post("/tokenize", [this](const httplib::Request& req, httplib::Response& res) {
    const openai::OpenAiDialect d(Endpoint::completion);
    KeyRecord key;
    if (!authenticate(req, res, &key)) return;
    auto body = parse_json_object(req.body);
    if (!body.is_ok()) return send(res, d, body.status());
    const json text = body->contains("content") ? body.value()["content"] : body->value("prompt", json());
    if (!text.is_string())
      return send(res, d, Status::invalid_argument("'content' must be a string (the text to tokenize)"));
    const json add = body->value("add_special", json(false)), pieces = body->value("with_pieces", json(false));
    if (!add.is_boolean() || !pieces.is_boolean())
      return send(res, d, Status::invalid_argument("'add_special' and 'with_pieces' must be booleans"));
    auto tokens = backend_->tokenize(text.get<std::string>(), add.get<bool>());
    if (!tokens.is_ok()) return send(res, d, tokens.status());
    json out = json::array();
    for (const auto& t : tokens.value()) {
      if (pieces.get<bool>())
        out.push_back({{"id", t.id}, {"piece", t.piece}});
      else
        out.push_back(t.id);
    }
    res.set_content(dump_json({{"tokens", out}}), "application/json");
  });
  server_->Post("/detokenize", [this](const httplib::Request& req, httplib::Response& res) {
    const openai::OpenAiDialect d(Endpoint::completion);
    KeyRecord key;
    if (!authenticate(req, res, &key)) return;
    auto body = parse_json_object(req.body);
    if (!body.is_ok()) return send(res, d, body.status());
    auto ids = token_ids(body.value());
    if (!ids.is_ok()) return send(res, d, ids.status());
    auto text = backend_->detokenize(ids.value());
    if (!text.is_ok()) return send(res, d, text.status());
    res.set_content(dump_json({{"content", text.value()}}), "application/json");
  });
}

}  // namespace tandem::gateway
