// The coding agents people point at tandem, unchanged, against a split cluster (two workers on
// loopback, the tiny model with a context that holds their ~20k-token prompts): the Claude Code
// CLI (`claude -p`, then `claude -p --continue`) and the Codex CLI (`codex exec`, then `codex exec
// resume --last`), three turns each, every turn answered, and each returning turn read at least
// 95 % of its prompt from what was already computed, as serve's usage (its access log) and the
// agent's own report say. The
// agents take turns on one slot, so their second turns find it holding their first (the slot's
// prefix), their third turns find the other agent there (the prompt cache restores theirs).
// scripts/install-agents.sh installs both, pinned; without a reachable npm registry the test fails
// and says so. A random-weight model never stops by itself: every turn ends on the output cap
// (Claude Code's own, CLAUDE_CODE_MAX_OUTPUT_TOKENS; serve's --max-tokens for Codex, which asks
// for none), which each agent reports in its own way: a well-formed end.
#include <sys/wait.h>

#include <cstdlib>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>

#include <gtest/gtest.h>

#include "integration/cluster.h"

namespace tandem::testing {
namespace {

using nlohmann::json;

constexpr int kOutputCap = 24;
constexpr double kMinCachedShare = 0.95;

// One turn as the agent and the server saw it.
struct Turn {
  int exit_code = -1;
  bool capped = false;              // the agent ended the turn on its output-token cap, as it does
  std::string output;               // stdout, then stderr
  uint64_t prompt = 0, cached = 0;  // the agent's usage report, where it gives one
  // The turn's API requests, from serve's access log: status, prompt and cached tokens.
  struct Request {
    int status = 0;
    uint64_t prompt = 0, cached = 0, completion = 0;
  };
  std::vector<Request> requests;
};

// The value of `name=` in an access-log line, or 0.
uint64_t field(const std::string& line, const std::string& name) {
  const size_t at = line.find(" " + name + "=");
  return at == std::string::npos ? 0 : std::stoull(line.substr(at + name.size() + 2));
}

std::string shell_quoted(const std::string& s) {
  std::string out = "'";
  for (char c : s) out += c == '\'' ? std::string("'\\''") : std::string(1, c);
  return out + "'";
}

class Agents : public ::testing::Test {
 protected:
  void SetUp() override {
    const std::string root = TANDEM_SOURCE_DIR;
    const std::string log = dir_.file("install-agents.log");
    const std::string bin = dir_.file("agents-bin");
    const int rc =
        std::system(("bash -c " + shell_quoted(root + "/scripts/install-agents.sh > " + bin + " 2> " + log)).c_str());
    ASSERT_EQ(WEXITSTATUS(rc), 0) << "the agent CLIs could not be installed with npm: " << read_file(log);
    bin_ = read_file(bin);
    while (!bin_.empty() && bin_.back() == '\n') bin_.pop_back();
    cluster_ = std::make_unique<LocalCluster>(
        dir_, 2,
        std::vector<std::string>{"--context", "28672", "--parallel", "1", "--max-tokens", std::to_string(kOutputCap)},
        std::vector<std::string>{}, "--context 32768");
    ASSERT_TRUE(cluster_->wait_ready(120000)) << cluster_->log();
    home_ = dir_.file("home");
    work_ = dir_.file("project");
    std::filesystem::create_directories(home_ + "/.codex");
    std::filesystem::create_directories(work_);
    write_file(home_ + "/.codex/config.toml",
               "model = \"tiny\"\nmodel_provider = \"tandem\"\n[model_providers.tandem]\nname = \"tandem\"\n"
               "base_url = \"http://127.0.0.1:" +
                   std::to_string(cluster_->port()) +
                   "/v1\"\nenv_key = \"TANDEM_API_KEY\"\nwire_api = \"responses\"\n");
  }

  // The generation requests (`route`) serve logged after the first `from` bytes of its log.
  std::vector<Turn::Request> requests_since(size_t from, const std::string& route) {
    std::vector<Turn::Request> out;
    std::istringstream lines(cluster_->log().substr(from));
    for (std::string line; std::getline(lines, line);) {
      if (line.find(" access: POST ") == std::string::npos || line.find(" route=" + route + " ") == std::string::npos)
        continue;
      out.push_back({static_cast<int>(field(line, "status")), field(line, "prompt_tokens"),
                     field(line, "cached_tokens"), field(line, "completion_tokens")});
    }
    return out;
  }

  // Runs one agent command in the project folder, with its own HOME and the cluster's address and key.
  std::pair<int, std::string> run(const std::string& command, const std::string& name) {
    const std::string out = dir_.file(name + ".out"), err = dir_.file(name + ".err");
    const std::string env = "HOME=" + shell_quoted(home_) + " PATH=" + shell_quoted(bin_) +
                            ":\"$PATH\" ANTHROPIC_BASE_URL=http://127.0.0.1:" + std::to_string(cluster_->port()) +
                            " ANTHROPIC_API_KEY=" + cluster_->key() + " TANDEM_API_KEY=" + cluster_->key() +
                            " CLAUDE_CODE_MAX_OUTPUT_TOKENS=" + std::to_string(kOutputCap) +
                            " CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC=1 DISABLE_AUTOUPDATER=1";
    const std::string cmd =
        "cd " + shell_quoted(work_) + " && " + env + " timeout 600 " + command + " < /dev/null > " + out + " 2> " + err;
    const int rc = std::system(("bash -c " + shell_quoted(cmd)).c_str());
    return {WIFEXITED(rc) ? WEXITSTATUS(rc) : 128, read_file(out) + "\n--- stderr:\n" + read_file(err)};
  }

