// The supervisor with a scripted engine: what the engine process is given (its environment, its
// output), without a model or workers.
#include "gateway/supervisor.h"

#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <filesystem>
#include <mutex>
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

// After a crash the engine starts again only once the memory the plan counted on is free again:
// until then it waits, and /health and the log say which device is short and what holds it. The
// first start is not checked (the plan was just made from the same figures).
TEST(Supervisor, AfterACrashTheEngineWaitsForTheMemoryThePlanNeeds) {
  ScratchDir dir;
  const std::string runs = dir.file("runs.txt");
  SupervisorOptions o = options(dir, fake_engine(dir, "echo run >> " + runs));
  std::atomic<bool> free_again{false};
  std::atomic<int> checks{0};
  const std::string short_of =
      "box-b/CUDA0 has 40.0 GiB free, the plan needs 113 GiB there: short by 73.0 GiB; "
      "holding the most memory on box-b: tandem-worker (pid 77) 72.0 GiB";
  o.memory_check = [&] {
    ++checks;
    return free_again ? std::string() : short_of;
  };
  std::mutex log_mutex;
  std::string log_text;
  o.log = [&](const std::string& line) {
    std::lock_guard<std::mutex> lock(log_mutex);
    log_text += line + "\n";
  };
  auto count_runs = [&] {
    const std::string t = read_file(runs);
    return static_cast<int>(std::count(t.begin(), t.end(), '\n'));
  };
  Supervisor s(o);
  ASSERT_TRUE(s.start().is_ok());
  ASSERT_TRUE(wait_for_file(runs, "run"));
  // The first run exits; its restart is due after a second's backoff, and the check holds it back.
  for (int i = 0; i < 200 && checks == 0; ++i) std::this_thread::sleep_for(std::chrono::milliseconds(20));
  ASSERT_GT(checks.load(), 0) << "the restart asked whether the memory is free";
  // The refusal is logged as it is decided; the next check is seconds away.
  auto logged = [&](const std::string& what) {
    std::lock_guard<std::mutex> lock(log_mutex);
    return log_text.find(what) != std::string::npos;
  };
  for (int i = 0; i < 500 && !logged("not restarting the engine yet"); ++i)
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  EXPECT_EQ(count_runs(), 1) << "no second load into memory that is not there";
  const auto health = s.health();
  EXPECT_NE(health.detail.value("last_error", "").find(short_of), std::string::npos) << health.detail.dump();
  {
    std::lock_guard<std::mutex> lock(log_mutex);
    EXPECT_NE(log_text.find("not restarting the engine yet: " + short_of), std::string::npos) << log_text;
  }
  free_again = true;
  for (int i = 0; i < 500 && count_runs() < 2; ++i) std::this_thread::sleep_for(std::chrono::milliseconds(20));
  EXPECT_GE(count_runs(), 2) << "started again once the memory is back";
  s.stop();
  std::lock_guard<std::mutex> lock(log_mutex);
  EXPECT_NE(log_text.find("the memory the plan needs is free again"), std::string::npos) << log_text;
}

}  // namespace
}  // namespace tandem::gateway
