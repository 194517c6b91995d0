#include "gateway/api_server.h"

#include <httplib.h>
#include <netdb.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cctype>
#include <cerrno>
#include <chrono>
#include <condition_variable>
#include <cstring>
#include <ctime>
#include <deque>

#include "gateway/access_log.h"
#include "gateway/http_server.h"
#include "gateway/openai.h"
#include "gateway/status_page.h"

namespace tandem::gateway {
namespace {

using nlohmann::json;
using Clock = std::chrono::steady_clock;

// The server's cap on generated tokens: every limit the OpenAI body gives is lowered to it, and a
// body without one gets it. A limit that is not a number is left to the engine to refuse.
void cap_max_tokens(json& body, int cap) {
  bool any = false;
  for (const char* k : {"max_tokens", "max_completion_tokens", "n_predict"}) {
    if (!body.contains(k) || !body[k].is_number_integer()) continue;
    any = true;
    const int64_t asked = body[k].get<int64_t>();
    if (asked < 0 || asked > cap) body[k] = cap;  // n_predict -1: no limit
  }
  if (!any) body["max_tokens"] = cap;
}

void send_error(httplib::Response& res, const Dialect& d, const Status& s, int retry_after_s = 0) {
  res.status = d.http_status(s);
  if (retry_after_s > 0) res.set_header("Retry-After", std::to_string(retry_after_s));
  res.set_content(d.error_body(s), "application/json");
}

std::string dump(const json& j) { return dump_json(j); }

bool iequals_prefix(const std::string& s, const std::string& prefix) {
  if (s.size() < prefix.size()) return false;
  for (size_t i = 0; i < prefix.size(); ++i) {
    if (std::tolower(static_cast<unsigned char>(s[i])) != std::tolower(static_cast<unsigned char>(prefix[i])))
      return false;
  }
  return true;
}

// Why binding host:port fails, from a plain bind of the same address (httplib keeps the errno to
// itself).
std::string bind_failure(const std::string& host, int port) {
  addrinfo hints{}, *found = nullptr;
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = AI_PASSIVE;
  if (const int rc = ::getaddrinfo(host.c_str(), std::to_string(port).c_str(), &hints, &found); rc != 0) {
    return std::string("cannot resolve the host: ") + ::gai_strerror(rc);
  }
  std::string why = "bind failed";
  for (addrinfo* a = found; a != nullptr; a = a->ai_next) {
    const int fd = ::socket(a->ai_family, a->ai_socktype, a->ai_protocol);
    if (fd < 0) continue;
    int yes = 1;
    ::setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &yes, sizeof yes);
    const bool bound = ::bind(fd, a->ai_addr, a->ai_addrlen) == 0;
    const int err = errno;
    ::close(fd);
    if (bound) continue;
    why = err == EADDRINUSE ? "the address is already in use (another tandem serve, or another program, listens there)"
          : err == EADDRNOTAVAIL ? "not an address of this machine"
          : err == EACCES        ? "permission denied (ports below 1024 need privileges)"
                                 : std::strerror(err);
    break;
  }
  ::freeaddrinfo(found);
  return why;
}

}  // namespace

struct ApiServer::Call {
  GenerationRequest request;
  std::unique_ptr<Dialect> dialect;
  CallInfo info;
  KeyRecord key;
  Clock::time_point started = Clock::now();
  Clock::time_point first_token{};  // the first delta's arrival; epoch while none came
  int error_status = 0;             // a stream that ended in an error: that error's HTTP status
  std::atomic<bool> finished{false};
  Accumulated result;

  std::mutex mutex;
  std::condition_variable cv;
  std::deque<GenerationEvent> events;  // guarded by mutex

  void push(const GenerationEvent& e) {
    std::lock_guard<std::mutex> lock(mutex);
    events.push_back(e);
    cv.notify_all();
  }
  // Waits up to `timeout` for the next event; false when none came.
  bool pop(GenerationEvent* e, std::chrono::milliseconds timeout) {
    std::unique_lock<std::mutex> lock(mutex);
    if (!cv.wait_for(lock, timeout, [&] { return !events.empty(); })) return false;
    *e = std::move(events.front());
    events.pop_front();
    return true;
  }
};

