// Helpers shared by the tests: scratch folders and running the tandem binary.
#pragma once

#include <sys/wait.h>

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>

#include <gtest/gtest.h>

namespace tandem::testing {

// A fresh folder for the running test, removed when the object goes away.
class ScratchDir {
 public:
  ScratchDir() {
    const auto* info = ::testing::UnitTest::GetInstance()->current_test_info();
    path_ = std::filesystem::path(TANDEM_TEST_TMP) / (std::string(info->test_suite_name()) + "." + info->name());
    std::filesystem::remove_all(path_);
    std::filesystem::create_directories(path_);
  }
  ~ScratchDir() {
    if (!std::getenv("TANDEM_KEEP_SCRATCH")) std::filesystem::remove_all(path_);
  }
  std::string file(const std::string& name) const { return (path_ / name).string(); }

 private:
  std::filesystem::path path_;
};

struct CommandResult {
  int exit_code = -1;
  std::string out;  // stdout
  std::string err;  // stderr
};

// Runs `tandem <args>` through the shell and captures both streams.
inline CommandResult run_tandem(const std::string& args, const std::string& scratch) {
  const std::string out_file = scratch + "/.stdout", err_file = scratch + "/.stderr";
  const std::string cmd = std::string(TANDEM_BINARY) + " " + args + " >" + out_file + " 2>" + err_file;
  const int status = std::system(cmd.c_str());
  CommandResult r;
  r.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
  auto slurp = [](const std::string& p) {
    std::ifstream in(p);
    return std::string((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  };
  r.out = slurp(out_file);
  r.err = slurp(err_file);
  return r;
}

// What a head needs before it starts, written in `dir` by the CLI: a cluster secret, the tiny
// model and an API key named `key_name`.
struct ClusterFiles {
  std::string secret, model, key;
};
// `synth_args`: more `tandem synth` flags for the tiny model (e.g. "--type Q8_0"), or another
// preset ("--preset tiny-qwen3moe").
inline ClusterFiles make_cluster_files(const ScratchDir& dir, const std::string& key_name,
                                       const std::string& synth_args = "") {
  ClusterFiles f{dir.file("cluster.key"), dir.file("tiny.gguf"), ""};
  EXPECT_EQ(run_tandem("secret new -o " + f.secret, dir.file("")).exit_code, 0);
  const std::string preset = synth_args.find("--preset") == std::string::npos ? "--preset tiny " : "";
  EXPECT_EQ(run_tandem("synth " + preset + synth_args + " -o " + f.model, dir.file("")).exit_code, 0);
  auto k = run_tandem("keys --db " + dir.file("keys.db") + " create --name " + key_name, dir.file(""));
  EXPECT_EQ(k.exit_code, 0) << k.err;
  f.key = k.out.substr(0, k.out.find('\n'));
  return f;
}

inline std::string read_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
}

inline void write_file(const std::string& path, const std::string& bytes) {
  std::ofstream out(path, std::ios::binary);
  out << bytes;
}

}  // namespace tandem::testing
