// The HTTP front end against a scripted backend: auth, limits, validation, streaming, health.
#include "gateway/api_server.h"

#include <arpa/inet.h>
#include <httplib.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <future>
#include <map>
#include <set>
#include <sstream>
#include <thread>
#include <vector>

#include <gtest/gtest.h>

#include "fake_backend.h"

namespace tandem::gateway {
namespace {

using nlohmann::json;
using testing::FakeBackend;

class ApiServerTest : public ::testing::Test {
 protected:
  void SetUp() override {
    keys_ = KeyStore::open(":memory:").value();
    key_ = keys_->create("test", {}).value().secret;
    start({});
  }
  void start(ApiOptions o) {
    client_.reset();  // its keep-alive connection would hold the old server's worker thread
    server_.reset();
    o.port = 0;
    o.model_id = "tiny";
    o.ping_interval_ms = 50;
    server_ = std::make_unique<ApiServer>(o, &backend_, keys_.get(), [this] { return health_; });
    ASSERT_TRUE(server_->start().is_ok());
    client_ = std::make_unique<httplib::Client>("127.0.0.1", server_->port());
    client_->set_read_timeout(10, 0);
  }
  httplib::Headers auth(const std::string& key) { return {{"Authorization", "Bearer " + key}}; }
  httplib::Result post(const std::string& path, const json& body, const std::string& key) {
    return client_->Post(path.c_str(), auth(key), body.dump(), "application/json");
  }
  json chat(bool stream = false) {
    return {{"model", "tiny"}, {"messages", {{{"role", "user"}, {"content", "hi"}}}}, {"stream", stream}};
  }
  static std::string error_message(const httplib::Result& r) { return json::parse(r->body)["error"]["message"]; }

