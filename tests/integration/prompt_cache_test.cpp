// The prompt cache in `tandem serve`, on by default: conversations that take turns on one slot
// through a real split, a returning one served from its cached state (with the tokens of its
// first turn, and its cached prompt tokens in the usage), the cache's figures on /health and
// /metrics, each node's share named.
#include <httplib.h>
#include <signal.h>

#include <filesystem>
#include <nlohmann/json.hpp>
#include <regex>
#include <thread>

#include <gtest/gtest.h>

#include "cluster.h"

namespace tandem::testing {
namespace {

using nlohmann::json;

httplib::Headers auth(const LocalCluster& c) { return {{"Authorization", "Bearer " + c.key()}}; }

json completion(const std::string& prompt) {
  return {{"model", "tiny"}, {"prompt", prompt}, {"max_tokens", 8}, {"temperature", 0}, {"ignore_eos", true}};
}

// A conversation's ~280-token prompt: `who` and 40 times `words`.
std::string conversation(const std::string& who, const std::string& words) {
  std::string p = who;
  for (int i = 0; i < 40; ++i) p += words;
  return p;
}
const std::string kAlice = conversation("Alice asks:", " the quick brown fox jumps");
const std::string kBob = conversation("Bob says:", " a lazy dog sleeps all day");

// A greedy completion of `prompt`, its JSON body; an empty object (and a failure) unless 200.
json post(httplib::Client& c, const LocalCluster& cluster, const std::string& prompt) {
  auto r = c.Post("/v1/completions", auth(cluster), completion(prompt).dump(), "application/json");
  EXPECT_TRUE(r && r->status == 200) << (r ? r->body : "no answer") << "\n" << cluster.log();
  return r && r->status == 200 ? json::parse(r->body) : json::object();
}

TEST(PromptCache, AReturningConversationIsServedFromEachNodesShareAndTheFiguresSaySo) {
  ScratchDir dir;
  LocalCluster cluster(dir, 1, {"--parallel", "1", "--prompt-cache", "256MiB"});
  ASSERT_TRUE(cluster.wait_ready()) << cluster.log();
  httplib::Client c("127.0.0.1", cluster.port());
  c.set_read_timeout(120, 0);
  const std::string &a = kAlice, &b = kBob;
  const auto post = [&](const std::string& prompt) { return testing::post(c, cluster, prompt); };
  const json first = post(a);
  ASSERT_TRUE(first.contains("usage"));
  const int prompt_tokens = first["usage"]["prompt_tokens"];
  ASSERT_GT(prompt_tokens, 200);
  EXPECT_LE(first["usage"]["prompt_tokens_details"]["cached_tokens"].get<int>(), 1);
  // a at once again: its slot's own prefix, the last prompt token evaluated alone. On the CPU a
  // token alone sums differently from one inside a 240-token batch (docs/engine-protocol.md,
  // exactness; tests/worker/prompt_cache_test.cpp compares with a fresh prefill in chunks that
  // make it exact), so this is the text a restored prefix must give.
  const json reused = post(a);
  ASSERT_TRUE(reused.contains("usage"));
  EXPECT_EQ(reused["usage"]["prompt_tokens_details"]["cached_tokens"], prompt_tokens - 1);
  ASSERT_FALSE(post(b).empty());
  const json again = post(a);
  ASSERT_TRUE(again.contains("usage"));
  EXPECT_EQ(again["choices"][0]["text"], reused["choices"][0]["text"]) << "a restored state gave other text";
  EXPECT_EQ(again["usage"]["prompt_tokens_details"]["cached_tokens"], prompt_tokens - 1);

  // The engine's figures reach the gateway with its status poll: wait for the hit to show.
  json health;
  for (int i = 0; i < 100; ++i) {
    health = json::parse(c.Get("/health", auth(cluster))->body);
    if (health["prompt_cache"].value("hits", 0) >= 1 && health["prompt_cache"].value("saves", 0) >= 4) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  const json& pc = health["prompt_cache"];
  EXPECT_EQ(pc["max_bytes_per_node"], 256u << 20);
  EXPECT_EQ(pc["hits"], 1);
  EXPECT_EQ(pc["restored_tokens"], prompt_tokens - 1);
  // b's state and two of a's: its turns' replies differ (see above), so neither state holds the other.
  EXPECT_EQ(pc["entries"], 3);
  EXPECT_GT(pc["bytes"]["head"].get<uint64_t>(), 0u) << health.dump();
  EXPECT_GT(pc["bytes"]["w0"].get<uint64_t>(), 0u) << "the worker keeps its layers' part: " << health.dump();
  EXPECT_EQ(health["nodes"][0]["prompt_cache_bytes"], pc["bytes"]["w0"]);
  EXPECT_GT(pc["saved_worker_bytes"].get<uint64_t>(), 0u);

  const std::string m = c.Get("/metrics")->body;
  EXPECT_EQ(sample(m, "tandem_prompt_cache_hits_total"), 1) << m;
  EXPECT_EQ(sample(m, "tandem_prompt_cache_capacity_bytes"), 256 << 20);
  EXPECT_EQ(sample(m, "tandem_prompt_cache_entries"), 3);
  EXPECT_GE(sample(m, "tandem_prompt_cache_misses_total"), 1);
  EXPECT_EQ(sample(m, "tandem_prompt_cache_evictions_total"), 0);
  EXPECT_GT(sample(m, "tandem_prompt_cache_bytes{node=\"w0\",tier=\"memory\"}"), 0);
  EXPECT_GT(sample(m, "tandem_prompt_cache_bytes{node=\"head\",tier=\"memory\"}"), 0);
  EXPECT_EQ(sample(m, "tandem_prompt_cache_bytes{node=\"w0\",tier=\"disk\"}"), 0);
  EXPECT_EQ(sample(m, "tandem_prompt_cache_disk_capacity_bytes"), 0) << "no disk tier without a folder";
}

// `tandem bench --conversations`: the prompt cache's figures against a one-slot split, each
// returning turn a restore, what crossed the link for it and for each save far below the states'
// worker KV.
TEST(PromptCache, TheBenchMeasuresReturningConversationsAndTheirLinkBytes) {
  ScratchDir dir;
  LocalCluster cluster(dir, 1, {"--parallel", "1"});
  ASSERT_TRUE(cluster.wait_ready()) << cluster.log();
  auto r =
      run_tandem("bench --json --url http://127.0.0.1:" + std::to_string(cluster.port()) + " --key " + cluster.key() +
                     " --conversations 2 --conversation-tokens 300 --turn-tokens 20 --turns 2 --only-conversations",
                 dir.file(""));
  ASSERT_EQ(r.exit_code, 0) << r.err << cluster.log();
  const json f = json::parse(r.out)["figures"];
  EXPECT_FALSE(f.contains("decode_tps")) << "--only-conversations";
  EXPECT_EQ(f["cold_ttft_ms"]["samples"].size(), 2u);
  EXPECT_EQ(f["returning_ttft_ms"]["samples"].size(), 4u);
  EXPECT_EQ(f["continuing_ttft_ms"]["samples"].size(), 2u);
  for (const char* name : {"link_bytes_per_restore", "link_bytes_per_save", "state_kv_bytes", "state_worker_kv_bytes"})
    ASSERT_TRUE(f.contains(name)) << name << ": " << r.out;
  const double worker_kv = f["state_worker_kv_bytes"]["median"];
  EXPECT_GT(worker_kv, 100000.0);
  EXPECT_GT(f["state_kv_bytes"]["median"].get<double>(), worker_kv);
  EXPECT_LT(f["link_bytes_per_save"]["median"].get<double>(), worker_kv / 20);
  EXPECT_LT(f["link_bytes_per_restore"]["median"].get<double>(), worker_kv / 20);
  auto bad = run_tandem("bench --url http://127.0.0.1:1 --only-conversations", dir.file(""));
  EXPECT_EQ(bad.exit_code, 1);
  EXPECT_NE(bad.err.find("--only-conversations needs --conversations N"), std::string::npos) << bad.err;
}

// With a folder, states that memory on some node cannot hold go to disk, the head's part into
// the head's folder and the worker's into its own cache folder, and a conversation returns from
// there with its slot's own text.
TEST(PromptCache, StatesSpillToEachNodesDiskAndReturnFromThere) {
  ScratchDir dir;
  // Two states of these prompts per node in memory (~450 KiB on each node), the rest on disk.
  LocalCluster cluster(dir, 1,
                       {"--parallel", "1", "--prompt-cache", "1MiB", "--prompt-cache-dir", dir.file("head-prompts")},
                       {"--cache-dir", dir.file("worker{i}-cache")});
  ASSERT_TRUE(cluster.wait_ready()) << cluster.log();
  httplib::Client c("127.0.0.1", cluster.port());
  c.set_read_timeout(120, 0);
  const auto post = [&](const std::string& prompt) { return testing::post(c, cluster, prompt); };
  const std::string &a = kAlice, &b = kBob, d = conversation("Dora thinks:", " seven green apples fell");
  ASSERT_FALSE(post(a).empty());
  const json reused = post(a);  // see the first test: the text a restore must give
  ASSERT_FALSE(post(b).empty());
  ASSERT_FALSE(post(d).empty());  // a's two states (its replies differ) are on disk by now
  json health;
  for (int i = 0; i < 100; ++i) {
    health = json::parse(c.Get("/health", auth(cluster))->body);
    if (health["prompt_cache"].value("spills", 0) >= 2) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  EXPECT_GE(health["prompt_cache"]["spills"].get<int>(), 2) << health.dump();
  EXPECT_GT(health["prompt_cache"]["disk_bytes"]["w0"].get<uint64_t>(), 0u) << health.dump();
  EXPECT_GT(health["prompt_cache"]["disk_bytes"]["head"].get<uint64_t>(), 0u);
  EXPECT_FALSE(std::filesystem::is_empty(dir.file("head-prompts")));
  EXPECT_FALSE(std::filesystem::is_empty(dir.file("worker0-cache") + "/prompt-cache"));

  const json again = post(a);
  ASSERT_TRUE(again.contains("usage"));
  EXPECT_EQ(again["choices"][0]["text"], reused["choices"][0]["text"]) << "a state back from disk gave other text";
  EXPECT_EQ(again["usage"]["prompt_tokens_details"]["cached_tokens"],
            reused["usage"]["prompt_tokens_details"]["cached_tokens"]);
  for (int i = 0; i < 100; ++i) {
    health = json::parse(c.Get("/health", auth(cluster))->body);
    if (health["prompt_cache"].value("hits", 0) >= 1) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  EXPECT_EQ(health["prompt_cache"]["hits"], 1) << "both of a's states were on disk: " << health.dump();
  EXPECT_EQ(health["prompt_cache"]["failed_restores"], 0);
}

// A worker lost with states saved: the request that needs it fails, the engine restarts with an
// empty cache (the worker's parts went with its session), and the conversation that returns is
// evaluated afresh and gets its first turn's text, not a restore of parts that no longer exist.
TEST(PromptCache, AWorkerLostWithItsPartsCostsTheCacheNotTheAnswers) {
  ScratchDir dir;
  LocalCluster cluster(dir, 1, {"--parallel", "1"});
  ASSERT_TRUE(cluster.wait_ready()) << cluster.log();
  httplib::Client c("127.0.0.1", cluster.port());
  c.set_read_timeout(120, 0);
  const std::string &a = kAlice, &b = kBob;
  const auto post = [&](const std::string& prompt) {
    return c.Post("/v1/completions", auth(cluster), completion(prompt).dump(), "application/json");
  };
  auto first = post(a);
  ASSERT_TRUE(first && first->status == 200);
  ASSERT_EQ(post(b)->status, 200);
  json health;
  for (int i = 0; i < 100; ++i) {
    health = json::parse(c.Get("/health", auth(cluster))->body);
    if (health["prompt_cache"].value("saves", 0) >= 2) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  ASSERT_GT(health["prompt_cache"]["bytes"]["w0"].get<uint64_t>(), 0u) << health.dump();

  cluster.kill_worker(0, SIGKILL);
  auto lost = post(a);
  ASSERT_TRUE(lost);
  EXPECT_EQ(lost->status, 503) << lost->body;
  ASSERT_EQ(cluster.wait_state("degraded", 10000), "degraded") << cluster.log();
  cluster.restart_worker(0);
  ASSERT_TRUE(cluster.wait_ready()) << cluster.log();
  health = json::parse(c.Get("/health", auth(cluster))->body);
  EXPECT_EQ(health["prompt_cache"]["entries"], 0) << "a new engine starts with an empty cache: " << health.dump();
  auto again = post(a);
  ASSERT_TRUE(again && again->status == 200) << (again ? again->body : "");
  const json j = json::parse(again->body), f = json::parse(first->body);
  EXPECT_EQ(j["choices"][0]["text"], f["choices"][0]["text"]) << "evaluated afresh, as the first turn was";
  EXPECT_LE(j["usage"]["prompt_tokens_details"]["cached_tokens"].get<int>(), 1);
}

}  // namespace
}  // namespace tandem::testing