ApiServer::ApiServer(ApiOptions options, Backend* backend, KeyStore* keys, HealthSource health)
    : options_(std::move(options)),
      backend_(backend),
      keys_(keys),
      health_(std::move(health)),
      server_(std::make_unique<HttpServer>()) {
  const int threads = options_.threads > 0 ? options_.threads : options_.max_in_flight + 8;
  server_->new_task_queue = [threads] { return new httplib::ThreadPool(threads); };
  server_->set_payload_max_length(options_.max_body_bytes);
  server_->set_read_timeout(options_.read_timeout_s, 0);
  server_->set_write_timeout(options_.write_timeout_s, 0);
  server_->set_keep_alive_timeout(options_.keep_alive_s);
  // httplib's default sets SO_REUSEPORT, with which a second gateway on the same port starts
  // without a word and the kernel splits the connections between the two. SO_REUSEADDR alone
  // still allows a restart while old connections linger in TIME_WAIT.
  server_->set_socket_options([](int sock) {
    int yes = 1;
    ::setsockopt(sock, SOL_SOCKET, SO_REUSEADDR, &yes, sizeof yes);
  });
  install_routes();
}

ApiServer::~ApiServer() { stop(); }

Status ApiServer::start() {
  if (options_.port == 0) {
    port_ = server_->bind_to_any_port(options_.host);
  } else {
    port_ = server_->bind_to_port(options_.host, options_.port) ? options_.port : -1;
  }
  if (port_ <= 0) {
    port_ = -1;
    return Status::unavailable("cannot listen on " + options_.host + ":" + std::to_string(options_.port) + ": " +
                               bind_failure(options_.host, options_.port));
  }
  if (const int err = server_->set_listen_backlog(SOMAXCONN); err != 0) {
    server_->close_listener();
    const std::string address = options_.host + ":" + std::to_string(port_);
    port_ = -1;
    return Status::unavailable("cannot set the listen backlog on " + address + ": " + std::strerror(err));
  }
  thread_ = std::thread([this] { server_->listen_after_bind(); });
  // httplib's stop() is a no-op until the listen loop runs, so a stop right after start would
  // otherwise leave the loop running forever.
  for (int i = 0; i < 500 && !server_->is_running(); ++i) std::this_thread::sleep_for(std::chrono::milliseconds(2));
  return Status::ok();
}

void ApiServer::stop() {
  draining_ = true;
  if (server_) server_->stop();
  if (thread_.joinable()) thread_.join();
}