  FakeBackend backend_;
  std::unique_ptr<KeyStore> keys_;
  std::string key_;
  HealthReport health_;
  std::unique_ptr<ApiServer> server_;
  std::unique_ptr<httplib::Client> client_;
};

TEST_F(ApiServerTest, ChatCompletionReturnsTheWholeAnswerWithUsage) {
  auto r = post("/v1/chat/completions", chat(), key_);
  ASSERT_TRUE(r);
  ASSERT_EQ(r->status, 200) << r->body;
  json j = json::parse(r->body);
  EXPECT_EQ(j["object"], "chat.completion");
  EXPECT_EQ(j["model"], "tiny");
  EXPECT_EQ(j["choices"][0]["message"]["role"], "assistant");
  EXPECT_EQ(j["choices"][0]["message"]["content"], "Hello, world!");
  EXPECT_EQ(j["choices"][0]["finish_reason"], "length");
  EXPECT_EQ(j["usage"]["prompt_tokens"], 7);
  EXPECT_EQ(j["usage"]["completion_tokens"], 4);
  EXPECT_EQ(j["usage"]["total_tokens"], 11);
  // Usage is recorded against the key.
  auto all = keys_->list().value();
  EXPECT_EQ(all[0].requests, 1u);
  EXPECT_EQ(all[0].completion_tokens, 4u);
}

TEST_F(ApiServerTest, StreamingSendsChunksUsageAndDone) {
  json body = chat(true);
  body["stream_options"] = {{"include_usage", true}};
  auto r = post("/v1/chat/completions", body, key_);
  ASSERT_TRUE(r);
  ASSERT_EQ(r->status, 200);
  EXPECT_EQ(r->get_header_value("Content-Type"), "text/event-stream");
  std::string text;
  std::vector<json> chunks;
  bool done = false;
  std::istringstream in(r->body);
  for (std::string line; std::getline(in, line);) {
    if (line.rfind("data: ", 0) != 0) continue;
    if (line == "data: [DONE]") {
      done = true;
      continue;
    }
    chunks.push_back(json::parse(line.substr(6)));
  }
  ASSERT_TRUE(done);
  ASSERT_GE(chunks.size(), 3u);
  EXPECT_EQ(chunks.front()["choices"][0]["delta"]["role"], "assistant");
  for (const auto& c : chunks) {
    EXPECT_EQ(c["object"], "chat.completion.chunk");
    if (!c["choices"].empty()) text += c["choices"][0]["delta"].value("content", "");
  }
  EXPECT_EQ(text, "Hello, world!");
  EXPECT_EQ(chunks[chunks.size() - 2]["choices"][0]["finish_reason"], "length");
  EXPECT_TRUE(chunks.back()["choices"].empty());
  EXPECT_EQ(chunks.back()["usage"]["completion_tokens"], 4);
}

TEST_F(ApiServerTest, CompletionsEndpointUsesTextCompletionShape) {
  auto r = post("/v1/completions", {{"model", "tiny"}, {"prompt", "Once"}, {"max_tokens", 4}}, key_);
  ASSERT_TRUE(r);
  ASSERT_EQ(r->status, 200) << r->body;
  json j = json::parse(r->body);
  EXPECT_EQ(j["object"], "text_completion");
  EXPECT_EQ(j["choices"][0]["text"], "Hello, world!");
  EXPECT_EQ(backend_.last_body["max_tokens"], 4);  // the body reaches the backend as sent
}

// [server] max_tokens caps every request's generation, whatever it asks for and in every API:
// a lower limit stays, a higher one or none (Codex sends none) becomes the cap.
TEST_F(ApiServerTest, TheServersMaxTokensCapsEveryRequest) {
  ApiOptions o;
  o.max_tokens = 5;
  start(o);
  const json msgs = json::array({{{"role", "user"}, {"content", "hi"}}});
  struct Case {
    std::string path;
    json body;
    std::string field;  // where the limit reaches the backend
    int want;
  };
  for (const Case& c :
       {Case{"/v1/chat/completions", {{"messages", msgs}}, "max_tokens", 5},
        Case{"/v1/chat/completions", {{"messages", msgs}, {"max_tokens", 3}}, "max_tokens", 3},
        Case{"/v1/chat/completions", {{"messages", msgs}, {"max_completion_tokens", 90}}, "max_completion_tokens", 5},
        Case{"/v1/completions", {{"prompt", "x"}, {"n_predict", -1}}, "n_predict", 5},
        Case{"/v1/messages", {{"messages", msgs}, {"max_tokens", 32000}}, "max_tokens", 5},
        Case{"/v1/responses", {{"input", "hi"}}, "max_tokens", 5}}) {
    auto r = post(c.path, c.body, key_);
    ASSERT_TRUE(r && r->status == 200) << c.path << ": " << (r ? r->body : "no answer");
    std::lock_guard<std::mutex> lock(backend_.mutex_);
    EXPECT_EQ(backend_.last_body[c.field], c.want) << c.path << " " << c.body.dump();
  }
}

TEST_F(ApiServerTest, MissingWrongAndRevokedKeysGet401) {
  auto none = client_->Post("/v1/chat/completions", chat().dump(), "application/json");
  ASSERT_TRUE(none);
  EXPECT_EQ(none->status, 401);
  EXPECT_NE(error_message(none).find("missing API key"), std::string::npos);
  auto wrong = post("/v1/chat/completions", chat(), "tdm_00000000_" + std::string(48, '0'));
  EXPECT_EQ(wrong->status, 401);
  EXPECT_EQ(json::parse(wrong->body)["error"]["type"], "authentication_error");
  ASSERT_TRUE(keys_->revoke("test").is_ok());
  EXPECT_EQ(post("/v1/chat/completions", chat(), key_)->status, 401);
  EXPECT_EQ(client_->Get("/v1/models", auth(key_))->status, 401);
  EXPECT_EQ(backend_.submitted, 0);
}

TEST_F(ApiServerTest, ModelsListsTheServedModel) {
  auto r = client_->Get("/v1/models", auth(key_));
  ASSERT_EQ(r->status, 200);
  EXPECT_EQ(json::parse(r->body)["data"][0]["id"], "tiny");
}

TEST_F(ApiServerTest, BadRequestsNameThePositionOrField) {
  auto bad_json = client_->Post("/v1/chat/completions", auth(key_), "{\"model\": \"tiny\",, }", "application/json");
  EXPECT_EQ(bad_json->status, 400);
  EXPECT_NE(error_message(bad_json).find("at byte 18"), std::string::npos) << bad_json->body;
  json no_messages = {{"model", "tiny"}};
  EXPECT_NE(error_message(post("/v1/chat/completions", no_messages, key_)).find("'messages'"), std::string::npos);
  json bad_role = chat();
  bad_role["messages"][0]["role"] = "wizard";
  EXPECT_NE(error_message(post("/v1/chat/completions", bad_role, key_)).find("messages[0].role"), std::string::npos);
  json other_model = chat();
  other_model["model"] = "gpt-4";
  auto nf = post("/v1/chat/completions", other_model, key_);
  EXPECT_EQ(nf->status, 404);
  EXPECT_NE(error_message(nf).find("serves 'tiny'"), std::string::npos);
  json unknown_field = chat();
  unknown_field["some_future_option"] = true;
  EXPECT_EQ(post("/v1/chat/completions", unknown_field, key_)->status, 200);
  auto big = client_->Post("/v1/chat/completions", auth(key_), std::string(5u << 20, ' '), "application/json");
  ASSERT_TRUE(big);
  EXPECT_EQ(big->status, 413);
}

// Found by fuzzing (tests/fuzz/openai_request_fuzz.cpp): a number beyond a double's range is valid
// JSON syntax that nlohmann-json refuses with an out_of_range exception, not a parse_error; it
// used to reach the HTTP library's exception handler and come back as a 500.
TEST_F(ApiServerTest, ANumberOutOfRangeIsA400NotA500) {
  auto r = client_->Post("/v1/chat/completions", auth(key_),
                         R"({"model":"tiny","messages":[{"role":"user","content":"Hi"}],"temperature":1e400})",
                         "application/json");
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 400) << r->body;
  EXPECT_NE(error_message(r).find("not valid JSON"), std::string::npos) << r->body;
}

TEST_F(ApiServerTest, NotAcceptingGives503WithRetryAfterAndState) {
  health_.state = ServeState::recovering;
  health_.accepting = false;
  health_.retry_after_s = 7;
  auto r = post("/v1/chat/completions", chat(), key_);
  EXPECT_EQ(r->status, 503);
  EXPECT_EQ(r->get_header_value("Retry-After"), "7");
  EXPECT_NE(error_message(r).find("recovering"), std::string::npos);
  auto h = client_->Get("/health");
  EXPECT_EQ(h->status, 503);
  EXPECT_EQ(json::parse(h->body)["state"], "recovering");
}

// What a load balancer needs is public; what an attacker would like (addresses, errors, pids) is not.
TEST_F(ApiServerTest, HealthShowsItsDetailsOnlyWithAKeyOrWhenThePageIsPublic) {
  health_.detail = {{"nodes", json::array({{{"name", "b"}, {"address", "10.0.0.2:7070"}}})}, {"last_error", "secret"}};
  auto bare = client_->Get("/health");
  ASSERT_TRUE(bare);
  EXPECT_EQ(bare->status, 200);
  EXPECT_EQ(json::parse(bare->body), (json{{"state", "ready"}, {"accepting", true}}));
  auto wrong = client_->Get("/health", auth(key_ + "x"));
  EXPECT_EQ(json::parse(wrong->body).size(), 2u);
  auto keyed = client_->Get("/health", auth(key_));
  json j = json::parse(keyed->body);
  EXPECT_EQ(j["nodes"][0]["address"], "10.0.0.2:7070");
  EXPECT_EQ(j["last_error"], "secret");
  EXPECT_EQ(j["requests_in_flight"], 0);
  ApiOptions o;
  o.status_page_public = true;
  start(o);
  EXPECT_EQ(json::parse(client_->Get("/health")->body)["nodes"][0]["name"], "b");
}

TEST_F(ApiServerTest, PerKeyConcurrencyGives429) {
  auto limited = keys_->create("one-at-a-time", {0, 1}).value().secret;
  backend_.delay = std::chrono::milliseconds(150);
  httplib::Client other("127.0.0.1", server_->port());
  auto first = std::async(std::launch::async, [&] {
    return other.Post("/v1/chat/completions", auth(limited), chat().dump(), "application/json");
  });
  // The first holds the key's one slot once it reached the backend (submit follows admission).
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  while (backend_.submitted < 1 && std::chrono::steady_clock::now() < deadline)
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  ASSERT_EQ(backend_.submitted, 1);
  auto second = post("/v1/chat/completions", chat(), limited);
  EXPECT_EQ(second->status, 429);
  EXPECT_FALSE(second->get_header_value("Retry-After").empty());
  EXPECT_EQ(json::parse(second->body)["error"]["code"], "rate_limit_exceeded");
  EXPECT_EQ(first.get()->status, 200);
  EXPECT_EQ(post("/v1/chat/completions", chat(), limited)->status, 200);  // released
}

TEST_F(ApiServerTest, AnErrorMidStreamEndsTheStreamWithAnErrorEvent) {
  backend_.fail_midway = Status::unavailable("worker box-b (127.0.0.1:7070) lost: no heartbeat for 5 s");
  auto r = post("/v1/chat/completions", chat(true), key_);
  ASSERT_EQ(r->status, 200);
  EXPECT_NE(r->body.find("\"error\""), std::string::npos);
  EXPECT_NE(r->body.find("box-b"), std::string::npos);
  EXPECT_EQ(r->body.find("[DONE]"), std::string::npos);
  backend_.fail_midway = Status::unavailable("engine restarting");
  auto plain = post("/v1/chat/completions", chat(false), key_);
  EXPECT_EQ(plain->status, 503);
}

TEST_F(ApiServerTest, AClientThatDisconnectsCancelsItsGeneration) {
  backend_.words = std::vector<std::string>(200, "x");
  backend_.delay = std::chrono::milliseconds(20);
  // A raw client that reads the start of the stream and then closes its socket.
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  addr.sin_port = htons(static_cast<uint16_t>(server_->port()));
  ASSERT_EQ(::connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr), 0);
  const std::string body = chat(true).dump();
  const std::string request = "POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer " + key_ +
                              "\r\nContent-Type: application/json\r\nContent-Length: " + std::to_string(body.size()) +
                              "\r\n\r\n" + body;
  ASSERT_EQ(::write(fd, request.data(), request.size()), static_cast<ssize_t>(request.size()));
  char buf[512];
  ASSERT_GT(::read(fd, buf, sizeof buf), 0);
  ::close(fd);
  for (int i = 0; i < 100 && backend_.cancel_count() == 0; ++i)
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  EXPECT_EQ(backend_.cancel_count(), 1u);
  for (int i = 0; i < 100 && server_->in_flight() > 0; ++i) std::this_thread::sleep_for(std::chrono::milliseconds(20));
  EXPECT_EQ(server_->in_flight(), 0);
}

