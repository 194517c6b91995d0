// `tandem doctor` against real workers on this machine: one good, one holding another secret, one
// down, and a port that answers without the link handshake where a ggml RPC server might.
#include <arpa/inet.h>
#include <ifaddrs.h>
#include <net/if.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <fstream>
#include <sstream>

#include <gtest/gtest.h>

#include "support/process.h"
#include "test_util.h"

namespace tandem::testing {
namespace {

// An IPv4 address of this machine that is not loopback, or "" when it has none.
std::string non_loopback_ipv4() {
  ifaddrs* list = nullptr;
  if (::getifaddrs(&list) != 0) return "";
  std::string found;
  for (ifaddrs* a = list; a != nullptr && found.empty(); a = a->ifa_next) {
    if (a->ifa_addr == nullptr || a->ifa_addr->sa_family != AF_INET || (a->ifa_flags & IFF_LOOPBACK) ||
        !(a->ifa_flags & IFF_UP))
      continue;
    char buf[INET_ADDRSTRLEN];
    ::inet_ntop(AF_INET, &reinterpret_cast<sockaddr_in*>(a->ifa_addr)->sin_addr, buf, sizeof buf);
    found = buf;
  }
  ::freeifaddrs(list);
  return found;
}

// A plain TCP listener on every address: what a raw ggml-rpc-server started by hand looks like.
struct OpenPort {
  int fd = -1, port = 0;
  OpenPort() {
    fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_ANY);
    EXPECT_EQ(::bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof a), 0);
    EXPECT_EQ(::listen(fd, 8), 0);
    socklen_t len = sizeof a;
    ::getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len);
    port = ntohs(a.sin_port);
  }
  ~OpenPort() { ::close(fd); }
};

std::string line_of(const std::string& out, const std::string& prefix) {
  std::istringstream in(out);
  for (std::string l; std::getline(in, l);) {
    if (l.rfind(prefix, 0) == 0) return l;
  }
  return "";
}

class Doctor : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_EQ(run_tandem("secret new -o " + dir_.file("cluster.key"), dir_.file("")).exit_code, 0);
    ASSERT_EQ(run_tandem("secret new -o " + dir_.file("other.key"), dir_.file("")).exit_code, 0);
    ASSERT_EQ(run_tandem("synth --preset tiny -o " + dir_.file("tiny.gguf"), dir_.file("")).exit_code, 0);
  }
  std::unique_ptr<ChildProcess> worker(const std::string& name, const std::string& listen, int port,
                                       const std::string& key) {
    auto w = std::make_unique<ChildProcess>(
        std::vector<std::string>{TANDEM_BINARY, "worker", "--listen", listen + ":" + std::to_string(port),
                                 "--secret-file", dir_.file(key), "--name", name, "--threads", "1", "--cache-dir",
                                 dir_.file(name + "-cache")},
        dir_.file(name + ".log"));
    EXPECT_TRUE(wait_for_port(port, 10000));
    return w;
  }
  std::string config(const std::vector<std::pair<std::string, std::string>>& workers) {
    std::string t = "[cluster]\nsecret_file = \"" + dir_.file("cluster.key") + "\"\nhead_name = \"head\"\n";
    for (const auto& [name, address] : workers)
      t += "[[worker]]\nname = \"" + name + "\"\naddress = \"" + address + "\"\n";
    t += "[model]\npath = \"" + dir_.file("tiny.gguf") + "\"\ncontext = 512\n";
    const std::string path = dir_.file("tandem.toml");
    write_file(path, t);
    return path;
  }
  ScratchDir dir_;
};