void ApiServer::install_routes() {
  server_->set_pre_routing_handler([this](const httplib::Request& req, httplib::Response& res) {
    access_log::begin();
    return handle_cors(req, res) ? httplib::Server::HandlerResponse::Handled
                                 : httplib::Server::HandlerResponse::Unhandled;
  });
  server_->set_logger([](const httplib::Request& req, const httplib::Response& res) { access_log::write(req, res); });
  // Public, for load balancers and probes: the state and the HTTP status. The details (worker
  // addresses, errors, pids) only with a key, or when the status page is public.
  server_->Get("/health", [this](const httplib::Request& req, httplib::Response& res) {
    const HealthReport h = health_();
    const bool details = options_.status_page_public || !options_.auth || holds_valid_key(req);
    json body = details ? h.detail : json::object();
    body["state"] = std::string(serve_state_name(draining_ ? ServeState::draining : h.state));
    body["accepting"] = h.accepting && !draining_;
    if (details) body["requests_in_flight"] = in_flight_.load();
    res.status = (h.accepting && !draining_) ? 200 : 503;
    res.set_content(dump(body), "application/json");
  });
  server_->Get("/metrics", [this](const httplib::Request&, httplib::Response& res) {
    metrics_.set_in_flight(in_flight_);
    const HealthReport h = health_();
    res.set_content(metrics_.render(draining_ ? ServeState::draining : h.state) + h.extra_metrics,
                    "text/plain; version=0.0.4");
  });
  // The status page: the HTML holds no data and is public; the figures come from /status.json,
  // which needs a key unless [server] status_page_public is set.
  server_->Get("/", [](const httplib::Request&, httplib::Response& res) {
    res.set_header("Cache-Control", "no-store");
    res.set_header(
        "Content-Security-Policy",
        "default-src 'none'; script-src 'unsafe-inline'; style-src 'unsafe-inline'; connect-src 'self'; img-src data:");
    res.set_content(status_page_html(), "text/html; charset=utf-8");
  });
  server_->Get("/status.json", [this](const httplib::Request& req, httplib::Response& res) {
    KeyRecord key;
    if (!options_.status_page_public && !authenticate(req, res, &key)) return;
    json info;
    {
      std::lock_guard<std::mutex> lock(status_mutex_);
      info = status_info_;
    }
    const HealthReport h = health_();
    res.set_header("Cache-Control", "no-store");
    res.set_content(
        dump(status_snapshot(h, info, std::string(serve_state_name(draining_ ? ServeState::draining : h.state)),
                             in_flight_.load(), options_.model_id)),
        "application/json");
  });
  server_->Get("/v1/models", [this](const httplib::Request& req, httplib::Response& res) {
    KeyRecord key;
    if (!authenticate(req, res, &key)) return;
    res.set_content(dump(openai::models_response(options_.model_id, std::time(nullptr))), "application/json");
  });
  server_->Post("/v1/chat/completions", [this](const httplib::Request& req, httplib::Response& res) {
    generate(req, res, std::make_unique<openai::OpenAiDialect>(Endpoint::chat));
  });
  server_->Post("/v1/completions", [this](const httplib::Request& req, httplib::Response& res) {
    generate(req, res, std::make_unique<openai::OpenAiDialect>(Endpoint::completion));
  });
  install_client_routes();
  // Every other path, and errors httplib raises itself (e.g. 413 for a body over the limit).
  server_->set_error_handler([](const httplib::Request& req, httplib::Response& res) {
    if (!res.body.empty()) return;
    Status s = res.status == 413   ? Status::invalid_argument("request body too large")
               : res.status == 404 ? Status::invalid_argument("no route " + req.method + " " + req.path)
                                   : Status::invalid_argument("bad request");
    const int status = res.status;
    res.set_content(openai::error_body(s), "application/json");
    res.status = status;
  });
  server_->set_exception_handler([](const httplib::Request&, httplib::Response& res, std::exception_ptr) {
    send_error(res, openai::OpenAiDialect(Endpoint::chat),
               Status::internal("unexpected error while handling the request"));
  });
}

void ApiServer::set_status_info(nlohmann::json info) {
  std::lock_guard<std::mutex> lock(status_mutex_);
  status_info_ = std::move(info);
}

// The key a request presents: `Authorization: Bearer <key>` (the scheme in any case, as RFC 9110
// has it) or `X-Api-Key: <key>` (Anthropic's clients). "" when none.
std::string ApiServer::presented_key(const httplib::Request& req, std::string* problem) {
  const std::string header = req.get_header_value("Authorization");
  if (!header.empty()) {
    if (iequals_prefix(header, "Bearer ")) {
      size_t at = 7;
      while (at < header.size() && header[at] == ' ') ++at;
      return header.substr(at);
    }
    if (problem) *problem = "the Authorization header must be 'Bearer <key>'";
  }
  return req.get_header_value("X-Api-Key");
}

bool ApiServer::holds_valid_key(const httplib::Request& req) const {
  const std::string key = presented_key(req, nullptr);
  return keys_ != nullptr && !key.empty() && keys_->authenticate(key).is_ok();
}