  // `claude -p` prints one JSON result whose usage is Anthropic's: the prompt is input + cache read
  // + cache creation.
  Turn claude(const std::string& prompt, bool resume, const std::string& name) {
    Turn t;
    const size_t from = cluster_->log().size();
    auto [rc, out] = run(std::string("claude -p ") + (resume ? "--continue " : "") + shell_quoted(prompt) +
                             " --model tiny --output-format json",
                         name);
    t.exit_code = rc;
    t.output = out;
    t.requests = requests_since(from, "/v1/messages");
    const json r = json::parse(out.substr(0, out.find("\n--- stderr:")), nullptr, false);
    if (!r.is_object() || !r.contains("usage")) return t;
    // Claude Code answers an answer cut at its cap by asking to go on (three times), then ends the
    // turn with this error.
    t.capped = r.value("api_error", json()) == "max_output_tokens";
    const json& u = r["usage"];  // all of the turn's requests together
    t.cached = u.value("cache_read_input_tokens", 0);
    t.prompt = u.value("input_tokens", 0) + t.cached + u.value("cache_creation_input_tokens", 0);
    return t;
  }

  // `codex exec --json` prints JSON lines; turn.completed carries the usage (OpenAI's: input
  // includes the cached tokens), the agent_message item the answer.
  Turn codex(const std::string& prompt, bool resume, const std::string& name) {
    Turn t;
    const size_t from = cluster_->log().size();
    auto [rc, out] = run(std::string("codex exec --skip-git-repo-check --json ") + (resume ? "resume --last " : "") +
                             shell_quoted(prompt),
                         name);
    t.exit_code = rc;
    t.output = out;
    t.requests = requests_since(from, "/v1/responses");
    std::istringstream lines(out.substr(0, out.find("\n--- stderr:")));
    for (std::string line; std::getline(lines, line);) {
      const json e = json::parse(line, nullptr, false);
      if (!e.is_object()) continue;
      if (e.value("type", "") == "turn.completed") {
        t.prompt = e["usage"].value("input_tokens", 0);
        t.cached = e["usage"].value("cached_input_tokens", 0);
      }
      // Codex ends a turn whose answer was cut by serve's --max-tokens (`incomplete`) this way.
      if (e.value("type", "") == "turn.failed") t.capped = e.dump().find("max_output_tokens") != std::string::npos;
    }
    return t;
  }

  // Every turn ended well (or on the output cap, as the agent ends it), every request of it was
  // answered with generated tokens, and its prompt is the agent's real one.
  void expect_answered(const Turn& t, const std::string& what) {
    EXPECT_TRUE(t.exit_code == 0 || t.capped) << what << ": exit " << t.exit_code << "\n"
                                              << t.output << "\n"
                                              << cluster_->log();
    ASSERT_FALSE(t.requests.empty()) << what << ": no request reached serve\n" << t.output;
    for (const auto& r : t.requests) {
      EXPECT_EQ(r.status, 200) << what << "\n" << t.output << "\n" << cluster_->log();
      EXPECT_GT(r.completion, 0u) << what;
    }
    EXPECT_GT(t.requests[0].prompt, 4000u) << what << ": the agent's prompt is its system prompt and tools";
  }
  // The turn's first request read at least 95 % of its prompt from cache (serve's usage), and so
  // did the turn as the agent reports it, where it reports it.
  void expect_reused(const Turn& t, const std::string& what) {
    expect_answered(t, what);
    if (t.requests.empty()) return;
    const auto& first = t.requests[0];
    EXPECT_GE(static_cast<double>(first.cached), kMinCachedShare * static_cast<double>(first.prompt))
        << what << ": " << first.cached << " of " << first.prompt << " prompt tokens read from cache\n"
        << cluster_->log();
    if (t.prompt > 0) {
      EXPECT_GE(static_cast<double>(t.cached), kMinCachedShare * static_cast<double>(t.prompt))
          << what << ": the agent reports " << t.cached << " of " << t.prompt << " prompt tokens read from cache\n"
          << t.output;
    }
  }

  ScratchDir dir_;
  std::unique_ptr<LocalCluster> cluster_;
  std::string bin_, home_, work_;
};

TEST_F(Agents, ClaudeCodeAndCodexTakeThreeTurnsEachReadingTheirPrefixFromCache) {
  const Turn c1 = claude("Say hi.", false, "claude-1");
  expect_answered(c1, "claude turn 1");
  const Turn c2 = claude("And again, shorter.", true, "claude-2");
  expect_reused(c2, "claude turn 2 (its slot holds turn 1)");

  const Turn x1 = codex("Say hi.", false, "codex-1");
  expect_answered(x1, "codex turn 1");
  const Turn x2 = codex("And again, shorter.", true, "codex-2");
  expect_reused(x2, "codex turn 2 (its slot holds turn 1)");

  const Turn c3 = claude("One more time.", true, "claude-3");
  expect_reused(c3, "claude turn 3 (the prompt cache restores it)");
  const Turn x3 = codex("One more time.", true, "codex-3");
  expect_reused(x3, "codex turn 3 (the prompt cache restores it)");

  // Each turn's prompt and cached tokens, for the record (docs/serve.md quotes a run).
  for (const auto& [name, t] : std::vector<std::pair<std::string, Turn>>{
           {"claude 1", c1}, {"claude 2", c2}, {"claude 3", c3}, {"codex 1", x1}, {"codex 2", x2}, {"codex 3", x3}}) {
    std::cout << "[ agents ] " << name << ":";
    for (const auto& r : t.requests) std::cout << " request: prompt " << r.prompt << ", cached " << r.cached << ";";
    std::cout << " agent's usage: prompt " << t.prompt << ", cached " << t.cached << "\n";
  }
}

}  // namespace
}  // namespace tandem::testing
