// `tandem serve` under parallelism "ffn-tensor": every layer on both workers at once, the FFNs split
// across them. It answers as the layer split does, says so on /health and the status page, and a
// worker lost mid-stream is handled as in the layer split: the stream ends with an error naming it
// within seconds, the cluster recovers when it returns.
#include <httplib.h>
#include <signal.h>

#include <chrono>
#include <future>
#include <nlohmann/json.hpp>
#include <thread>

#include <gtest/gtest.h>

#include "integration/cluster.h"

namespace tandem::testing {
namespace {

using nlohmann::json;
using Clock = std::chrono::steady_clock;

httplib::Headers auth(const LocalCluster& c) { return {{"Authorization", "Bearer " + c.key()}}; }

json completion(int max_tokens, bool stream) {
  return {{"model", "tiny"},          {"prompt", "Two boxes, one cable,"},
          {"max_tokens", max_tokens}, {"temperature", 0},
          {"ignore_eos", true},       {"stream", stream}};
}

// The tiny model in Q8_0: its experts are narrower than a K-quant block, which cannot be halved.
const char* kQ8 = "--type Q8_0";

TEST(FfnTensorServe, AnswersAsTheLayerSplitAndSurvivesAWorkerLostMidStream) {
  std::string layer_text;
  {
    ScratchDir dir;
    LocalCluster layer(dir, 2, {}, {}, kQ8);
    ASSERT_TRUE(layer.wait_ready()) << layer.log();
    httplib::Client c("127.0.0.1", layer.port());
    c.set_read_timeout(60, 0);
    auto r = c.Post("/v1/completions", auth(layer), completion(12, false).dump(), "application/json");
    ASSERT_TRUE(r && r->status == 200) << (r ? r->body : "no answer");
    layer_text = json::parse(r->body)["choices"][0]["text"];
  }

  ScratchDir dir;
  // One slot: conversations take turns on it, so a returning one is restored or evaluated afresh.
  LocalCluster cluster(dir, 2, {"--parallelism", "ffn-tensor", "--parallel", "1"}, {}, kQ8);
  ASSERT_TRUE(cluster.wait_ready()) << cluster.log();
  EXPECT_NE(cluster.log().find("every layer on w0, w1 at once, the FFNs split across them (parallelism ffn-tensor)"),
            std::string::npos)
      << cluster.log();
  httplib::Client c("127.0.0.1", cluster.port());
  c.set_read_timeout(60, 0);
  auto r = c.Post("/v1/completions", auth(cluster), completion(12, false).dump(), "application/json");
  ASSERT_TRUE(r && r->status == 200) << (r ? r->body : "no answer") << cluster.log();
  EXPECT_EQ(json::parse(r->body)["choices"][0]["text"], layer_text);

  // Two conversations taking turns on the slot: each returning one gets its own first answer.
  const auto answer = [&](const std::string& prompt) {
    json body = completion(8, false);
    body["prompt"] = prompt;
    auto res = c.Post("/v1/completions", auth(cluster), body.dump(), "application/json");
    EXPECT_TRUE(res && res->status == 200) << (res ? res->body : "no answer");
    return res && res->status == 200 ? json::parse(res->body)["choices"][0]["text"].get<std::string>() : "";
  };
  std::string alice = "Alice asks:", bob = "Bob says:";
  for (int i = 0; i < 40; ++i) {
    alice += " the quick brown fox jumps";
    bob += " a lazy dog sleeps all day";
  }
  const std::string a1 = answer(alice), b1 = answer(bob), a2 = answer(alice), b2 = answer(bob);
  EXPECT_EQ(a2, a1);
  EXPECT_EQ(b2, b1);

  const json st = json::parse(c.Get("/status.json", auth(cluster))->body);
  EXPECT_EQ(st["plan"]["parallelism"], "ffn-tensor") << st.dump();
  EXPECT_EQ(st["placement"]["parallelism"], "ffn-tensor") << st.dump();
  int running = 0;
  for (const json& n : st["nodes"]) {
    if (n["role"] == "worker") {
      EXPECT_EQ(n["layers"], st["plan"]["n_layer"]) << n.dump();
      ++running;
    }
  }
  EXPECT_EQ(running, 2);

  // A worker lost mid-stream.
  AsyncPost stream(cluster.port(), cluster.key(), "/v1/completions", completion(450, true).dump());
  ASSERT_TRUE(stream.wait_first_text(30000)) << "the stream never got under way: " << stream.body();
  const auto killed = Clock::now();
  cluster.kill_worker(0, SIGKILL);
  const std::string out = stream.body();
  EXPECT_EQ(out.find("data: [DONE]"), std::string::npos) << "the stream must not look complete: " << out;
  EXPECT_NE(out.find("w0"), std::string::npos) << "the error names the lost worker: " << out;
  EXPECT_LT(std::chrono::duration<double>(stream.ended() - killed).count(), 5.0);
  EXPECT_TRUE(cluster.gateway().running());
  EXPECT_EQ(cluster.wait_state("degraded"), "degraded");
  cluster.restart_worker(0);
  ASSERT_TRUE(cluster.wait_ready()) << cluster.log();
  auto again = c.Post("/v1/completions", auth(cluster), completion(12, false).dump(), "application/json");
  ASSERT_TRUE(again && again->status == 200) << (again ? again->body : "no answer");
  EXPECT_EQ(json::parse(again->body)["choices"][0]["text"], layer_text);
}

}  // namespace
}  // namespace tandem::testing