bool ApiServer::authenticate(const httplib::Request& req, httplib::Response& res, KeyRecord* key,
                             const Dialect* dialect) {
  if (!options_.auth) {
    key->id = key->name = "anonymous";
    access_log::note().key = key->name;
    return true;
  }
  const openai::OpenAiDialect fallback(Endpoint::chat);
  const Dialect& d = dialect != nullptr ? *dialect : fallback;
  auto refuse = [&](const std::string& message) {
    res.status = 401;
    res.set_header("WWW-Authenticate", "Bearer");
    res.set_content(d.unauthorized_body(message), "application/json");
    return false;
  };
  std::string problem;
  const std::string presented = presented_key(req, &problem);
  if (presented.empty()) {
    if (!problem.empty()) return refuse(problem);
    return refuse(
        "missing API key: send 'Authorization: Bearer <key>' or 'X-Api-Key: <key>' (create one with `tandem keys "
        "create`)");
  }
  auto k = keys_->authenticate(presented);
  if (!k.is_ok()) return refuse("invalid API key: " + k.status().message());
  *key = k.value();
  access_log::note().key = key->name;
  return true;
}

void ApiServer::generate(const httplib::Request& req, httplib::Response& res, std::unique_ptr<Dialect> dialect) {
  const std::string name = dialect->name();
  const auto started = Clock::now();
  auto refuse = [&](const Status& s, int retry_after) {
    send_error(res, *dialect, s, retry_after);
    metrics_.request_finished(name, res.status, std::chrono::duration<double>(Clock::now() - started).count());
  };
  KeyRecord key;
  if (!authenticate(req, res, &key, dialect.get())) {
    metrics_.request_finished(name, 401, 0);
    return;
  }
  auto body = dialect->parse(req.body, options_.model_id);
  if (!body.is_ok()) return refuse(body.status(), 0);
  if (options_.max_tokens > 0) cap_max_tokens(body.value(), options_.max_tokens);
  access_log::note().model = body->value("model", "");
  const HealthReport health = health_();
  if (draining_) return refuse(Status::unavailable("the server is shutting down"), 5);
  if (!health.accepting) {
    return refuse(
        Status::unavailable("the cluster is " + std::string(serve_state_name(health.state)) + "; see /health"),
        health.retry_after_s);
  }
  if (in_flight_.fetch_add(1) >= options_.max_in_flight) {
    --in_flight_;
    return refuse(Status::unavailable("server busy: " + std::to_string(options_.max_in_flight) + " requests in flight"),
                  2);
  }
  const Admission admission = limiter_.acquire(key.id, key.limits);
  if (!admission.admitted) {
    --in_flight_;
    return refuse(Status::resource_exhausted("rate limit: " + admission.reason), admission.retry_after_s);
  }

  auto call = std::make_shared<Call>();
  call->request.endpoint = dialect->endpoint();
  call->request.body = std::move(body.value());
  call->request.id = dialect->id_prefix() + std::to_string(std::time(nullptr)) + "-" + std::to_string(next_id_++);
  call->info = {call->request.id, options_.model_id, std::time(nullptr), call->request.body};
  call->dialect = std::move(dialect);
  call->key = key;
  call->started = started;

  Status submitted = backend_->submit(call->request, [call](const GenerationEvent& e) { call->push(e); });
  if (!submitted.is_ok()) {
    send_error(res, *call->dialect, submitted, submitted.code() == StatusCode::unavailable ? health.retry_after_s : 0);
    finish(*call, res.status);
    return;
  }
  if (call->dialect->streaming()) {
    // A request the engine rejects at once (a bad field) answers with its HTTP status, as OpenAI
    // does, instead of a 200 stream that carries an error.
    GenerationEvent first;
    if (call->pop(&first, std::chrono::milliseconds(200))) {
      if (first.type == GenerationEvent::Type::error) {
        send_error(res, *call->dialect, first.error, first.error.code() == StatusCode::unavailable ? 5 : 0);
        finish(*call, res.status);
        return;
      }
      std::lock_guard<std::mutex> lock(call->mutex);
      call->events.push_front(std::move(first));
    }
    respond_stream(call, res);
  } else {
    respond_complete(call, res);
  }
}

void ApiServer::respond_complete(const std::shared_ptr<Call>& call, httplib::Response& res) {
  GenerationEvent e;
  for (;;) {
    if (!call->pop(&e, std::chrono::milliseconds(1000))) continue;  // the backend always ends with done or error
    observe(*call, e);
    if (e.type == GenerationEvent::Type::delta || e.type == GenerationEvent::Type::started) {
      call->result.add(e);
      continue;
    }
    break;
  }
  if (e.type == GenerationEvent::Type::error) {
    send_error(res, *call->dialect, e.error, e.error.code() == StatusCode::unavailable ? 5 : 0);
  } else {
    res.status = 200;
    call->result.add(e);
    call->result.finish_reason = e.finish_reason;
    res.set_content(dump(call->dialect->response(call->info, call->result)), "application/json");
  }
  finish(*call, res.status);
}

