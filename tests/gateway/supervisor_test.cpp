// The supervisor with a scripted engine: what the engine process is given (its environment, its
// output), without a model or workers.
#include "gateway/supervisor.h"

#include <sys/stat.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <sstream>
#include <thread>

#include <gtest/gtest.h>

#include "common/log.h"
#include "test_util.h"

namespace tandem::gateway {
namespace {

using testing::read_file;
using testing::ScratchDir;
using testing::write_file;

// A stand-in for tandem-engine: runs `body` once (it sees its arguments and environment) and exits 3.
std::string fake_engine(const ScratchDir& dir, const std::string& body) {
  const std::string path = dir.file("fake-engine.sh");
  write_file(path, "#!/bin/sh\n" + body + "\nexit 3\n");
  ::chmod(path.c_str(), 0755);
  return path;
}

bool wait_for_file(const std::string& path, const std::string& text, int timeout_ms = 10000) {
  for (int i = 0; i < timeout_ms / 20; ++i) {
    if (read_file(path).find(text) != std::string::npos) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  return false;
}

SupervisorOptions options(const ScratchDir& dir, const std::string& engine) {
  SupervisorOptions o;
  o.engine_program = engine;
  o.model = dir.file("m.gguf");
  o.runtime_dir = dir.file("");
  return o;
}

// An engine whose worker went away aborts in ggml, which then runs gdb on it: pages of debugger
// output in the log for every restart. Off unless asked for.
TEST(Supervisor, TheEngineRunsWithoutGgmlBacktracesUnlessAskedFor) {
  for (const bool backtraces : {false, true}) {
    ScratchDir dir;
    SupervisorOptions o =
        options(dir, fake_engine(dir, "env > " + dir.file("env.txt") + "; echo done >> " + dir.file("env.txt")));
    o.backtraces = backtraces;
    Supervisor s(o);
    ASSERT_TRUE(s.start().is_ok());
    ASSERT_TRUE(wait_for_file(dir.file("env.txt"), "done"));
    s.stop();
    const std::string env = read_file(dir.file("env.txt"));
    EXPECT_EQ(env.find("GGML_NO_BACKTRACE=1") != std::string::npos, !backtraces) << env;
  }
}

// With JSON logs, what the engine prints itself (ggml, llama.cpp's grammar dumps, an abort's last
// line without its newline) reaches the log as records; its own records pass unchanged.
TEST(Supervisor, InJsonLogsTheEnginesOwnPrintsBecomeRecords) {
  ScratchDir dir;
  const std::string engine =
      fake_engine(dir,
                  "echo 'ggml: plain line' >&2; "
                  "echo '{\"ts\":\"t\",\"level\":\"info\",\"component\":\"engine\",\"msg\":\"a record\"}' >&2; "
                  "printf 'GGML_ABORT: no newline' >&2; touch " +
                      dir.file("ran"));
  const std::string log_path = dir.file("stderr.log");
  const int saved = ::dup(STDERR_FILENO);
  {
    FILE* f = std::fopen(log_path.c_str(), "w");
    ASSERT_NE(f, nullptr);
    ::dup2(::fileno(f), STDERR_FILENO);
    std::fclose(f);
  }
  log::set_format(log::Format::json);
  {
    Supervisor s(options(dir, engine));
    ASSERT_TRUE(s.start().is_ok());
    ASSERT_TRUE(wait_for_file(log_path, "no newline"));
    s.stop();
  }
  log::set_format(log::Format::text);
  ::dup2(saved, STDERR_FILENO);
  ::close(saved);
  bool plain = false, record = false, abort_line = false;
  std::istringstream in(read_file(log_path));
  for (std::string line; std::getline(in, line);) {
    const auto j = nlohmann::json::parse(line, nullptr, false);
    ASSERT_TRUE(j.is_object()) << "not a record: " << line;
    plain |= j.value("component", "") == "engine" && j.value("msg", "") == "ggml: plain line";
    record |= j.value("msg", "") == "a record" && j.value("ts", "") == "t";
    abort_line |= j.value("msg", "") == "GGML_ABORT: no newline";
  }
  EXPECT_TRUE(plain);
  EXPECT_TRUE(record);
  EXPECT_TRUE(abort_line);
}

}  // namespace
}  // namespace tandem::gateway