TEST_F(ApiServerTest, MetricsCountRequestsAndTokens) {
  ASSERT_EQ(post("/v1/chat/completions", chat(), key_)->status, 200);
  auto m = client_->Get("/metrics");
  ASSERT_EQ(m->status, 200);
  EXPECT_NE(m->body.find("tandem_http_requests_total{endpoint=\"chat\",code=\"200\"} 1"), std::string::npos) << m->body;
  EXPECT_NE(m->body.find("tandem_tokens_total{kind=\"completion\"} 4"), std::string::npos);
}

// Checks the exposition format's grouping: every family's HELP and TYPE once, before its samples,
// and all of its samples together. Returns what is wrong, or "".
std::string family_grouping_errors(const std::string& page) {
  std::map<std::string, std::string> types;  // family -> TYPE
  std::set<std::string> helped, closed;
  std::string current, errors;
  std::istringstream in(page);
  for (std::string line; std::getline(in, line);) {
    if (line.empty()) continue;
    std::istringstream words(line);
    std::string first, kind, name, type;
    words >> first;
    if (first == "#") {
      words >> kind >> name >> type;
      if (kind == "HELP" && !helped.insert(name).second) errors += "second HELP of " + name + "\n";
      if (kind == "TYPE" && !types.emplace(name, type).second) errors += "second TYPE of " + name + "\n";
      if (name != current) {
        if (!current.empty()) closed.insert(current);
        current = name;
      }
      continue;
    }
    std::string metric = first.substr(0, first.find('{'));
    for (const char* suffix : {"_bucket", "_sum", "_count"}) {
      const std::string s = suffix;
      const std::string base = metric.size() > s.size() ? metric.substr(0, metric.size() - s.size()) : "";
      if (metric.ends_with(s) && types.count(base) && types[base] == "histogram") metric = base;
    }
    if (!types.count(metric) || !helped.count(metric)) errors += "sample before HELP/TYPE: " + line + "\n";
    if (closed.count(metric)) errors += "samples of " + metric + " apart: " + line + "\n";
    if (metric != current) {
      if (!current.empty()) closed.insert(current);
      current = metric;
    }
  }
  return errors;
}