void ApiServer::respond_stream(const std::shared_ptr<Call>& call, httplib::Response& res) {
  res.set_header("Cache-Control", "no-cache");
  res.set_header("X-Accel-Buffering", "no");
  struct Progress {
    bool opened = false;      // stream_open() was written
    bool first_event = true;  // no generation event was written yet
  };
  auto progress = std::make_shared<Progress>();
  res.set_chunked_content_provider(
      "text/event-stream",
      [this, call, progress](size_t, httplib::DataSink& sink) {
        std::string out = progress->opened ? std::string() : call->dialect->stream_open(call->info);
        progress->opened = true;
        GenerationEvent e;
        if (!call->pop(&e, std::chrono::milliseconds(options_.ping_interval_ms))) {
          // A keep-alive keeps proxies from timing out and finds clients that went away.
          out += call->dialect->stream_ping();
          if (!sink.write(out.data(), out.size())) {
            backend_->cancel(call->request.id);
            return false;
          }
          return true;
        }
        observe(*call, e);
        if (e.type == GenerationEvent::Type::error) {
          out += call->dialect->stream_error(call->info, e.error);
        } else if (e.type == GenerationEvent::Type::started) {
          call->result.add(e);
          out += call->dialect->stream_started(call->info, call->result);
        } else {
          call->result.add(e);
          out += call->dialect->stream_event(call->info, e, progress->first_event);
          progress->first_event = false;
        }
        if (!out.empty() && !sink.write(out.data(), out.size())) {
          backend_->cancel(call->request.id);
          return false;
        }
        if (e.type == GenerationEvent::Type::done || e.type == GenerationEvent::Type::error) sink.done();
        return true;
      },
      [this, call](bool success) { finish(*call, success ? 200 : 499); });
}

void ApiServer::observe(Call& call, const GenerationEvent& e) {
  if (e.type == GenerationEvent::Type::delta && call.first_token == Clock::time_point{})
    call.first_token = Clock::now();
  if (e.type == GenerationEvent::Type::error) call.error_status = openai::http_status(e.error);
  if (e.type == GenerationEvent::Type::started || e.type == GenerationEvent::Type::done) {
    call.result.prompt_tokens = e.prompt_tokens;
    call.result.cached_tokens = e.cached_tokens;
  }
  if (e.type == GenerationEvent::Type::done) call.result.completion_tokens = e.completion_tokens;
  // Events are taken on the request's own thread: its access-log line learns them here.
  access_log::Note& n = access_log::note();
  n.prompt_tokens = call.result.prompt_tokens;
  n.completion_tokens = call.result.completion_tokens;
  n.cached_tokens = call.result.cached_tokens;
  if (call.first_token != Clock::time_point{})
    n.ttft_s = std::chrono::duration<double>(call.first_token - call.started).count();
  n.status = call.error_status;
}

void ApiServer::finish(Call& call, int http_status) {
  if (call.finished.exchange(true)) return;
  limiter_.release(call.key.id);
  --in_flight_;
  // A stream that began with 200 and ended in an error is a failed request.
  const int status = call.error_status != 0 ? call.error_status : http_status;
  const double ttft = call.first_token == Clock::time_point{}
                          ? -1
                          : std::chrono::duration<double>(call.first_token - call.started).count();
  metrics_.request_finished(call.dialect->name(), status,
                            std::chrono::duration<double>(Clock::now() - call.started).count(), ttft);
  metrics_.tokens(call.result.prompt_tokens, call.result.completion_tokens);
  if (keys_ != nullptr && options_.auth && (call.result.prompt_tokens || call.result.completion_tokens)) {
    keys_->record_usage(call.key.id, call.result.prompt_tokens, call.result.completion_tokens);
  }
}

}  // namespace tandem::gateway
