// A real ApiServer on loopback over the scripted FakeBackend, with a key, for the route tests.
#pragma once

#include <httplib.h>

#include <memory>
#include <sstream>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "fake_backend.h"
#include "gateway/api_server.h"

namespace tandem::gateway::testing {

class ServerTest : public ::testing::Test {
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
  httplib::Result post(const std::string& path, const nlohmann::json& body, httplib::Headers headers = {}) {
    if (headers.empty()) headers = {{"x-api-key", key_}};
    return client_->Post(path.c_str(), headers, body.dump(), "application/json");
  }

  // One server-sent event: its name ("" for a bare data line) and its data as JSON.
  struct Sse {
    std::string event;
    nlohmann::json data;
  };
  static std::vector<Sse> parse_sse(const std::string& body) {
    std::vector<Sse> out;
    std::istringstream in(body);
    std::string name;
    for (std::string line; std::getline(in, line);) {
      if (line.rfind("event: ", 0) == 0) name = line.substr(7);
      if (line.rfind("data: ", 0) != 0) continue;
      const std::string data = line.substr(6);
      out.push_back({name, data == "[DONE]" ? nlohmann::json("[DONE]") : nlohmann::json::parse(data)});
      name.clear();
    }
    return out;
  }
  static std::vector<std::string> names(const std::vector<Sse>& events) {
    std::vector<std::string> n;
    for (const auto& e : events) n.push_back(e.event);
    return n;
  }

  static GenerationEvent text(const std::string& t) {
    GenerationEvent e;
    e.text = t;
    return e;
  }
  static GenerationEvent reasoning(const std::string& t) {
    GenerationEvent e;
    e.reasoning = t;
    return e;
  }
  // A tool-call delta as the engine backend shapes it: id and name on the first piece.
  static GenerationEvent tool(int index, const std::string& id, const std::string& name, const std::string& args) {
    GenerationEvent e;
    nlohmann::json call = {{"index", index}, {"type", "function"}, {"function", {{"arguments", args}}}};
    if (!id.empty()) call["id"] = id;
    if (!name.empty()) call["function"]["name"] = name;
    e.tool_calls = nlohmann::json::array({call});
    return e;
  }

  FakeBackend backend_;
  std::unique_ptr<KeyStore> keys_;
  std::string key_;
  HealthReport health_;
  std::unique_ptr<ApiServer> server_;
  std::unique_ptr<httplib::Client> client_;
};

}  // namespace tandem::gateway::testing