TEST_F(ApiServerTest, MetricsGroupEachFamilyWithHelpAndTypeAndCountAStreamCutMidwayAsAnError) {
  ASSERT_EQ(post("/v1/chat/completions", chat(), key_)->status, 200);
  ASSERT_EQ(post("/v1/completions", {{"model", "tiny"}, {"prompt", "hi"}}, key_)->status, 200);
  backend_.fail_midway = Status::unavailable("worker box-b (127.0.0.1:1): lost");
  auto cut = post("/v1/chat/completions", chat(true), key_);
  ASSERT_EQ(cut->status, 200);  // the stream had begun
  EXPECT_NE(cut->body.find("box-b"), std::string::npos) << cut->body;
  for (int i = 0; i < 100 && server_->in_flight() > 0; ++i) std::this_thread::sleep_for(std::chrono::milliseconds(20));
  health_.extra_metrics =
      "# HELP tandem_queue_depth Requests waiting.\n# TYPE tandem_queue_depth gauge\ntandem_queue_depth 0\n";
  auto m = client_->Get("/metrics");
  ASSERT_EQ(m->status, 200);
  EXPECT_EQ(family_grouping_errors(m->body), "") << m->body;
  EXPECT_NE(m->body.find("tandem_http_requests_total{endpoint=\"chat\",code=\"200\"} 1\n"), std::string::npos)
      << m->body;
  EXPECT_NE(m->body.find("tandem_http_requests_total{endpoint=\"chat\",code=\"503\"} 1\n"), std::string::npos)
      << m->body;
  EXPECT_NE(m->body.find("tandem_http_requests_total{endpoint=\"completions\",code=\"200\"} 1\n"), std::string::npos)
      << m->body;
  // Every finished request is in the latency histogram; the ones that produced a token in TTFT's.
  EXPECT_NE(m->body.find("tandem_request_duration_seconds_count{endpoint=\"chat\"} 2\n"), std::string::npos) << m->body;
  EXPECT_NE(m->body.find("tandem_time_to_first_token_seconds_count{endpoint=\"chat\"} 2\n"), std::string::npos)
      << m->body;
  EXPECT_NE(m->body.find("tandem_request_duration_seconds_bucket{endpoint=\"chat\",le=\"+Inf\"} 2\n"),
            std::string::npos);
  EXPECT_NE(m->body.find("tandem_queue_depth 0\n"), std::string::npos);
  EXPECT_NE(m->body.find("tandem_state{state=\"ready\"} 1\n"), std::string::npos) << m->body;
  server_->stop_accepting();
  EXPECT_NE(client_->Get("/metrics")->body.find("tandem_state{state=\"draining\"} 1\n"), std::string::npos);
  EXPECT_EQ(family_grouping_errors("# HELP a x\n# TYPE a counter\na 1\n# HELP b y\n# TYPE b gauge\nb 1\na 2\n"),
            "samples of a apart: a 2\n");  // the checker itself catches what it is for
}

