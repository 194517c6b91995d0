// The OpenAI-compatible HTTP front end: routes, API-key auth, limits, streaming, health, metrics.
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include <nlohmann/json.hpp>

#include "common/status.h"
#include "gateway/backend.h"
#include "gateway/dialect.h"
#include "gateway/keys.h"
#include "gateway/limiter.h"
#include "gateway/metrics.h"
#include "gateway/serve_state.h"

namespace httplib {
class Server;
struct Request;
struct Response;
}  // namespace httplib

namespace tandem::gateway {

class HttpServer;  // httplib::Server with a usable listen backlog (api_server.cpp)

struct ApiOptions {
  std::string host = "127.0.0.1";
  int port = 8080;                  // 0 picks a free port (see ApiServer::port())
  std::string model_id = "tandem";  // the name clients pass as `model`
  bool auth = true;                 // false only with --insecure-no-auth
  size_t max_body_bytes = 4u << 20;
  int read_timeout_s = 30;  // for the request head and body
  int write_timeout_s = 60;
  int keep_alive_s = 5;             // idle keep-alive connections are closed after this
  int max_in_flight = 64;           // generation requests admitted at once; beyond: 503
  int max_tokens = 0;               // cap on every request's generated tokens; 0: none
  int threads = 0;                  // HTTP worker threads; 0 = max_in_flight + 8
  int ping_interval_ms = 1000;      // SSE comment while a stream waits: detects gone clients
  bool status_page_public = false;  // /status.json without a key ([server] status_page_public)
  // Browser origins allowed to call the API ([server] cors_origins); "*" allows any. Empty: CORS
  // off (no Access-Control-* headers, preflights refused).
  std::vector<std::string> cors_origins;
};

// What /health reports and whether generation requests are admitted right now.
struct HealthReport {
  ServeState state = ServeState::ready;
  bool accepting = true;
  int retry_after_s = 5;                             // when not accepting
  nlohmann::json detail = nlohmann::json::object();  // load progress, nodes, ...
  std::string extra_metrics;                         // Prometheus lines of the supervisor (link bytes, node states)
};
using HealthSource = std::function<HealthReport()>;

// Owns the HTTP server and its listening thread. `backend`, `keys` (may be null when auth is off)
// and `health` must outlive the server.
class ApiServer {
 public:
  ApiServer(ApiOptions options, Backend* backend, KeyStore* keys, HealthSource health);
  ~ApiServer();

  // Binds and starts serving in a background thread. An error names the address and why.
  Status start();
  int port() const { return port_; }
  // Stops accepting requests: new generation requests get 503 "draining" from now on.
  void stop_accepting() { draining_ = true; }
  // Generation requests admitted and not finished.
  int in_flight() const { return in_flight_; }
  // What the status page shows besides /health's figures (the plan: nodes, devices, layers).
  // Thread-safe; may be called at any time.
  void set_status_info(nlohmann::json info);
  // Closes the listener and all connections; in-flight streams end.
  void stop();

 private:
  struct Call;  // one generation request in flight
  void install_routes();
  // The routes of client_routes.cpp: Anthropic Messages, OpenAI Responses, one model, tokenize.
  void install_client_routes();
  // CORS (cors.cpp): answers a browser's preflight, marks allowed origins' responses. True when
  // the request is answered here.
  bool handle_cors(const httplib::Request& req, httplib::Response& res) const;
  // One generation request in `dialect`'s shape: key, parse, admission, the backend, the answer.
  void generate(const httplib::Request& req, httplib::Response& res, std::unique_ptr<Dialect> dialect);
  void respond_complete(const std::shared_ptr<Call>& call, httplib::Response& res);
  void respond_stream(const std::shared_ptr<Call>& call, httplib::Response& res);
  // The key in `Authorization: Bearer` (any case) or `X-Api-Key`; "" when none (`problem`, when
  // given, says why an Authorization header was not read).
  static std::string presented_key(const httplib::Request& req, std::string* problem);
  // True when the request carries a key that the key store accepts (nothing is written).
  bool holds_valid_key(const httplib::Request& req) const;
  // Checks the key; on failure writes the 401 in `dialect`'s error shape (OpenAI's when null)
  // and returns false.
  bool authenticate(const httplib::Request& req, httplib::Response& res, KeyRecord* key,
                    const Dialect* dialect = nullptr);
  // Records what an event says of its request: first token, tokens, an error's status.
  void observe(Call& call, const GenerationEvent& e);
  // Ends `call` once: releases its limits and records metrics and usage.
  void finish(Call& call, int http_status);

  const ApiOptions options_;
  Backend* const backend_;
  KeyStore* const keys_;
  const HealthSource health_;
  std::unique_ptr<HttpServer> server_;
  std::thread thread_;
  int port_ = 0;
  Limiter limiter_;
  Metrics metrics_;
  std::atomic<int> in_flight_{0};
  std::atomic<bool> draining_{false};
  std::atomic<uint64_t> next_id_{1};
  std::mutex status_mutex_;
  nlohmann::json status_info_ = nlohmann::json::object();  // guarded by status_mutex_
};

}  // namespace tandem::gateway