TEST_F(Doctor, OneLinePerCheckWithWhatToDoAndFailureExitStatus) {
  const std::string ip = non_loopback_ipv4();
  const int good = free_port(), bad = free_port(), down = free_port();
  auto g = worker("good", ip.empty() ? "127.0.0.1" : "0.0.0.0", good, "cluster.key");
  auto b = worker("bad", "127.0.0.1", bad, "other.key");
  OpenPort exposed;
  const std::string good_address = (ip.empty() ? "127.0.0.1" : ip) + ":" + std::to_string(good);
  const std::string cfg = config({{"good", good_address},
                                  {"bad", "127.0.0.1:" + std::to_string(bad)},
                                  {"down", "127.0.0.1:" + std::to_string(down)}});
  auto r =
      run_tandem("doctor -c " + cfg + " --pings 5 --probe-bytes 4MiB --timeout-ms 2000 --rpc-port 50052 --rpc-port " +
                     std::to_string(exposed.port),
                 dir_.file(""));
  EXPECT_EQ(r.exit_code, 1) << r.out << r.err;

  EXPECT_NE(line_of(r.out, "PASS  head  secret:"), "") << r.out;
  EXPECT_NE(line_of(r.out, "PASS  head  model:"), "") << r.out;
  EXPECT_NE(line_of(r.out, "PASS  good  reachable:"), "") << r.out;
  EXPECT_NE(line_of(r.out, "PASS  good  secret: mutual handshake accepted by worker 'good'"), "") << r.out;
  EXPECT_NE(line_of(r.out, "PASS  good  versions:"), "") << r.out;
  EXPECT_NE(line_of(r.out, "PASS  good  memory:"), "") << r.out;
  // Both parallelisms priced for the cluster it found.
  const std::string parallelism = line_of(r.out, "PASS  plan  parallelism:");
  EXPECT_NE(parallelism.find("layer (configured): "), std::string::npos) << r.out;
  EXPECT_NE(parallelism.find("; ffn-tensor: "), std::string::npos) << r.out;
  const std::string link = line_of(r.out, "PASS  good  link: round trip");
  EXPECT_NE(link.find("median of 5"), std::string::npos) << r.out;
  EXPECT_NE(link.find("4.00 MiB each way: head->worker"), std::string::npos) << r.out;
  EXPECT_NE(line_of(r.out, "PASS  good  cache:").size() + line_of(r.out, "WARN  good  cache:").size(), 0u) << r.out;

  const std::string secret = line_of(r.out, "FAIL  bad  secret:");
  EXPECT_NE(secret.find("wrong cluster secret"), std::string::npos) << r.out;
  EXPECT_NE(secret.find("-> copy the head's"), std::string::npos) << r.out;
  const std::string unreachable = line_of(r.out, "FAIL  down  reachable:");
  EXPECT_NE(unreachable.find("-> start the worker there"), std::string::npos) << r.out;
  EXPECT_NE(line_of(r.out, "WARN  plan  memory: planned without the workers that did not answer"), "") << r.out;

  if (ip.empty()) {
    EXPECT_NE(line_of(r.out, "PASS  good  rpc-exposure:").find("loopback"), std::string::npos) << r.out;
  } else {
    const std::string exposure = line_of(r.out, "FAIL  good  rpc-exposure:");
    EXPECT_NE(exposure.find(ip + ":" + std::to_string(exposed.port)), std::string::npos) << r.out;
    EXPECT_EQ(exposure.find(":50052"), std::string::npos) << "nothing listens on 50052 here: " << r.out;
  }
  // secret, reachable and (with a network address) exposure failed; nothing else did.
  const std::string summary = r.out.substr(r.out.rfind(" checks: ") + 9);
  EXPECT_EQ(summary.rfind(ip.empty() ? "2 failed" : "3 failed", 0), 0u) << r.out;
}

TEST_F(Doctor, AHealthyClusterExitsZero) {
  const int good = free_port();
  auto g = worker("good", "127.0.0.1", good, "cluster.key");
  const std::string cfg = config({{"good", "127.0.0.1:" + std::to_string(good)}});
  auto r = run_tandem("doctor -c " + cfg + " --pings 3 --probe-bytes 1MiB", dir_.file(""));
  EXPECT_EQ(r.exit_code, 0) << r.out << r.err;
  EXPECT_EQ(r.out.find("FAIL"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("0 failed"), std::string::npos) << r.out;
  // The summary counts the WARN lines, in English ("1 warning", "2 warnings").
  size_t warned = 0;
  for (size_t at = 0; (at = r.out.find("\nWARN  ", at)) != std::string::npos; ++at) ++warned;
  if (r.out.rfind("WARN  ", 0) == 0) ++warned;
  const std::string expected = ", " + std::to_string(warned) + (warned == 1 ? " warning\n" : " warnings\n");
  EXPECT_NE(r.out.find(expected), std::string::npos) << expected << " in:\n" << r.out;
}

// serve refuses a header-only model, so doctor must not pass it.
TEST_F(Doctor, AHeaderOnlyModelFailsWhatServeWouldRefuse) {
  ASSERT_EQ(run_tandem("synth --preset m3 --header-only -o " + dir_.file("m3.gguf"), dir_.file("")).exit_code, 0);
  const int good = free_port();
  auto g = worker("good", "127.0.0.1", good, "cluster.key");
  std::string cfg = read_file(config({{"good", "127.0.0.1:" + std::to_string(good)}}));
  cfg.replace(cfg.find(dir_.file("tiny.gguf")), dir_.file("tiny.gguf").size(), dir_.file("m3.gguf"));
  write_file(dir_.file("tandem.toml"), cfg);
  auto r = run_tandem("doctor -c " + dir_.file("tandem.toml") + " --pings 2 --probe-bytes 0", dir_.file(""));
  EXPECT_EQ(r.exit_code, 1) << r.out;
  EXPECT_NE(line_of(r.out, "FAIL  head  model:").find("header-only"), std::string::npos) << r.out;
}

TEST_F(Doctor, ABadConfigIsAUsageError) {
  write_file(dir_.file("bad.toml"), "[model]\ncontxt = 4\n");
  auto r = run_tandem("doctor -c " + dir_.file("bad.toml"), dir_.file(""));
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_NE(r.err.find("contxt: unknown key"), std::string::npos) << r.err;
}

}  // namespace
}  // namespace tandem::testing