TEST_F(ApiServerTest, NonUtf8PathsAndOddFieldTypesNeitherCrashNorLeakSlots) {
  auto r = client_->Get("/%FF%FE");
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 404);
  json null_stream = chat();
  null_stream["stream"] = nullptr;
  EXPECT_EQ(post("/v1/chat/completions", null_stream, key_)->status, 200);
  json bad_usage = chat(true);
  bad_usage["stream_options"] = {{"include_usage", "yes"}};
  auto bad = post("/v1/chat/completions", bad_usage, key_);
  EXPECT_EQ(bad->status, 400);
  EXPECT_NE(error_message(bad).find("include_usage"), std::string::npos);
  EXPECT_EQ(server_->in_flight(), 0);
}

TEST_F(ApiServerTest, AStreamingRequestTheBackendRejectsGetsItsHttpStatus) {
  backend_.fail_first = Status::invalid_argument("'max_tokens' must be at least 1, got -5");
  auto r = post("/v1/chat/completions", chat(true), key_);
  EXPECT_EQ(r->status, 400);
  EXPECT_NE(error_message(r).find("max_tokens"), std::string::npos);
  EXPECT_EQ(server_->in_flight(), 0);
}

TEST_F(ApiServerTest, InsecureModeNeedsNoKey) {
  ApiOptions o;
  o.auth = false;
  start(o);
  auto r = client_->Post("/v1/chat/completions", chat().dump(), "application/json");
  EXPECT_EQ(r->status, 200);
}

