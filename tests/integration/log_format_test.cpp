// --log-format json: every line that serve, its engine, a worker and its RPC child write is one
// JSON object with ts, level, component and msg.
#include <httplib.h>
#include <signal.h>

#include <fstream>
#include <nlohmann/json.hpp>
#include <set>
#include <sstream>
#include <thread>
#include <vector>

#include <gtest/gtest.h>

#include "support/process.h"
#include "test_util.h"

namespace tandem::testing {
namespace {

using nlohmann::json;

// The components seen; fails the test on a line that is not a complete record.
std::set<std::string> components_of(const std::string& path) {
  std::ifstream in(path);
  std::set<std::string> seen;
  for (std::string line; std::getline(in, line);) {
    if (line.empty()) continue;
    const json j = json::parse(line, nullptr, false);
    if (!j.is_object()) {
      ADD_FAILURE() << path << ": not a JSON object: " << line;
      continue;
    }
    for (const char* key : {"ts", "level", "component", "msg"})
      EXPECT_TRUE(j.contains(key) && j[key].is_string()) << key << " in " << line;
    seen.insert(j.value("component", ""));
  }
  return seen;
}

TEST(LogFormat, ServeItsEngineAndAWorkerWriteOnlyJsonLines) {
  ScratchDir dir;
  ASSERT_EQ(run_tandem("secret new -o " + dir.file("cluster.key"), dir.file("")).exit_code, 0);
  ASSERT_EQ(run_tandem("synth --preset tiny -o " + dir.file("tiny.gguf"), dir.file("")).exit_code, 0);
  const int wport = free_port(), port = free_port();
  {
    ChildProcess worker({TANDEM_BINARY, "worker", "--listen", "127.0.0.1:" + std::to_string(wport), "--secret-file",
                         dir.file("cluster.key"), "--name", "w0", "--threads", "1", "--log-format", "json"},
                        dir.file("worker.log"));
    ASSERT_TRUE(wait_for_port(wport, 10000));
    ChildProcess serve(
        {TANDEM_BINARY, "serve", "-m", dir.file("tiny.gguf"), "--secret-file", dir.file("cluster.key"),
         "--insecure-no-auth", "--listen", "127.0.0.1:" + std::to_string(port), "--context", "512", "-t", "1",
         "--worker", "w0=127.0.0.1:" + std::to_string(wport), "--layers", "2,2", "--log-format", "json"},
        dir.file("serve.log"));
    httplib::Client c("127.0.0.1", port);
    bool ready = false;
    for (int i = 0; i < 600 && !ready && serve.running(); ++i) {
      auto r = c.Get("/health");
      ready = r && r->status == 200;
      if (!ready) std::this_thread::sleep_for(std::chrono::milliseconds(100));
    }
    ASSERT_TRUE(ready);
    // Requests whose handling makes llama.cpp print (a grammar that does not parse, a JSON schema,
    // a tool list) must not leave raw text in the log either.
    const json chat = {{"messages", {{{"role", "user"}, {"content", "hi"}}}}, {"max_tokens", 2}};
    std::vector<json> bodies(4, chat);
    bodies[1]["grammar"] = "root ::= (";
    bodies[2]["response_format"] = {
        {"type", "json_schema"},
        {"json_schema",
         {{"name", "x"}, {"schema", {{"type", "object"}, {"properties", {{"a", {{"type", "integer"}}}}}}}}}};
    bodies[3]["tools"] = {{{"type", "function"}, {"function", {{"name", "f"}, {"parameters", {{"type", "object"}}}}}}};
    c.set_read_timeout(60, 0);
    for (const json& b : bodies) {
      auto r = c.Post("/v1/chat/completions", b.dump(), "application/json");
      ASSERT_TRUE(r) << b.dump();
      EXPECT_TRUE(r->status == 200 || r->status == 400) << r->status << " " << r->body;
    }
    serve.signal(SIGTERM);
    EXPECT_EQ(serve.wait(30000), 0);
    worker.signal(SIGTERM);
    EXPECT_EQ(worker.wait(10000), 0);
  }
  const auto serve_components = components_of(dir.file("serve.log"));
  for (const char* c : {"serve", "engine"}) EXPECT_TRUE(serve_components.count(c)) << c;
  const auto worker_components = components_of(dir.file("worker.log"));
  EXPECT_TRUE(worker_components.count("worker"));
  EXPECT_TRUE(worker_components.count("rpc-server"));  // ggml's own prints, relayed by its RPC child
}

}  // namespace
}  // namespace tandem::testing
