// The official SDKs, unchanged, against a split cluster (two workers on loopback): the
// `@anthropic-ai/sdk` through tests/integration/anthropic_client.mjs, the `openai` package's
// newer routes (Responses, logprobs, models.retrieve, a browser preflight) through
// openai_client.mjs. scripts/install-node-deps.sh installs both, pinned; without a reachable npm
// registry the test fails and says so.
#include <sys/wait.h>

#include <cstdlib>
#include <fstream>
#include <string>

#include <gtest/gtest.h>

#include "integration/cluster.h"

namespace tandem::testing {
namespace {

const char* kOrigin = "https://chat.example.org";

// Runs one harness; its exit status and everything it printed.
std::pair<int, std::string> run_harness(const ScratchDir& dir, const std::string& script, const std::string& args) {
  const std::string root = TANDEM_SOURCE_DIR;
  const std::string out = dir.file(script + ".out");
  // Exit 3: the SDKs could not be installed (the script's message says why: no registry, say).
  const std::string cmd = "m=$(" + root + "/scripts/install-node-deps.sh) || exit 3; TANDEM_NODE_MODULES=$m node " +
                          root + "/tests/integration/" + script + " " + args + " > " + out + " 2>&1";
  const int rc = std::system(("bash -c '" + cmd + "' 2>" + out + ".install").c_str());
  std::ifstream in(out), install(out + ".install");
  std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  const std::string installed((std::istreambuf_iterator<char>(install)), std::istreambuf_iterator<char>());
  if (WEXITSTATUS(rc) == 3) return {3, "the official SDKs could not be installed with npm: " + installed};
  return {WEXITSTATUS(rc), text + installed};
}

class Clients : public ::testing::Test {
 protected:
  void SetUp() override {
    // 2048 tokens: a conversation with tool definitions in MiniMax-M3's template needs ~700.
    cluster_ = std::make_unique<LocalCluster>(dir_, 2,
                                              std::vector<std::string>{"--context", "2048", "--cors-origin", kOrigin});
    ASSERT_TRUE(cluster_->wait_ready()) << cluster_->log();
  }
  std::string base() const { return "http://127.0.0.1:" + std::to_string(cluster_->port()); }
  ScratchDir dir_;
  std::unique_ptr<LocalCluster> cluster_;
};

TEST_F(Clients, TheAnthropicSdkCreatesStreamsCallsToolsAndCountsTokens) {
  auto [rc, out] = run_harness(dir_, "anthropic_client.mjs",
                               "--base-url " + base() + " --api-key " + cluster_->key() + " --model tiny");
  EXPECT_EQ(rc, 0) << out << cluster_->log();
  EXPECT_NE(out.find("\"ok\":true"), std::string::npos) << out;
}

TEST_F(Clients, TheOpenAiSdkUsesResponsesLogprobsOneModelAndABrowserPreflight) {
  auto [rc, out] = run_harness(
      dir_, "openai_client.mjs",
      "--base-url " + base() + "/v1 --api-key " + cluster_->key() + " --model tiny --origin " + kOrigin +
          " --checks retrieve,logprobs,responses,responses_stream,responses_tool,responses_json,preflight,auth");
  EXPECT_EQ(rc, 0) << out << cluster_->log();
  EXPECT_NE(out.find("\"ok\":true"), std::string::npos) << out;
}

}  // namespace
}  // namespace tandem::testing