TEST_F(ApiServerTest, TheStatusPageIsPublicItsFiguresNeedAKey) {
  auto page = client_->Get("/");
  ASSERT_TRUE(page);
  EXPECT_EQ(page->status, 200);
  EXPECT_NE(page->body.find("<title>tandem status</title>"), std::string::npos);
  EXPECT_NE(page->get_header_value("Content-Security-Policy").find("connect-src 'self'"), std::string::npos);
  EXPECT_EQ(client_->Get("/status.json")->status, 401);
  EXPECT_EQ(client_->Get("/status.json", auth("sk-wrong"))->status, 401);

  health_.state = ServeState::loading;
  health_.detail = {{"engine", {{"tokens_per_s", 12.5}, {"waiting", 3}}},
                    {"load", {{"fraction", 0.25}, {"eta_s", 30}}},
                    {"nodes", {{{"name", "box-b"}, {"state", "up"}, {"bytes_to_worker", 42}}}}};
  server_->set_status_info({{"n_layer", 4},
                            {"nodes",
                             {{{"name", "box-a"}, {"role", "head"}, {"layers", 1}},
                              {{"name", "box-b"}, {"role", "worker"}, {"layers", 3}},
                              {{"name", "box-c"}, {"role", "worker"}, {"layers", 0}}}}});
  auto r = client_->Get("/status.json", auth(key_));
  ASSERT_EQ(r->status, 200) << r->body;
  const json j = json::parse(r->body);
  EXPECT_EQ(j["state"], "loading");
  EXPECT_EQ(j["model"], "tiny");
  EXPECT_EQ(j["engine"]["tokens_per_s"], 12.5);
  EXPECT_EQ(j["engine"]["waiting"], 3);
  EXPECT_EQ(j["load"]["eta_s"], 30);
  EXPECT_EQ(j["plan"]["n_layer"], 4);
  ASSERT_EQ(j["nodes"].size(), 3u);
  EXPECT_EQ(j["nodes"][0]["state"], "loading");  // the head's state is the gateway's
  EXPECT_EQ(j["nodes"][1]["state"], "up");
  EXPECT_EQ(j["nodes"][1]["bytes_to_worker"], 42);
  EXPECT_EQ(j["nodes"][2]["state"], "unused");

  ApiOptions o;
  o.status_page_public = true;
  start(o);
  EXPECT_EQ(client_->Get("/status.json")->status, 200);
}

