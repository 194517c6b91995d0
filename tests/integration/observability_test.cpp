// What an operator watches on a real split cluster: /metrics as Prometheus' own checker reads it,
// and the access log, one line per request, in text and in JSON, without keys or request text.
#include <httplib.h>
#include <sys/wait.h>

#include <algorithm>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <thread>

#include <gtest/gtest.h>

#include "cluster.h"

namespace tandem::testing {
namespace {

using nlohmann::json;

constexpr const char* kMarker = "zebra quartz";  // request text that must never reach the log

httplib::Headers auth(const LocalCluster& c) { return {{"Authorization", "Bearer " + c.key()}}; }

json chat(bool stream) {
  return {{"model", "tiny"},
          {"messages", {{{"role", "user"}, {"content", std::string("say ") + kMarker}}}},
          {"max_tokens", 4},
          {"stream", stream}};
}

// Lines of the gateway's log that come from the access log (text format).
std::vector<std::string> access_lines(const std::string& log) {
  std::vector<std::string> out;
  std::istringstream in(log);
  for (std::string l; std::getline(in, l);) {
    if (l.find(" access: ") != std::string::npos) out.push_back(l);
  }
  return out;
}

std::string read_file(const std::string& path) {
  std::ifstream in(path);
  return std::string((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
}

// A split cluster that has served one whole and one streamed chat.
class Observed : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_TRUE(cluster_.wait_ready()) << cluster_.log();
    c_.set_read_timeout(60, 0);
    ASSERT_EQ(c_.Post("/v1/chat/completions", auth(cluster_), chat(false).dump(), "application/json")->status, 200);
    ASSERT_EQ(c_.Post("/v1/chat/completions", auth(cluster_), chat(true).dump(), "application/json")->status, 200);
  }
  ScratchDir dir_;
  LocalCluster cluster_{dir_, 1};
  httplib::Client c_{"127.0.0.1", cluster_.port()};
};

TEST_F(Observed, MetricsPassPromtoolsCheckWithEveryFamilyAnOperatorNeeds) {
  // A stream is counted when its handler ends, which can be just after the client read its last
  // byte: the page is read again until both requests are on it.
  auto m = c_.Get("/metrics");
  for (int i = 0; i < 50 && m &&
                  m->body.find("tandem_http_requests_total{endpoint=\"chat\",code=\"200\"} 2\n") == std::string::npos;
       ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
    m = c_.Get("/metrics");
  }
  ASSERT_TRUE(m);
  ASSERT_EQ(m->status, 200);
  for (const char* family :
       {"tandem_http_requests_total", "tandem_request_duration_seconds_bucket",
        "tandem_time_to_first_token_seconds_bucket", "tandem_tokens_total", "tandem_requests_in_flight",
        "tandem_slots_busy", "tandem_slots_capacity", "tandem_queue_depth", "tandem_engine_tokens_per_second",
        "tandem_engine_restarts_total", "tandem_state", "tandem_node_up", "tandem_link_bytes_total"}) {
    EXPECT_NE(m->body.find(std::string("\n") + family), std::string::npos) << family << " missing:\n" << m->body;
  }
  EXPECT_NE(m->body.find("tandem_time_to_first_token_seconds_count{endpoint=\"chat\"} 2\n"), std::string::npos)
      << m->body;
  EXPECT_NE(m->body.find("tandem_slots_capacity 2\n"), std::string::npos) << m->body;  // --parallel 2

  const std::string page = dir_.file("metrics.txt");
  std::ofstream(page) << m->body;
  const std::string out = dir_.file("promtool.out");
  const std::string cmd = "tool=$(" + std::string(TANDEM_SOURCE_DIR) +
                          "/scripts/install-promtool.sh) && \"$tool\" check metrics < " + page + " > " + out + " 2>&1";
  const int rc = std::system(("bash -c '" + cmd + "'").c_str());
  EXPECT_EQ(WEXITSTATUS(rc), 0) << read_file(out) << "\n" << m->body;
  EXPECT_EQ(read_file(out), "") << "promtool's lint findings";
}

TEST_F(Observed, TheAccessLogHasALinePerRequestWithoutKeysOrText) {
  LocalCluster& cluster = cluster_;
  httplib::Client& c = c_;
  ASSERT_EQ(c.Post("/v1/chat/completions", {{"Authorization", "Bearer wrong"}}, chat(false).dump(), "application/json")
                ->status,
            401);
  ASSERT_EQ(c.Get("/health")->status, 200);  // probes are not logged
  ASSERT_EQ(c.Get("/v1/models", auth(cluster))->status, 200);
  std::vector<std::string> lines;
  for (int i = 0; i < 50 && (lines = access_lines(cluster.log())).size() < 4; ++i)
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  ASSERT_EQ(lines.size(), 4u) << cluster.log();
  // A stream's line is written when its handler ends, which can be after the client has read its
  // last byte and sent the next request: order the lines by what they are, not by when.
  std::stable_partition(lines.begin(), lines.end(), [](const std::string& l) {
    return l.find("POST /v1/chat/completions 200") != std::string::npos;
  });
  std::stable_partition(lines.begin() + 2, lines.end(),
                        [](const std::string& l) { return l.find(" 401 ") != std::string::npos; });
  for (const std::string& l : {lines[0], lines[1]}) {
    EXPECT_NE(l.find("POST /v1/chat/completions 200"), std::string::npos) << l;
    EXPECT_NE(l.find("key=test"), std::string::npos) << l;
    EXPECT_NE(l.find("model=tiny"), std::string::npos) << l;
    EXPECT_NE(l.find("prompt_tokens="), std::string::npos) << l;
    EXPECT_NE(l.find("completion_tokens=4"), std::string::npos) << l;
    EXPECT_NE(l.find("ttft_ms="), std::string::npos) << l;
    EXPECT_NE(l.find("duration_ms="), std::string::npos) << l;
  }
  EXPECT_NE(lines[2].find("POST /v1/chat/completions 401"), std::string::npos) << lines[2];
  EXPECT_NE(lines[2].find("key=-"), std::string::npos) << lines[2];
  EXPECT_NE(lines[3].find("GET /v1/models 200"), std::string::npos) << lines[3];
  const std::string log = cluster.log();
  EXPECT_EQ(log.find(cluster.key()), std::string::npos) << "the key is in the log";
  EXPECT_EQ(log.find(kMarker), std::string::npos) << "request text is in the log";
}

TEST(Observability, TheAccessLogInJsonIsOneRecordPerRequest) {
  ScratchDir dir;
  LocalCluster cluster(dir, 1, {"--log-format", "json"});
  ASSERT_TRUE(cluster.wait_ready()) << cluster.log();
  httplib::Client c("127.0.0.1", cluster.port());
  c.set_read_timeout(60, 0);
  ASSERT_EQ(c.Post("/v1/chat/completions", auth(cluster), chat(true).dump(), "application/json")->status, 200);
  json record;
  for (int i = 0; i < 50 && record.is_null(); ++i) {
    std::istringstream in(cluster.log());
    for (std::string l; std::getline(in, l);) {
      const json j = json::parse(l, nullptr, false);
      ASSERT_TRUE(j.is_object()) << "not a JSON record: " << l;
      if (j.value("component", "") == "access") record = j;
    }
    if (record.is_null()) std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  ASSERT_TRUE(record.is_object()) << cluster.log();
  EXPECT_EQ(record["key"], "test");
  EXPECT_EQ(record["route"], "/v1/chat/completions");
  EXPECT_EQ(record["status"], "200");
  EXPECT_EQ(record["completion_tokens"], "4");
  EXPECT_TRUE(record.contains("ttft_ms") && record.contains("duration_ms") && record.contains("ts")) << record.dump();
  EXPECT_EQ(cluster.log().find(kMarker), std::string::npos);
}

}  // namespace
}  // namespace tandem::testing
