// Type=notify as systemd sees it: a datagram socket standing in for NOTIFY_SOCKET, and a worker
// and a head started with it and a watchdog interval. Each must say READY once it serves, ping the
// watchdog, and say STOPPING on SIGTERM.
#include <httplib.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "support/process.h"
#include "test_util.h"

namespace tandem::testing {
namespace {

class NotifySocket {
 public:
  explicit NotifySocket(const std::string& path) : path_(path) {
    fd_ = ::socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC, 0);
    sockaddr_un a{};
    a.sun_family = AF_UNIX;
    std::snprintf(a.sun_path, sizeof a.sun_path, "%s", path.c_str());
    ::unlink(path.c_str());
    EXPECT_EQ(::bind(fd_, reinterpret_cast<sockaddr*>(&a), sizeof a), 0) << path;
    timeval tv{0, 100000};
    ::setsockopt(fd_, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
  }
  ~NotifySocket() {
    ::close(fd_);
    ::unlink(path_.c_str());
  }
  // Collects messages until one contains `needle` or `timeout_ms` passes; true when it came.
  bool wait_for(const std::string& needle, int timeout_ms) {
    const auto end = std::chrono::steady_clock::now() + std::chrono::milliseconds(timeout_ms);
    while (std::chrono::steady_clock::now() < end) {
      char buf[4096];
      const ssize_t n = ::recv(fd_, buf, sizeof buf, 0);
      if (n <= 0) continue;
      messages.emplace_back(buf, static_cast<size_t>(n));
      if (messages.back().find(needle) != std::string::npos) return true;
    }
    return false;
  }
  int count(const std::string& needle) const {
    int c = 0;
    for (const auto& m : messages) c += m.find(needle) != std::string::npos;
    return c;
  }
  std::vector<std::string> messages;

 private:
  std::string path_;
  int fd_ = -1;
};

// The environment systemd gives a Type=notify unit with WatchdogSec=1 (no WATCHDOG_PID: any pid).
struct NotifyEnv {
  explicit NotifyEnv(const std::string& socket) {
    ::setenv("NOTIFY_SOCKET", socket.c_str(), 1);
    ::setenv("WATCHDOG_USEC", "1000000", 1);
  }
  ~NotifyEnv() {
    ::unsetenv("NOTIFY_SOCKET");
    ::unsetenv("WATCHDOG_USEC");
  }
};

TEST(SystemdNotify, AWorkerSaysReadyPingsTheWatchdogAndSaysStopping) {
  ScratchDir dir;
  ASSERT_EQ(run_tandem("secret new -o " + dir.file("cluster.key"), dir.file("")).exit_code, 0);
  NotifySocket notify("/tmp/tandem-notify-worker-" + std::to_string(::getpid()));
  const int port = free_port();
  std::unique_ptr<ChildProcess> worker;
  {
    NotifyEnv env("/tmp/tandem-notify-worker-" + std::to_string(::getpid()));
    worker = std::make_unique<ChildProcess>(
        std::vector<std::string>{TANDEM_BINARY, "worker", "--listen", "127.0.0.1:" + std::to_string(port),
                                 "--secret-file", dir.file("cluster.key"), "--threads", "1"},
        dir.file("worker.log"));
  }
  ASSERT_TRUE(notify.wait_for("READY=1", 10000));
  EXPECT_TRUE(wait_for_port(port, 1000));  // READY means it listens
  // It keeps pinging (every half second here): wait for a second ping, without timing it.
  const auto end = std::chrono::steady_clock::now() + std::chrono::seconds(20);
  while (notify.count("WATCHDOG=1") < 2 && std::chrono::steady_clock::now() < end) notify.wait_for("WATCHDOG=1", 1000);
  EXPECT_GE(notify.count("WATCHDOG=1"), 2);
  worker->signal(SIGTERM);
  EXPECT_TRUE(notify.wait_for("STOPPING=1", 5000));
  EXPECT_EQ(worker->wait(10000), 0);
}

TEST(SystemdNotify, TheHeadSaysReadyOnlyWhenItServes) {
  ScratchDir dir;
  ASSERT_EQ(run_tandem("synth --preset tiny -o " + dir.file("tiny.gguf"), dir.file("")).exit_code, 0);
  const std::string path = "/tmp/tandem-notify-serve-" + std::to_string(::getpid());
  NotifySocket notify(path);
  const int port = free_port();
  std::unique_ptr<ChildProcess> serve;
  {
    NotifyEnv env(path);
    serve = std::make_unique<ChildProcess>(
        std::vector<std::string>{TANDEM_BINARY, "serve", "-m", dir.file("tiny.gguf"), "--insecure-no-auth", "--listen",
                                 "127.0.0.1:" + std::to_string(port), "--context", "512", "-t", "1"},
        dir.file("serve.log"));
  }
  ASSERT_TRUE(notify.wait_for("READY=1", 60000));
  httplib::Client c("127.0.0.1", port);
  auto h = c.Get("/health");
  ASSERT_TRUE(h);
  EXPECT_EQ(h->status, 200) << h->body;  // ready when it said so
  EXPECT_GE(notify.count("STATUS="), 1);
  if (notify.count("WATCHDOG=1") == 0) notify.wait_for("WATCHDOG=1", 20000);
  EXPECT_GE(notify.count("WATCHDOG=1"), 1);
  serve->signal(SIGTERM);
  EXPECT_TRUE(notify.wait_for("STOPPING=1", 10000));
  EXPECT_EQ(serve->wait(30000), 0);
}

}  // namespace
}  // namespace tandem::testing