// Many clients connecting at once while the accept thread cannot run (a busy machine) wait in the
// kernel's listen queue. With httplib's backlog of 5 the kernel reset some of those connections
// about a second later, their requests unanswered (Load.Short lost two requests that way).
TEST(ApiServerListenTest, ABurstOfNewConnectionsIsAnsweredEvenWhileTheServerCannotAccept) {
  int pipe_fds[2];
  ASSERT_EQ(::pipe(pipe_fds), 0);
  const pid_t pid = ::fork();
  ASSERT_GE(pid, 0);
  if (pid == 0) {
    // The server gets a process of its own, so that SIGSTOP freezes its accept thread only.
    ::close(pipe_fds[0]);
    FakeBackend backend;
    ApiOptions o;
    o.port = 0;
    o.auth = false;
    ApiServer server(o, &backend, nullptr, [] { return HealthReport{}; });
    const int port = server.start().is_ok() ? server.port() : -1;
    if (::write(pipe_fds[1], &port, sizeof port) != sizeof port) ::_exit(1);
    for (;;) ::pause();  // until the SIGKILL below
  }
  struct Reaper {
    pid_t pid;
    ~Reaper() {
      ::kill(pid, SIGKILL);
      ::waitpid(pid, nullptr, 0);
    }
  } reaper{pid};
  ::close(pipe_fds[1]);
  int port = -1;
  ASSERT_EQ(::read(pipe_fds[0], &port, sizeof port), static_cast<ssize_t>(sizeof port));
  ::close(pipe_fds[0]);
  ASSERT_GT(port, 0);

  // Not every overflowing connection is reset: three bursts make it very likely that a short
  // backlog shows.
  constexpr int kClients = 64, kBursts = 3;
  for (int burst = 0; burst < kBursts; ++burst) {
    ASSERT_EQ(::kill(pid, SIGSTOP), 0);
    std::atomic<int> answered{0};
    std::vector<std::thread> clients;
    for (int i = 0; i < kClients; ++i) {
      clients.emplace_back([&] {
        httplib::Client c("127.0.0.1", port);
        c.set_connection_timeout(10, 0);
        c.set_read_timeout(10, 0);
        auto r = c.Get("/health");
        if (r && r->status == 200) ++answered;
      });
    }
    // Time for every client to connect and send its request into the stopped server's queue.
    std::this_thread::sleep_for(std::chrono::milliseconds(300));
    EXPECT_EQ(::kill(pid, SIGCONT), 0);
    for (auto& t : clients) t.join();
    EXPECT_EQ(answered.load(), kClients) << "burst " << burst;
  }
}

// Debian's cpp-httplib sets SO_REUSEPORT: a second gateway on a served port used to start, and the
// kernel split the connections between the two.
TEST(ApiServerListenTest, ASecondServerOnTheSamePortRefusesToStartNamingTheAddress) {
  FakeBackend backend;
  ApiOptions o;
  o.port = 0;
  o.auth = false;
  ApiServer first(o, &backend, nullptr, [] { return HealthReport{}; });
  ASSERT_TRUE(first.start().is_ok());
  o.port = first.port();
  ApiServer second(o, &backend, nullptr, [] { return HealthReport{}; });
  const Status s = second.start();
  ASSERT_FALSE(s.is_ok());
  EXPECT_NE(s.message().find("127.0.0.1:" + std::to_string(first.port())), std::string::npos) << s.message();
  EXPECT_NE(s.message().find("already in use"), std::string::npos) << s.message();
  // The first one still answers every request.
  httplib::Client c("127.0.0.1", first.port());
  for (int i = 0; i < 4; ++i) {
    auto r = c.Get("/health");
    ASSERT_TRUE(r);
    EXPECT_EQ(r->status, 200);
  }
}

// Not only another gateway: any program that listens there, with or without SO_REUSEPORT.
TEST(ApiServerListenTest, APortHeldByAnotherProgramIsRefused) {
  for (const bool reuseport : {false, true}) {
    const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
    ASSERT_GE(fd, 0);
    int yes = 1;
    if (reuseport) {
      ASSERT_EQ(::setsockopt(fd, SOL_SOCKET, SO_REUSEPORT, &yes, sizeof yes), 0);
    }
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    ASSERT_EQ(::bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof a), 0);
    ASSERT_EQ(::listen(fd, 4), 0);
    socklen_t len = sizeof a;
    ASSERT_EQ(::getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len), 0);
    FakeBackend backend;
    ApiOptions o;
    o.port = ntohs(a.sin_port);
    o.auth = false;
    ApiServer server(o, &backend, nullptr, [] { return HealthReport{}; });
    const Status s = server.start();
    EXPECT_FALSE(s.is_ok()) << "SO_REUSEPORT on the other socket: " << reuseport;
    EXPECT_NE(s.message().find("already in use"), std::string::npos) << s.message();
    ::close(fd);
  }
}

}  // namespace
}  // namespace tandem::gateway
