// Flags and config keys line up: every key of tandem.toml that changes what serve or a worker does
// has a flag, and every flag that stands for a key names it in --help (docs/config.md's flag column).
#include <regex>
#include <set>
#include <string>

#include <gtest/gtest.h>

#include "config/config.h"
#include "support/process.h"
#include "test_util.h"

namespace tandem::cli {
namespace {

using tandem::testing::run_tandem;
using tandem::testing::ScratchDir;

// The "[table] key" names that --help's lines end with: "([model] layers)", "([server] x = true)".
std::set<std::string> keys_named_in(const std::string& help) {
  std::set<std::string> out;
  static const std::regex named(R"(\((\[\[?[a-z]+\]\]?) ([a-z_]+)( = [a-z]+)?\))");
  for (auto it = std::sregex_iterator(help.begin(), help.end(), named); it != std::sregex_iterator(); ++it) {
    out.insert((*it)[1].str() + " " + (*it)[2].str());
  }
  return out;
}

TEST(FlagsAndKeys, EveryKeyHasAFlagAndEveryFlagNamesARealKey) {
  ScratchDir dir;
  const auto serve = run_tandem("serve --help", dir.file(""));
  const auto worker = run_tandem("worker --help", dir.file(""));
  ASSERT_EQ(serve.exit_code, 0) << serve.err;
  ASSERT_EQ(worker.exit_code, 0) << worker.err;
  const auto in_serve = keys_named_in(serve.out), in_worker = keys_named_in(worker.out);
  ASSERT_GT(in_serve.size(), 20u) << serve.out;

  const auto known = config::known_keys();
  const std::set<std::string> known_set(known.begin(), known.end());
  for (const auto& k : in_serve)
    EXPECT_TRUE(known_set.count(k)) << "serve --help names " << k << ", which is no config key";
  for (const auto& k : in_worker)
    EXPECT_TRUE(known_set.count(k)) << "worker --help names " << k << ", which is no config key";

  // Keys no single flag stands for: a worker's name and address come together in serve's
  // --worker NAME=HOST:PORT; its declared memory, bandwidth and unified memory live in the head's
  // file only.
  const std::set<std::string> file_only = {"[[worker]] name", "[[worker]] address", "[[worker]] memory",
                                           "[[worker]] bandwidth", "[[worker]] unified_memory"};
  for (const std::string& k : known) {
    if (file_only.count(k)) continue;
    if (k.rfind("[[worker]]", 0) == 0) {
      EXPECT_TRUE(in_worker.count(k)) << k << " has no `tandem worker` flag that names it:\n" << worker.out;
    } else {
      EXPECT_TRUE(in_serve.count(k)) << k << " has no `tandem serve` flag that names it:\n" << serve.out;
    }
  }
}

// `tandem keys` finds its database in tandem.toml, and its options may follow the subcommand.
TEST(FlagsAndKeys, KeysTakeTheConfigAndOptionsAfterTheSubcommand) {
  ScratchDir dir;
  tandem::testing::write_file(dir.file("tandem.toml"), "[server]\nkeys_db = \"keys.db\"\n");  // relative to the file
  auto made = run_tandem("keys -c " + dir.file("tandem.toml") + " create --name alice", "/");
  ASSERT_EQ(made.exit_code, 0) << made.err;
  EXPECT_FALSE(made.out.empty());
  auto listed = run_tandem("keys list --db " + dir.file("keys.db"), "/");
  ASSERT_EQ(listed.exit_code, 0) << listed.err;
  EXPECT_NE(listed.out.find("alice"), std::string::npos) << listed.out;
  EXPECT_EQ(listed.out.find(made.out.substr(0, made.out.find('\n'))), std::string::npos)
      << "a key is never shown again";
  auto via_config = run_tandem("keys list -c " + dir.file("tandem.toml"), "/");
  EXPECT_NE(via_config.out.find("alice"), std::string::npos) << via_config.err;
  auto bad = run_tandem("keys list -c " + dir.file("missing.toml"), "/");
  EXPECT_EQ(bad.exit_code, 2) << bad.err;
  EXPECT_NE(bad.err.find("missing.toml"), std::string::npos) << bad.err;
}

}  // namespace
}  // namespace tandem::cli
