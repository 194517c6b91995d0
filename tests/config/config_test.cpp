// tandem.toml: every key read, and every mistake named with its line and key.
#include "config/config.h"

#include <gtest/gtest.h>

#include "test_util.h"

namespace tandem::config {
namespace {

TEST(Config, ReadsEveryKeyOfTheExample) {
  auto c = load_config(std::string(TANDEM_SOURCE_DIR) + "/deploy/tandem.example.toml");
  ASSERT_TRUE(c.is_ok()) << c.status().to_string();
  EXPECT_EQ(c->cluster.secret_file, "/etc/tandem/cluster.key");
  EXPECT_EQ(c->cluster.head_name, "box-a");
  EXPECT_EQ(c->cluster.head_memory, 120ull << 30);
  EXPECT_EQ(c->cluster.head_bandwidth, 273e9);
  EXPECT_EQ(c->cluster.head_device, "gpu");
  ASSERT_EQ(c->workers.size(), 1u);
  EXPECT_EQ(c->workers[0].name, "box-b");
  EXPECT_EQ(c->workers[0].address, "10.0.0.2:7070");
  EXPECT_EQ(c->workers[0].memory, 120ull << 30);
  EXPECT_EQ(c->workers[0].listen, "0.0.0.0:7070");
  EXPECT_EQ(c->workers[0].cache_dir, "/var/cache/tandem/rpc");
  EXPECT_EQ(c->workers[0].cache_max_size, 400ull << 30);
  EXPECT_EQ(c->model.path, "/models/MiniMax-M3-UD-IQ4_XS-00001-of-00005.gguf");
  EXPECT_EQ(c->model.context, 32768u);
  EXPECT_EQ(c->model.parallel, 2u);
  EXPECT_EQ(c->model.kv_type, "f16");
  EXPECT_EQ(c->server.listen, "0.0.0.0:8080");
  EXPECT_EQ(c->server.keys_db, "/var/lib/tandem/keys.db");
  EXPECT_FALSE(c->server.status_page_public);
  EXPECT_DOUBLE_EQ(c->plan.margin, 0.05);
  EXPECT_EQ(c->plan.margin_bytes, 1ull << 30);
  EXPECT_DOUBLE_EQ(c->plan.hop_ms, 0.5);
}

TEST(Config, DefaultsWhenKeysAreLeftOut) {
  auto c = parse_config("[model]\npath = \"m.gguf\"\n");
  ASSERT_TRUE(c.is_ok()) << c.status().to_string();
  EXPECT_EQ(c->model.context, 4096u);
  EXPECT_EQ(c->model.parallel, 1u);
  EXPECT_EQ(c->cluster.head_name, "head");
  EXPECT_FALSE(c->cluster.head_memory.has_value());
  EXPECT_TRUE(c->workers.empty());
}

TEST(Config, SizesMayBePlainByteCounts) {
  auto c = parse_config("[cluster]\nhead_memory = 1048576\n");
  ASSERT_TRUE(c.is_ok()) << c.status().to_string();
  EXPECT_EQ(c->cluster.head_memory, 1048576u);
}

struct BadCase {
  const char* text;
  const char* expected;  // a part of the message
};

TEST(Config, MistakesNameTheLineAndTheKey) {
  const BadCase cases[] = {
      {"[model]\ncontext = \"big\"\n", "tandem.toml:2: [model] context: expected an integer"},
      {"[model]\nparallel = 0\n", "tandem.toml:2: [model] parallel: must be in 1..256, got 0"},
      {"[server]\nstatus_page_public = 1\n", "tandem.toml:2: [server] status_page_public: expected true or false"},
      {"[model]\npath = \"m\"\ncontxt = 4\n", "tandem.toml:3: [model] contxt: unknown key"},
      {"[modle]\npath = \"m\"\n", "tandem.toml:1: top level: modle: unknown key"},
      {"[cluster]\nhead_memory = \"lots\"\n", "tandem.toml:2: [cluster] head_memory: 'lots' is not a size"},
      {"[cluster]\nhead_bandwidth = \"fast\"\n", "tandem.toml:2: [cluster] head_bandwidth: 'fast' is not a bandwidth"},
      {"[cluster]\nhead_device = \"tpu\"\n", "tandem.toml:2: [cluster] head_device: expected \"gpu\" or \"cpu\""},
      {"[[worker]]\nname = \"b\"\n", "tandem.toml:1: [[worker]] 'b' address: missing"},
      {"[[worker]]\naddress = \"h:1\"\n", "tandem.toml:1: [[worker]] name: missing"},
      {"[[worker]]\nname = \"b\"\naddress = \"h:1\"\n[[worker]]\nname = \"b\"\naddress = \"h:2\"\n",
       "tandem.toml:4: [[worker]] name: 'b' is used twice (first on line 1)"},
      {"[plan]\nmargin = 2\n", "tandem.toml:2: [plan] margin: must be in"},
      {"[model]\npath = \"unterminated\n", "tandem.toml:2:"},
      {"worker = 3\n", "tandem.toml:1: top level: worker: expected [[worker]] tables"},
  };
  for (const BadCase& c : cases) {
    auto r = parse_config(c.text, "tandem.toml");
    ASSERT_FALSE(r.is_ok()) << c.text;
    EXPECT_EQ(r.status().code(), StatusCode::invalid_argument);
    EXPECT_NE(r.status().message().find(c.expected), std::string::npos) << "got: " << r.status().message();
  }
}

TEST(Config, AMissingFileIsNotFound) {
  auto c = load_config("/nonexistent/tandem.toml");
  ASSERT_FALSE(c.is_ok());
  EXPECT_EQ(c.status().code(), StatusCode::not_found);
  EXPECT_NE(c.status().message().find("/nonexistent/tandem.toml"), std::string::npos);
}

}  // namespace
}  // namespace tandem::config
