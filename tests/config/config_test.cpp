// tandem.toml: every key read, and every mistake named with its line and key.
#include "config/config.h"

#include <fstream>
#include <sstream>

#include <gtest/gtest.h>

#include "test_util.h"

namespace tandem::config {
namespace {

TEST(Config, ReadsEveryKeyOfTheExample) {
  auto c = load_config(std::string(TANDEM_SOURCE_DIR) + "/deploy/tandem.example.toml");
  ASSERT_TRUE(c.is_ok()) << c.status().to_string();
  EXPECT_EQ(c->cluster.secret_file, "/etc/tandem/cluster.key");
  EXPECT_EQ(c->cluster.head_name, "box-a");
  EXPECT_EQ(c->cluster.head_memory, 115ull << 30);
  EXPECT_EQ(c->cluster.head_bandwidth, 273e9);
  EXPECT_EQ(c->cluster.head_device, "unified");
  ASSERT_EQ(c->workers.size(), 1u);
  EXPECT_EQ(c->workers[0].name, "box-b");
  EXPECT_EQ(c->workers[0].address, "10.0.0.2:7070");
  EXPECT_EQ(c->workers[0].memory, 115ull << 30);
  EXPECT_TRUE(c->workers[0].unified_memory);
  EXPECT_EQ(c->workers[0].listen, "0.0.0.0:7070");
  EXPECT_EQ(c->workers[0].cache_dir, "/var/cache/tandem/rpc");
  EXPECT_EQ(c->workers[0].cache_max_size, 400ull << 30);
  EXPECT_EQ(c->model.path, "/models/MiniMax-M3-UD-IQ4_XS-00001-of-00005.gguf");
  EXPECT_EQ(c->model.context, 32768u);
  EXPECT_EQ(c->model.parallel, 1u);
  EXPECT_EQ(c->model.kv_type, "q8_0");
  EXPECT_EQ(c->model.prompt_cache, 0u);
  EXPECT_EQ(c->server.listen, "0.0.0.0:8080");
  EXPECT_EQ(c->server.keys_db, "/var/lib/tandem/keys.db");
  EXPECT_FALSE(c->server.status_page_public);
  EXPECT_DOUBLE_EQ(c->plan.margin, 0.02);
  EXPECT_EQ(c->plan.margin_bytes, 512ull << 20);
  EXPECT_EQ(c->plan.os_reserve, 1ull << 30);
  EXPECT_EQ(c->plan.load_reserve, 1ull << 30);
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
  EXPECT_EQ(c->model.prompt_cache, 8ull << 30) << "the prompt cache is on by default";
  EXPECT_EQ(c->plan.os_reserve, 1ull << 30);
  EXPECT_EQ(c->plan.load_reserve, 1ull << 30);
}

TEST(Config, ThePromptCacheTakesASizeAndZeroTurnsItOff) {
  EXPECT_EQ(parse_config("[model]\nprompt_cache = \"2GiB\"\n")->model.prompt_cache, 2ull << 30);
  EXPECT_EQ(parse_config("[model]\nprompt_cache = 0\n")->model.prompt_cache, 0u);
  EXPECT_EQ(parse_config("[model]\nprompt_cache = \"0\"\n")->model.prompt_cache, 0u);
  EXPECT_EQ(parse_config("[model]\nprompt_cache = \"0GiB\"\n")->model.prompt_cache, 0u);
  auto bad = parse_config("[model]\nprompt_cache = \"8\"\n");
  ASSERT_FALSE(bad.is_ok());
  EXPECT_NE(bad.status().message().find("config:2: [model] prompt_cache"), std::string::npos) << bad.status().message();
  EXPECT_FALSE(parse_config("[model]\nprompt_cache = true\n").is_ok());
  auto disk = parse_config("[model]\nprompt_cache_dir = \"/var/cache/p\"\nprompt_cache_dir_size = \"100GiB\"\n");
  ASSERT_TRUE(disk.is_ok()) << disk.status().to_string();
  EXPECT_EQ(disk->model.prompt_cache_dir, "/var/cache/p");
  EXPECT_EQ(disk->model.prompt_cache_dir_size, 100ull << 30);
  EXPECT_EQ(parse_config("")->model.prompt_cache_dir_size, 64ull << 30);
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
      {"[cluster]\nhead_device = \"tpu\"\n",
       "tandem.toml:2: [cluster] head_device: expected one of \"gpu\", \"cpu\", \"unified\", got \"tpu\""},
      {"[[worker]]\nname = \"b\"\n", "tandem.toml:1: [[worker]] 'b' address: missing"},
      {"[[worker]]\naddress = \"h:1\"\n", "tandem.toml:1: [[worker]] name: missing"},
      {"[[worker]]\nname = \"b\"\naddress = \"h:1\"\n[[worker]]\nname = \"b\"\naddress = \"h:2\"\n",
       "tandem.toml:4: [[worker]] name: 'b' is used twice (first on line 1)"},
      {"[plan]\nmargin = 2\n", "tandem.toml:2: [plan] margin: must be in"},
      {"[model]\npath = \"unterminated\n", "tandem.toml:2:"},
      {"worker = 3\n", "tandem.toml:1: top level: worker: expected [[worker]] tables"},
      {"[[worker]]\nname = \"b\"\naddress = \"h:1\"\n[[worker]]\nname = \"c\"\naddress = \"h:1\"\n",
       "tandem.toml:4: [[worker]] address: 'h:1' of 'c' is also the address of 'b' (line 1)"},
      {"[[worker]]\nname = \"b\"\naddress = \"h:1\"\nmemory = \"128\"\n",
       "tandem.toml:4: [[worker]] memory: '128' has no unit"},
      {"[model]\nlayers = \"1,x\"\n", "tandem.toml:2: [model] layers: layers '1,x': 'x' is neither a layer count"},
      {"[model]\nlayers = \"3-1\"\n", "is not a range A-B"},
      {"[model]\nlayers = [1, true]\n", "expected layer counts or ranges"},
      {"[server]\nlog_format = \"xml\"\n", "[server] log_format: expected one of \"text\", \"json\""},
      {"[server]\nmax_in_flight = 0\n", "[server] max_in_flight: must be in 1..100000"},
      {"[model]\nengine_flags = \"--no-warm-up\"\n", "[model] engine_flags: expected an array of strings"},
      {"[plan]\nos_reserve = \"2\"\n", "tandem.toml:2: [plan] os_reserve: '2' has no unit"},
      {"[plan]\nload_reserve = true\n", "tandem.toml:2: [plan] load_reserve: expected a size"},
      {"[[worker]]\nname = \"b\"\naddress = \"h:1\"\nunified_memory = \"yes\"\n",
       "tandem.toml:4: [[worker]] unified_memory: expected true or false"},
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

TEST(Config, TheNewerKeysOfServeAndTheWorker) {
  auto c = parse_config(
      "[cluster]\nbacktraces = true\n"
      "[[worker]]\nname = \"b\"\naddress = \"h:1\"\ndevices = [\"CUDA0\"]\nthreads = 4\ncuda_graphs = false\n"
      "private_netns = false\nlog_format = \"json\"\n"
      "[model]\nlayers = [\"-\", \"0-29\", 32]\nthreads = 8\ncuda_graphs = false\nengine_flags = [\"--no-warm-up\"]\n"
      "[server]\nmodel_id = \"m3\"\ninsecure_no_auth = true\nmax_in_flight = 8\ncanary_interval = 60\ndrain_timeout = "
      "5\n"
      "log_format = \"json\"\n");
  ASSERT_TRUE(c.is_ok()) << c.status().to_string();
  EXPECT_TRUE(c->cluster.backtraces);
  EXPECT_EQ(c->workers[0].devices, std::vector<std::string>{"CUDA0"});
  EXPECT_EQ(c->workers[0].threads, 4);
  EXPECT_FALSE(c->workers[0].cuda_graphs);
  EXPECT_FALSE(c->workers[0].private_netns);
  EXPECT_EQ(c->workers[0].log_format, "json");
  EXPECT_EQ(c->model.layers, (std::vector<LayerShare>{{0, 0}, {30, 0}, {32, -1}}));
  EXPECT_EQ(format_layers(c->model.layers), "-,0-29,32");
  EXPECT_EQ(c->model.threads, 8);
  EXPECT_FALSE(c->model.cuda_graphs);
  EXPECT_EQ(c->model.engine_flags, std::vector<std::string>{"--no-warm-up"});
  EXPECT_EQ(c->server.model_id, "m3");
  EXPECT_TRUE(c->server.insecure_no_auth);
  EXPECT_EQ(c->server.max_in_flight, 8);
  EXPECT_EQ(c->server.canary_interval_s, 60);
  EXPECT_EQ(c->server.drain_timeout_s, 5);
  EXPECT_EQ(c->server.log_format, "json");
}

TEST(Config, LayersTakeCountsRangesAndDashes) {
  auto l = parse_layers("1, 0-1 ,-");
  ASSERT_TRUE(l.is_ok()) << l.status().to_string();
  EXPECT_EQ(l.value(), (std::vector<LayerShare>{{1, -1}, {2, 0}, {0, 0}}));
  EXPECT_EQ(format_layers(l.value()), "1,0-1,-");
  EXPECT_FALSE(parse_layers("").is_ok());
  EXPECT_FALSE(parse_layers("-1").is_ok());
  EXPECT_FALSE(parse_layers("1,,2").is_ok());
}

// A unit or a shell started elsewhere must find the same files as the person who wrote the file.
TEST(Config, RelativePathsAreRelativeToTheFile) {
  testing::ScratchDir dir;
  std::filesystem::create_directories(dir.file("etc"));
  testing::write_file(
      dir.file("etc/tandem.toml"),
      "[cluster]\nsecret_file = \"cluster.key\"\n[[worker]]\nname = \"b\"\naddress = \"h:1\"\n"
      "cache_dir = \"../cache\"\n[model]\npath = \"models/m.gguf\"\n[server]\nkeys_db = \"/abs/keys.db\"\n");
  auto c = load_config(dir.file("etc/tandem.toml"));
  ASSERT_TRUE(c.is_ok()) << c.status().to_string();
  EXPECT_EQ(c->cluster.secret_file, dir.file("etc/cluster.key"));
  EXPECT_EQ(c->model.path, dir.file("etc/models/m.gguf"));
  EXPECT_EQ(c->workers[0].cache_dir, dir.file("cache"));
  EXPECT_EQ(c->server.keys_db, "/abs/keys.db");
}

// [model] mmap: on unless the file turns it off (serve then passes --no-mmap to the engine).
TEST(Config, TheModelIsMappedUnlessTurnedOff) {
  auto on = parse_config("[model]\npath = \"m\"\n");
  ASSERT_TRUE(on.is_ok()) << on.status().to_string();
  EXPECT_TRUE(on->model.mmap);
  auto off = parse_config("[model]\nmmap = false\n");
  ASSERT_TRUE(off.is_ok()) << off.status().to_string();
  EXPECT_FALSE(off->model.mmap);
  auto bad = parse_config("[model]\nmmap = \"no\"\n");
  EXPECT_FALSE(bad.is_ok());
}

TEST(Config, SpeculativeDecodingKeys) {
  const auto off = parse_config("");
  ASSERT_TRUE(off.is_ok());
  EXPECT_EQ(off->model.speculative, "off");
  EXPECT_EQ(off->model.draft_max, 8);
  const auto ngram = parse_config("[model]\nspeculative = \"ngram\"\ndraft_max = 16\n");
  ASSERT_TRUE(ngram.is_ok()) << ngram.status().to_string();
  EXPECT_EQ(ngram->model.speculative, "ngram");
  EXPECT_EQ(ngram->model.draft_max, 16);
  const auto draft = parse_config("[model]\nspeculative = \"draft\"\ndraft_model = \"/m/d.gguf\"\n");
  ASSERT_TRUE(draft.is_ok()) << draft.status().to_string();
  EXPECT_EQ(draft->model.draft_model, "/m/d.gguf");
  const auto no_model = parse_config("[model]\nspeculative = \"draft\"\n", "t.toml");
  ASSERT_FALSE(no_model.is_ok());
  EXPECT_NE(no_model.status().message().find("needs draft_model"), std::string::npos) << no_model.status().message();
  EXPECT_FALSE(parse_config("[model]\nspeculative = \"eagle\"\n").is_ok());
  EXPECT_FALSE(parse_config("[model]\ndraft_max = 0\n").is_ok());
  EXPECT_FALSE(parse_config("[model]\ndraft_max = 33\n").is_ok());
  EXPECT_EQ(off->model.spec_synth_len, 0.0);
  const auto synth = parse_config("[model]\nspeculative = \"ngram\"\nspec_synth_len = 2.5\n");
  ASSERT_TRUE(synth.is_ok()) << synth.status().to_string();
  EXPECT_EQ(synth->model.spec_synth_len, 2.5);
  EXPECT_FALSE(parse_config("[model]\nspec_synth_len = -1\n").is_ok());
  EXPECT_FALSE(parse_config("[model]\nspec_synth_len = \"high\"\n").is_ok());
}

// docs/config.md lists every key the reader knows, so that none is undocumented.
TEST(Config, EveryKeyIsDocumented) {
  std::ifstream in(std::string(TANDEM_SOURCE_DIR) + "/docs/config.md");
  std::stringstream doc;
  doc << in.rdbuf();
  const auto keys = known_keys();
  EXPECT_GT(keys.size(), 30u);
  for (const std::string& k : keys) {
    const std::string table = k.substr(0, k.find(' ')), key = k.substr(k.find(' ') + 1);
    const size_t section = doc.str().find("## `" + table + "`");
    ASSERT_NE(section, std::string::npos) << table << " has no section in docs/config.md";
    const size_t next = doc.str().find("\n## ", section + 1);
    EXPECT_NE(doc.str().substr(section, next - section).find("| `" + key + "` |"), std::string::npos)
        << k << " is not in docs/config.md";
  }
}

}  // namespace
}  // namespace tandem::config
