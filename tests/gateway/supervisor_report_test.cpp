// What /health and /metrics show of the supervisor (gateway/supervisor_report.h), from a snapshot.
#include "gateway/supervisor_report.h"

#include "gateway/prometheus.h"

#include <gtest/gtest.h>

#include <sstream>

namespace tandem::gateway {
namespace {

SupervisorSnapshot two_workers_ready() {
  SupervisorSnapshot s;
  s.model_id = "m3";
  s.head_name = "head";
  s.state = ServeState::ready;
  s.engine_pid = 1234;
  s.engine_connected = true;
  s.restarts = 2;
  s.engine.state = engine::EngineState::ready;
  s.engine.slots_busy = 1;
  s.engine.slots_total = 4;
  s.engine.waiting = 3;
  s.engine.tokens_per_s = 12.5;
  uint64_t v = 100;
  for (const engine::PromptCacheField& f : engine::kPromptCacheFields) s.engine.prompt_cache.*f.member = v++;
  s.engine.prompt_cache.per_worker = {{"127.0.0.1:7001", 11}, {"127.0.0.1:7002", 22}};
  s.engine.prompt_cache.per_worker_disk = {{"127.0.0.1:7001", 33}};
  link::ForwarderStats up;
  up.state = link::LinkState::up;
  up.bytes_to_worker = 5;
  up.bytes_from_worker = 6;
  s.workers.push_back({"gpu-a", "10.0.0.2:41000", "127.0.0.1:7001", up, ""});
  s.workers.push_back({"gpu-b", "10.0.0.3:41000", "127.0.0.1:7002", up, "serves another head"});
  return s;
}

std::vector<std::string> family_names(const std::string& text) {
  std::vector<std::string> names;
  std::istringstream in(text);
  for (std::string line; std::getline(in, line);) {
    if (line.rfind("# TYPE ", 0) == 0) names.push_back(line.substr(7, line.find(' ', 7) - 7));
  }
  return names;
}

// The names dashboards and alerts use, in the order /metrics has always listed them.
TEST(SupervisorReport, TheMetricFamiliesKeepTheirNamesAndOrder) {
  const std::vector<std::string> expected = {"tandem_link_bytes_total",
                                             "tandem_node_up",
                                             "tandem_engine_restarts_total",
                                             "tandem_slots_busy",
                                             "tandem_slots_capacity",
                                             "tandem_queue_depth",
                                             "tandem_engine_tokens_per_second",
                                             "tandem_prompt_cache_bytes",
                                             "tandem_prompt_cache_capacity_bytes",
                                             "tandem_prompt_cache_disk_capacity_bytes",
                                             "tandem_prompt_cache_entries",
                                             "tandem_prompt_cache_spills_total",
                                             "tandem_prompt_cache_hits_total",
                                             "tandem_prompt_cache_misses_total",
                                             "tandem_prompt_cache_evictions_total",
                                             "tandem_prompt_cache_restored_tokens_total",
                                             "tandem_prompt_cache_failed_restores_total",
                                             "tandem_speculative_steps_total",
                                             "tandem_speculative_drafted_tokens_total",
                                             "tandem_speculative_accepted_tokens_total",
                                             "tandem_speculative_draft_seconds_total",
                                             "tandem_speculative_verify_seconds_total"};
  EXPECT_EQ(family_names(supervisor_metric_families(two_workers_ready())), expected);
}

// Every row of the prompt cache's field table with a metric shows its counter there.
TEST(SupervisorReport, PromptCacheMetricsComeFromTheFieldTable) {
  const SupervisorSnapshot s = two_workers_ready();
  const std::string text = supervisor_metric_families(s);
  for (const engine::PromptCacheField& f : engine::kPromptCacheFields) {
    if (f.metric.empty()) continue;
    const std::string sample = std::string(f.metric) + " " +
                               prometheus::format_number(static_cast<double>(s.engine.prompt_cache.*f.member)) + "\n";
    EXPECT_NE(text.find(sample), std::string::npos) << sample;
  }
  EXPECT_NE(text.find("tandem_prompt_cache_bytes{node=\"gpu-a\",tier=\"disk\"} 33\n"), std::string::npos) << text;
  EXPECT_NE(text.find("tandem_prompt_cache_bytes{node=\"gpu-b\",tier=\"memory\"} 22\n"), std::string::npos);
}

TEST(SupervisorReport, HealthShowsTheTablesFieldsAndEachNode) {
  const SupervisorSnapshot s = two_workers_ready();
  const HealthReport h = health_report(s);
  EXPECT_EQ(h.state, ServeState::ready);
  EXPECT_TRUE(h.accepting);
  const nlohmann::json& pc = h.detail["prompt_cache"];
  for (const engine::PromptCacheField& f : engine::kPromptCacheFields) {
    if (f.health.empty()) continue;
    EXPECT_EQ(pc[std::string(f.health)], s.engine.prompt_cache.*f.member) << f.health;
  }
  // The table's fields and the two per-node maps, nothing else.
  EXPECT_EQ(pc.size(), 14u) << pc.dump();
  EXPECT_EQ(pc["bytes"], (nlohmann::json{{"head", s.engine.prompt_cache.bytes}, {"gpu-a", 11}, {"gpu-b", 22}}));
  EXPECT_EQ(h.detail["engine"]["state"], "ready");
  ASSERT_EQ(h.detail["nodes"].size(), 2u);
  EXPECT_EQ(h.detail["nodes"][0]["state"], "up");
  EXPECT_EQ(h.detail["nodes"][1]["state"], "refused");
  EXPECT_EQ(h.detail["nodes"][1]["last_error"], "serves another head");
}

TEST(SupervisorReport, WithoutAnEngineItsFiguresAreZeroAndItIsStopped) {
  SupervisorSnapshot s = two_workers_ready();
  s.engine_pid = -1;
  s.state = ServeState::degraded;
  const HealthReport h = health_report(s);
  EXPECT_FALSE(h.accepting);
  EXPECT_EQ(h.retry_after_s, 10);
  EXPECT_EQ(h.detail["engine"]["state"], "stopped");
  EXPECT_EQ(h.detail["prompt_cache"]["hits"], 0);
  EXPECT_NE(h.extra_metrics.find("tandem_slots_busy 0\n"), std::string::npos);
}

TEST(SupervisorReport, ALoadingEngineShowsAsLoadingOrRecovering) {
  SupervisorSnapshot s = two_workers_ready();
  s.engine.state = engine::EngineState::loading;
  EXPECT_EQ(health_report(s).state, ServeState::recovering);
  s.restarts = 0;
  EXPECT_EQ(health_report(s).state, ServeState::loading);
}

}  // namespace
}  // namespace tandem::gateway
