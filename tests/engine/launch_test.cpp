// The engine's launch arguments (engine/launch.h): what `tandem serve` writes, the engine reads back.
#include "engine/launch.h"

#include <gtest/gtest.h>

#include <set>

namespace tandem::engine {
namespace {

// Every field away from its default, so that a field the writer or the reader forgets shows.
EngineLaunch every_field_set() {
  EngineLaunch l;
  l.socket_path = "/tmp/tandem-serve-x/engine.sock";
  l.model = "/models/m3.gguf";
  l.context = 4096;
  l.parallel = 4;
  l.cpu_layers = 2;
  l.rpc = {"127.0.0.1:5001", "127.0.0.1:5002"};
  l.tandem_workers = {"127.0.0.1:5001", "127.0.0.1:5002"};
  l.device_layers = {10, 20, 30};
  l.workers_first = true;
  l.split_mode = "ffn-tensor";
  l.threads = 8;
  l.cuda_graphs = false;
  l.mmap = false;
  l.prompt_cache_bytes = uint64_t{8} << 30;
  l.prompt_cache_dir = "/var/cache/tandem";
  l.prompt_cache_dir_bytes = uint64_t{100} << 30;
  l.worker_caches = {{"127.0.0.1:5001", "/tmp/w0.cache"}, {"127.0.0.1:5002", "/tmp/w1.cache"}};
  l.speculative = "draft";
  l.draft_model = "/models/m3-eagle3.gguf";
  l.draft_max = 5;
  l.spec_synth_len = 2.5;
  l.kv_type = "q8_0";
  l.json_logs = true;
  l.extra = {"--batch", "256", "--no-input-reuse"};
  return l;
}

TEST(EngineLaunch, EveryFieldRoundTripsThroughTheArguments) {
  const EngineLaunch l = every_field_set();
  auto back = parse_launch_args(launch_args(l));
  ASSERT_TRUE(back.is_ok()) << back.status().message();
  EXPECT_EQ(back.value(), l);
  // And every field differs from its default, so the comparison covers each one.
  EXPECT_EQ(launch_args(EngineLaunch()).size() < launch_args(l).size(), true);
}

TEST(EngineLaunch, TheDefaultsRoundTripToo) {
  auto back = parse_launch_args(launch_args(EngineLaunch()));
  ASSERT_TRUE(back.is_ok()) << back.status().message();
  EXPECT_EQ(back.value(), EngineLaunch());
}

// The command line `tandem serve` has always written (and logs on every start), flag for flag.
TEST(EngineLaunch, WritesTheCommandLineServeHasAlwaysWritten) {
  EngineLaunch l;
  l.socket_path = "/run/e.sock";
  l.model = "m.gguf";
  l.context = 4096;
  l.parallel = 2;
  l.rpc = {"127.0.0.1:7001"};
  l.tandem_workers = l.rpc;
  l.device_layers = {3, 5};
  l.prompt_cache_bytes = 1024;
  l.worker_caches = {{"127.0.0.1:7001", "/run/worker-0.cache"}};
  l.extra = {"--batch", "64"};
  const std::vector<std::string> expected = {"--socket",
                                             "/run/e.sock",
                                             "-m",
                                             "m.gguf",
                                             "-c",
                                             "4096",
                                             "--parallel",
                                             "2",
                                             "--cpu-layers",
                                             "0",
                                             "--rpc",
                                             "127.0.0.1:7001",
                                             "--tandem-worker",
                                             "127.0.0.1:7001",
                                             "--layer-split",
                                             "3,5",
                                             "--prompt-cache",
                                             "1024",
                                             "--worker-cache",
                                             "127.0.0.1:7001=/run/worker-0.cache",
                                             "--batch",
                                             "64"};
  EXPECT_EQ(launch_args(l), expected);
  // The folder's bound goes with the folder.
  l.prompt_cache_dir = "/c";
  l.prompt_cache_dir_bytes = EngineLaunch().prompt_cache_dir_bytes;
  const auto args = launch_args(l);
  const auto at = std::find(args.begin(), args.end(), "--prompt-cache-dir-size");
  ASSERT_NE(at, args.end());
  EXPECT_EQ(*(at + 1), std::to_string(uint64_t{64} << 30));
}

TEST(EngineLaunch, ReadsTheLongNamesUnitsAndEqualsForms) {
  auto l = parse_launch_args({"--model=m.gguf", "--context", "128", "--threads=3", "--prompt-cache", "8GiB",
                              "--prompt-cache-dir-size", "1MiB", "--split-mode", "tensor"});
  ASSERT_TRUE(l.is_ok()) << l.status().message();
  EXPECT_EQ(l->model, "m.gguf");
  EXPECT_EQ(l->context, 128);
  EXPECT_EQ(l->threads, 3);
  EXPECT_EQ(l->prompt_cache_bytes, uint64_t{8} << 30);
  EXPECT_EQ(l->prompt_cache_dir_bytes, uint64_t{1} << 20);
  EXPECT_EQ(l->split_mode, "tensor");
  EXPECT_TRUE(l->extra.empty());
}

TEST(EngineLaunch, RefusesWhatTheEngineRefuses) {
  const std::vector<std::pair<std::vector<std::string>, std::string>> cases = {
      {{"--layer-split", "3,x"}, "--layer-split: 'x' is not a layer count"},
      {{"--worker-cache", "127.0.0.1:1"}, "--worker-cache: expected HOST:PORT=FILE, got '127.0.0.1:1'"},
      {{"--rpc", "a:1", "--tandem-worker", "b:2"}, "--tandem-worker: 'b:2' is not one of the --rpc endpoints (a:1)"},
      {{"-c", "many"}, "--context: 'many' is not an integer"},
      {{"--prompt-cache", "lots"}, "--prompt-cache: "},
      {{"--split-mode", "rows"}, "--split-mode: 'rows' is not one of layer, tensor, ffn-tensor"},
      {{"--log-format", "xml"}, "--log-format: 'xml' is not one of text, json"},
      {{"-c", "1", "-c", "2"}, "-c given twice"},
      {{"--parallel"}, "--parallel needs a value"},
      {{"--no-mmap=1"}, "--no-mmap takes no value"},
  };
  for (const auto& [args, message] : cases) {
    auto l = parse_launch_args(args);
    ASSERT_FALSE(l.is_ok()) << args[0];
    EXPECT_EQ(l.status().message().rfind(message, 0), 0u) << l.status().message();
  }
}

TEST(EngineLaunch, EverythingFromTheFirstUnknownArgumentIsExtra) {
  auto l = parse_launch_args({"-m", "m.gguf", "--batch", "64", "-c", "99"});
  ASSERT_TRUE(l.is_ok());
  EXPECT_EQ(l->model, "m.gguf");
  EXPECT_EQ(l->context, 512);
  EXPECT_EQ(l->extra, (std::vector<std::string>{"--batch", "64", "-c", "99"}));
}

TEST(EngineLaunch, EachFlagIsNamedOnce) {
  std::set<std::string> names;
  for (const LaunchFlag& f : launch_flags()) {
    std::string all = f.names;
    size_t start = 0;
    while (start <= all.size()) {
      const size_t comma = std::min(all.find(',', start), all.size());
      EXPECT_TRUE(names.insert(all.substr(start, comma - start)).second) << f.names;
      start = comma + 1;
    }
  }
}

}  // namespace
}  // namespace tandem::engine
