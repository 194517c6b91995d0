// tandem serve with real workers on loopback: the API through the split, auth, a worker killed
// mid-stream, recovery, and a draining shutdown.
#include <httplib.h>
#include <signal.h>

#include <sys/wait.h>

#include <chrono>
#include <fstream>
#include <future>
#include <nlohmann/json.hpp>
#include <sstream>
#include <thread>

#include <gtest/gtest.h>

#include "integration/cluster.h"

namespace tandem::testing {
namespace {

using nlohmann::json;
using Clock = std::chrono::steady_clock;

httplib::Headers auth(const LocalCluster& c) { return {{"Authorization", "Bearer " + c.key()}}; }

json chat(bool stream, int max_tokens = 8) {
  return {{"model", "tiny"},
          {"messages", {{{"role", "user"}, {"content", "Hello"}}}},
          {"max_tokens", max_tokens},
          {"stream", stream},
          {"temperature", 0}};
}

// The text of an SSE body, and whether it ended with [DONE] or an error event.
struct Stream {
  std::string text;
  bool done = false;
  std::string error;
};
Stream parse_sse(const std::string& body) {
  Stream s;
  std::istringstream in(body);
  for (std::string line; std::getline(in, line);) {
    if (line.rfind("data: ", 0) != 0) continue;
    if (line == "data: [DONE]") {
      s.done = true;
      continue;
    }
    json j = json::parse(line.substr(6));
    if (j.contains("error")) {
      s.error = j["error"]["message"];
      continue;
    }
    if (!j["choices"].empty()) {
      const json& c = j["choices"][0];
      s.text += c.contains("delta") ? c["delta"].value("content", "") : c.value("text", "");
    }
  }
  return s;
}

TEST(Serve, ChatThroughTwoWorkersStreamingAndNot) {
  ScratchDir dir;
  LocalCluster cluster(dir, 2);
  ASSERT_TRUE(cluster.wait_ready()) << cluster.log();
  httplib::Client c("127.0.0.1", cluster.port());
  c.set_read_timeout(60, 0);
  auto whole = c.Post("/v1/chat/completions", auth(cluster), chat(false).dump(), "application/json");
  ASSERT_TRUE(whole);
  ASSERT_EQ(whole->status, 200) << whole->body;
  json j = json::parse(whole->body);
  const std::string text = j["choices"][0]["message"]["content"];
  EXPECT_FALSE(text.empty());
  EXPECT_EQ(j["usage"]["completion_tokens"], 8);

  // (Not compared token for token with the request above: the second one reuses the first one's
  // KV prefix, and the CPU kernels round differently for other batch shapes; see docs/engine-protocol.md.)
  json sb = chat(true);
  sb["stream_options"] = {{"include_usage", true}};
  auto streamed = c.Post("/v1/chat/completions", auth(cluster), sb.dump(), "application/json");
  ASSERT_EQ(streamed->status, 200);
  Stream s = parse_sse(streamed->body);
  EXPECT_TRUE(s.done);
  EXPECT_FALSE(s.text.empty());
  EXPECT_NE(streamed->body.find("\"completion_tokens\":8"), std::string::npos) << streamed->body;

  // The weights went over the links: both workers carried bytes.
  // /health shows the nodes only with a key; without one, the state alone.
  auto bare = json::parse(c.Get("/health")->body);
  EXPECT_EQ(bare, (json{{"state", "ready"}, {"accepting", true}}));
  auto health = json::parse(c.Get("/health", auth(cluster))->body);
  ASSERT_EQ(health["nodes"].size(), 2u);
  for (const auto& n : health["nodes"]) {
    EXPECT_EQ(n["state"], "up");
    EXPECT_GT(n["bytes_to_worker"].get<uint64_t>(), 100000u);
  }
  auto metrics = c.Get("/metrics");
  EXPECT_NE(metrics->body.find("tandem_node_up{node=\"w0\"} 1"), std::string::npos);
  EXPECT_NE(metrics->body.find("tandem_state{state=\"ready\"} 1"), std::string::npos);
}

// (With the worker's input slots off, passed on to the engine: the path beyond the slots.)
TEST(Serve, WrongKeyIs401AndTheGatewayStaysUp) {
  ScratchDir dir;
  LocalCluster cluster(dir, 1, {"--engine-flag=--no-worker-input-slots"});
  ASSERT_TRUE(cluster.wait_ready()) << cluster.log();
  EXPECT_NE(cluster.log().find(" --no-worker-input-slots"), std::string::npos) << cluster.log();
  httplib::Client c("127.0.0.1", cluster.port());
  auto r = c.Post("/v1/chat/completions", {{"Authorization", "Bearer tdm_00000000_" + std::string(48, 'f')}},
                  chat(false).dump(), "application/json");
  EXPECT_EQ(r->status, 401);
  EXPECT_EQ(c.Post("/v1/chat/completions", chat(false).dump(), "application/json")->status, 401);
  EXPECT_EQ(c.Post("/v1/chat/completions", auth(cluster), "{not json", "application/json")->status, 400);
  EXPECT_EQ(c.Post("/v1/chat/completions", auth(cluster), chat(false).dump(), "application/json")->status, 200);
}

TEST(Serve, AWorkerKilledMidStreamEndsTheStreamWithAnErrorAndTheClusterRecovers) {
  ScratchDir dir;
  LocalCluster cluster(dir, 2);
  ASSERT_TRUE(cluster.wait_ready()) << cluster.log();
  httplib::Client c("127.0.0.1", cluster.port());
  c.set_read_timeout(60, 0);
  json body = {{"model", "tiny"}, {"prompt", "Go"}, {"max_tokens", 450}, {"stream", true}, {"ignore_eos", true}};
  AsyncPost stream(cluster.port(), cluster.key(), "/v1/completions", body.dump());
  ASSERT_TRUE(stream.wait_first_text(30000)) << "the stream never got under way: " << stream.body();
  const auto killed = Clock::now();
  cluster.kill_worker(1, SIGKILL);
  const std::string out = stream.body();
  Stream s = parse_sse(out);
  EXPECT_FALSE(s.done) << "the stream must not look complete";
  EXPECT_NE(s.error.find("w1"), std::string::npos) << "the error names the lost worker: " << s.error;
  EXPECT_LT(std::chrono::duration<double>(stream.ended() - killed).count(), 5.0);
  EXPECT_TRUE(cluster.gateway().running());
  EXPECT_EQ(cluster.wait_state("degraded"), "degraded");
  // The engine went with the worker: its live figures must not stay frozen at their last values.
  const json h = json::parse(c.Get("/health", auth(cluster))->body);
  EXPECT_EQ(h["engine"]["state"], "stopped") << h.dump();
  EXPECT_EQ(h["engine"]["slots_busy"], 0) << h.dump();
  EXPECT_EQ(h["engine"]["tokens_per_s"], 0.0) << h.dump();
  const json st = json::parse(c.Get("/status.json", auth(cluster))->body);
  EXPECT_EQ(st["engine"]["tokens_per_s"], 0.0) << st.dump();
  auto refused = c.Post("/v1/chat/completions", auth(cluster), chat(false).dump(), "application/json");
  EXPECT_EQ(refused->status, 503);
  EXPECT_FALSE(refused->get_header_value("Retry-After").empty());

  cluster.restart_worker(1);
  ASSERT_TRUE(cluster.wait_ready()) << cluster.log();
  auto again = c.Post("/v1/chat/completions", auth(cluster), chat(false).dump(), "application/json");
  EXPECT_EQ(again->status, 200) << again->body;
}

TEST(Serve, SigtermDrainsInFlightRequestsThenExitsCleanly) {
  ScratchDir dir;
  LocalCluster cluster(dir, 1);
  ASSERT_TRUE(cluster.wait_ready()) << cluster.log();
  httplib::Client c("127.0.0.1", cluster.port());
  c.set_read_timeout(60, 0);
  json body = {{"model", "tiny"}, {"prompt", "Go"}, {"max_tokens", 200}, {"ignore_eos", true}};
  auto inflight = std::async(std::launch::async,
                             [&] { return c.Post("/v1/completions", auth(cluster), body.dump(), "application/json"); });
  ASSERT_TRUE(cluster.wait_in_flight(1)) << "the request was never admitted";
  cluster.gateway().signal(SIGTERM);
  auto r = inflight.get();
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 200) << r->body;  // finished, not cut
  EXPECT_EQ(json::parse(r->body)["usage"]["completion_tokens"], 200);
  EXPECT_EQ(cluster.gateway().wait(20000), 0) << cluster.log();
  EXPECT_NE(cluster.log().find("draining"), std::string::npos);
}

// The official `openai` npm package as the client: chat, streaming with usage, completions, a
// wrong key, the model list (tests/integration/openai_client.mjs).
TEST(Serve, TheOfficialOpenAiClientWorks) {
  ScratchDir dir;
  LocalCluster cluster(dir, 1);
  ASSERT_TRUE(cluster.wait_ready()) << cluster.log();
  const std::string root = TANDEM_SOURCE_DIR;
  const std::string cmd =
      "export TANDEM_NODE_MODULES=$(" + root + "/scripts/install-node-deps.sh) && node " + root +
      "/tests/integration/openai_client.mjs --base-url http://127.0.0.1:" + std::to_string(cluster.port()) +
      "/v1 --api-key " + cluster.key() + " --model tiny > " + dir.file("openai.out") + " 2>&1";
  const int rc = std::system(("bash -c '" + cmd + "'").c_str());
  std::ifstream in(dir.file("openai.out"));
  const std::string out((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  EXPECT_EQ(WEXITSTATUS(rc), 0) << out;
  EXPECT_NE(out.find("\"ok\":true"), std::string::npos) << out;
}

TEST(Plan, AConfigWithoutDeclaredMemoryAsksTheLiveWorkers) {
  ScratchDir dir;
  LocalCluster cluster(dir, 1);
  const std::string cfg = dir.file("tandem.toml");
  write_file(cfg,
             "[cluster]\nsecret_file = \"" + cluster.secret_file() +
                 "\"\n[[worker]]\nname = \"box-b\"\naddress = \"127.0.0.1:" + std::to_string(cluster.worker_port(0)) +
                 "\"\n[model]\npath = \"" + cluster.model() + "\"\ncontext = 512\n");
  auto r = run_tandem("plan --json -c " + cfg, dir.file(""));
  EXPECT_EQ(r.exit_code, 0) << r.err;
  auto j = json::parse(r.out, nullptr, false);
  ASSERT_TRUE(j.is_object()) << r.out;
  EXPECT_NE(r.out.find("box-b"), std::string::npos) << r.out;
  EXPECT_NE(r.err.find("box-b"), std::string::npos) << r.err;  // the query is logged

  write_file(cfg, "[cluster]\nsecret_file = \"" + cluster.secret_file() +
                      "\"\n[[worker]]\nname = \"gone\"\naddress = \"127.0.0.1:" + std::to_string(free_port()) +
                      "\"\n[model]\npath = \"" + cluster.model() + "\"\n");
  r = run_tandem("plan -c " + cfg, dir.file(""));
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_NE(r.err.find("gone"), std::string::npos) << r.err;
}

TEST(Bench, MeasuresEveryFigureAgainstTandemServe) {
  ScratchDir dir;
  LocalCluster cluster(dir, 1);
  ASSERT_TRUE(cluster.wait_ready()) << cluster.log();
  auto r = run_tandem(
      "bench --json --url http://127.0.0.1:" + std::to_string(cluster.port()) + " --key " + cluster.key() +
          " --runs 2 --gen-tokens 8 --prefill-tokens 32,64 --ttft-tokens 32 --decode-after 96 --concurrency 2,3",
      dir.file(""));
  ASSERT_EQ(r.exit_code, 0) << r.err;
  auto j = json::parse(r.out);
  EXPECT_EQ(j["model"], "tiny");
  for (const char* f : {"decode_tps", "ttft_ms", "prefill_tps_32", "prefill_tps_64", "decode_tps_after_96",
                        "aggregate_tps", "aggregate_tps_3"}) {
    ASSERT_TRUE(j["figures"].contains(f)) << f;
    EXPECT_EQ(j["figures"][f]["samples"].size(), 2u) << f;
    EXPECT_GT(j["figures"][f]["median"].get<double>(), 0.0) << f;
  }
  EXPECT_FALSE(j["figures"].contains("aggregate_tps_2")) << "the first stream count's figure is aggregate_tps";
  // A wrong key is an error that says what the server answered.
  auto bad = run_tandem("bench --url http://127.0.0.1:" + std::to_string(cluster.port()) + " --key nope --runs 1",
                        dir.file(""));
  EXPECT_EQ(bad.exit_code, 1);
  EXPECT_NE(bad.err.find("401"), std::string::npos) << bad.err;
}

// A worker serves one head. A second head does not fight over it: it says who holds the worker,
// shows the node `refused`, starts no engine (no abort loop), and serves once the worker is free.
TEST(Serve, AHeadAWorkerRefusesSaysWhyAndServesOnceTheWorkerIsFree) {
  ScratchDir dir;
  LocalCluster first(dir, 1, {"--head-name", "box-a"});
  ASSERT_TRUE(first.wait_ready()) << first.log();
  const int port = free_port();
  const std::string worker = "w0=127.0.0.1:" + std::to_string(first.worker_port(0));
  auto second = std::make_unique<ChildProcess>(std::vector<std::string>{TANDEM_BINARY,
                                                                        "serve",
                                                                        "-m",
                                                                        first.model(),
                                                                        "--secret-file",
                                                                        first.secret_file(),
                                                                        "--keys-db",
                                                                        dir.file("keys.db"),
                                                                        "--listen",
                                                                        "127.0.0.1:" + std::to_string(port),
                                                                        "--context",
                                                                        "512",
                                                                        "-t",
                                                                        "1",
                                                                        "--head-name",
                                                                        "box-z",
                                                                        "--worker",
                                                                        worker,
                                                                        "--layers",
                                                                        "2,2"},
                                               dir.file("second.log"));
  ASSERT_TRUE(wait_for_port(port, 10000));
  httplib::Client c("127.0.0.1", port);
  json node = json::object();
  for (int i = 0; i < 150 && node.value("state", "") != "refused"; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
    auto r = c.Get("/health", auth(first));
    const json nodes = r ? json::parse(r->body).value("nodes", json::array()) : json::array();
    if (!nodes.empty()) node = nodes[0];
  }
  ASSERT_EQ(node.value("state", ""), "refused") << node.dump();
  EXPECT_NE(node["last_error"].get<std::string>().find("serves another head, 'box-a'"), std::string::npos)
      << node.dump();
  // The first head was never disturbed.
  EXPECT_EQ(c.Get("/health")->status, 503);
  httplib::Client a("127.0.0.1", first.port());
  EXPECT_EQ(a.Post("/v1/chat/completions", auth(first), chat(false).dump(), "application/json")->status, 200);
  std::this_thread::sleep_for(std::chrono::seconds(6));  // a retry or two, quietly
  const std::string log = read_file(dir.file("second.log"));
  EXPECT_EQ(log.find("engine started"), std::string::npos) << log;
  size_t said = 0;
  for (size_t at = log.find("serves another head"); at != std::string::npos;
       at = log.find("serves another head", at + 1))
    ++said;
  EXPECT_EQ(said, 1u) << log;

  first.gateway().signal(SIGTERM);
  ASSERT_EQ(first.gateway().wait(30000), 0);
  bool ready = false;
  for (int i = 0; i < 600 && !ready; ++i) {
    auto r = c.Get("/health");
    ready = r && r->status == 200;
    if (!ready) std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  ASSERT_TRUE(ready) << read_file(dir.file("second.log"));
  EXPECT_NE(read_file(dir.file("second.log")).find("worker w0 is free again"), std::string::npos);
  EXPECT_EQ(c.Post("/v1/chat/completions", auth(first), chat(false).dump(), "application/json")->status, 200);
  second->signal(SIGTERM);
  EXPECT_EQ(second->wait(30000), 0);
}

// Exit status 2 is what the units' RestartPreventExitStatus holds: a restart would not heal it.
TEST(Serve, ABadConfigurationExitsTwoWithAMessage) {
  ScratchDir dir;
  auto r = run_tandem("serve -m " + dir.file("missing.gguf") + " --keys-db " + dir.file("k.db"), dir.file(""));
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_NE(r.err.find("missing.gguf"), std::string::npos) << r.err;
  write_file(dir.file("bad.toml"), "[model]\ncontxt = 5\n");
  r = run_tandem("serve -c " + dir.file("bad.toml"), dir.file(""));
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_NE(r.err.find("contxt"), std::string::npos) << r.err;
  // Only the engine's switches for measuring: never one that serve sets (a restart loop otherwise).
  r = run_tandem("serve -m " + dir.file("missing.gguf") + " --engine-flag=--socket", dir.file(""));
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_NE(r.err.find("'--socket' is not an engine flag serve passes on to the engine; these are: --sync-rpc-writes"),
            std::string::npos)
      << r.err;
  // A header-only model plans but cannot be served: refused at once, not restarted forever.
  ASSERT_EQ(run_tandem("synth --preset m3 --header-only -o " + dir.file("m3.gguf"), dir.file("")).exit_code, 0);
  r = run_tandem(
      "serve -m " + dir.file("m3.gguf") + " --insecure-no-auth --listen 127.0.0.1:" + std::to_string(free_port()),
      dir.file(""));
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_NE(r.err.find("header-only"), std::string::npos) << r.err;
  // One worker given twice would hold two sessions with itself.
  r = run_tandem("serve -m " + dir.file("m3.gguf") + " --worker a=127.0.0.1:1 --worker b=127.0.0.1:1", dir.file(""));
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_NE(r.err.find("127.0.0.1:1 is given twice"), std::string::npos) << r.err;
  // A prompt-cache folder that cannot be made would fail every engine start.
  write_file(dir.file("a-file"), "x");
  r = run_tandem(
      "serve -m " + dir.file("m3.gguf") + " --insecure-no-auth --prompt-cache-dir " + dir.file("a-file") + "/prompts",
      dir.file(""));
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_NE(r.err.find("[model] prompt_cache_dir " + dir.file("a-file") + "/prompts"), std::string::npos) << r.err;
  r = run_tandem("serve -m " + dir.file("m3.gguf") + " --prompt-cache 8", dir.file(""));
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_NE(r.err.find("--prompt-cache: '8' has no unit"), std::string::npos) << r.err;
}

// Debian's cpp-httplib sets SO_REUSEPORT: a second head on the same port used to start, and the
// two took each other's clients and workers.
TEST(Serve, ASecondServeOnAServedPortExitsOneNamingTheAddress) {
  ScratchDir dir;
  const ClusterFiles f = make_cluster_files(dir, "k");
  const int port = free_port();
  const std::string listen = "127.0.0.1:" + std::to_string(port);
  ChildProcess first(
      {TANDEM_BINARY, "serve", "-m", f.model, "--insecure-no-auth", "--listen", listen, "--context", "256", "-t", "1"},
      dir.file("first.log"));
  ASSERT_TRUE(wait_for_port(port, 10000));
  auto r = run_tandem("serve -m " + f.model + " --insecure-no-auth --listen " + listen, dir.file(""));
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_NE(r.err.find("cannot listen on " + listen + ": the address is already in use"), std::string::npos) << r.err;
  EXPECT_TRUE(first.running());
  first.signal(SIGTERM);
  EXPECT_EQ(first.wait(30000), 0);
}

// While it waits for a worker that does not answer, serve says which and why; SIGTERM then is a
// clean stop (exit 0), not a failure.
TEST(Serve, WaitingForAWorkerIsShownAndASigtermThenExitsZero) {
  ScratchDir dir;
  const ClusterFiles f = make_cluster_files(dir, "k");
  const int port = free_port(), dead = free_port();
  ChildProcess serve(
      {TANDEM_BINARY, "serve", "-m", f.model, "--secret-file", f.secret, "--keys-db", dir.file("keys.db"), "--listen",
       "127.0.0.1:" + std::to_string(port), "--worker", "box-b=127.0.0.1:" + std::to_string(dead)},
      dir.file("serve.log"));
  ASSERT_TRUE(wait_for_port(port, 10000));
  httplib::Client c("127.0.0.1", port);
  json h;
  for (int i = 0; i < 100; ++i) {
    h = json::parse(c.Get("/health", {{"Authorization", "Bearer " + f.key}})->body);
    if (!h["nodes"].empty() && !h["nodes"][0]["last_error"].get<std::string>().empty()) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  EXPECT_EQ(h["state"], "starting");
  EXPECT_EQ(h["phase"], "waiting for worker box-b");
  ASSERT_EQ(h["nodes"].size(), 1u);
  EXPECT_EQ(h["nodes"][0]["name"], "box-b");
  EXPECT_EQ(h["nodes"][0]["state"], "waiting");
  EXPECT_NE(h["nodes"][0]["last_error"].get<std::string>().find("127.0.0.1:" + std::to_string(dead)), std::string::npos)
      << h.dump();
  // The status page's figures say the same.
  json st = json::parse(c.Get("/status.json", {{"Authorization", "Bearer " + f.key}})->body);
  bool shown = false;
  for (const auto& n : st["nodes"])
    shown |= n["name"] == "box-b" && n["state"] == "waiting" && !n["last_error"].get<std::string>().empty();
  EXPECT_TRUE(shown) << st.dump();
  auto m = c.Get("/metrics");
  ASSERT_TRUE(m);
  EXPECT_NE(m->body.find("tandem_state{state=\"starting\"} 1\n"), std::string::npos) << m->body;
  EXPECT_NE(m->body.find("tandem_state{state=\"ready\"} 0\n"), std::string::npos) << m->body;
  serve.signal(SIGTERM);
  EXPECT_EQ(serve.wait(30000), 0);
}

}  // namespace
}  // namespace tandem::testing
