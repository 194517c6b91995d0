// `tandem worker` as a real process on loopback: what it refuses, and how it keeps its RPC child.
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cstring>
#include <filesystem>

#include "link/control.h"
#include "link/protocol.h"
#include "link/socket.h"
#include "worker_env.h"

namespace tandem::worker {
namespace {

using namespace tandem::testing;

link::Fd dial(const WorkerProcess& w) {
  auto fd = link::connect_tcp(w.ep(), link::deadline_in(link::Millis(5000)));
  EXPECT_TRUE(fd.is_ok());
  return fd.is_ok() ? std::move(fd.value()) : link::Fd();
}

void send_bytes(int fd, const std::vector<uint8_t>& bytes) {
  ASSERT_EQ(link::write_all(fd, bytes.data(), bytes.size(), link::deadline_in(link::Millis(2000))), link::Io::ok);
}

// Waits (bounded) until the worker closes `fd`.
bool closed_by_peer(int fd, int timeout_ms) {
  char buf[256];
  const auto deadline = link::deadline_in(link::Millis(timeout_ms));
  for (;;) {
    if (!link::wait_readable(fd, deadline)) return false;
    const ssize_t r = ::recv(fd, buf, sizeof buf, 0);
    if (r <= 0) return true;
  }
}

// Debian's nlohmann-json here: this binary does not link the engine (see tests/worker/CMakeLists.txt).
Result<nlohmann::json> status_of(const WorkerProcess& w, const link::Secret& secret) {
  return link::control_request(w.ep(), secret, "status", link::default_handshake_options());
}

link::HandshakeOptions named(const std::string& name) {
  auto o = link::default_handshake_options();
  o.name = name;
  return o;
}

std::vector<uint8_t> ggml_hello() {
  std::vector<uint8_t> b = {14, 24, 0, 0, 0, 0, 0, 0, 0};
  b.resize(9 + 24, 0);
  return b;
}

TEST(Worker, RejectsEveryoneWithoutTheSecretAndStaysUp) {
  ScratchDir dir;
  const link::Secret secret = make_secret(dir.file("cluster.key"));
  make_secret(dir.file("other.key"));
  const link::Secret other = link::load_secret(dir.file("other.key")).value();
  WorkerProcess w(dir, "box-b", dir.file("cluster.key"), {"--handshake-timeout-ms", "1000"});
  ASSERT_TRUE(w.up()) << w.log();

  {  // a wrong secret
    link::Fd fd = dial(w);
    auto r = link::client_handshake(fd.get(), other, link::Role::rpc, named("intruder"), "worker box-b");
    ASSERT_FALSE(r.is_ok());
    EXPECT_NE(r.status().message().find("wrong cluster secret"), std::string::npos) << r.status().message();
  }
  EXPECT_TRUE(w.wait_log("role rpc, peer 'intruder': refused: wrong cluster secret")) << w.log();
  {  // no handshake at all: connect and close
    link::Fd fd = dial(w);
  }
  EXPECT_TRUE(w.wait_log("role ?: refused: closed before the handshake")) << w.log();
  {  // garbage bytes
    link::Fd fd = dial(w);
    send_bytes(fd.get(), {'G', 'E', 'T', ' ', '/', ' ', 'H', 'T', 'T', 'P', '/', '1', '.', '1', '\r', '\n'});
    EXPECT_TRUE(closed_by_peer(fd.get(), 5000));
  }
  EXPECT_TRUE(w.wait_log("refused: not a tandem link handshake: garbage bytes")) << w.log();
  {  // a raw ggml RPC HELLO straight at the public port
    link::Fd fd = dial(w);
    send_bytes(fd.get(), ggml_hello());
    EXPECT_TRUE(closed_by_peer(fd.get(), 5000));
  }
  EXPECT_TRUE(w.wait_log("refused: a raw ggml RPC HELLO")) << w.log();
  {  // an old protocol version
    link::Fd fd = dial(w);
    std::vector<uint8_t> hello = link::encode_hello(link::Hello{});
    hello[link::kFrameHeaderSize + 1] = 3;  // version 3
    send_bytes(fd.get(), hello);
    EXPECT_TRUE(closed_by_peer(fd.get(), 5000));
  }
  EXPECT_TRUE(w.wait_log("refused: link protocol mismatch: 'box-b' speaks version 4, the peer version 3")) << w.log();
  {  // connects and sends nothing: cut at the deadline
    link::Fd fd = dial(w);
    EXPECT_TRUE(closed_by_peer(fd.get(), 10000));
  }
  EXPECT_TRUE(w.wait_log("refused: no handshake within 1000 ms")) << w.log();

  EXPECT_TRUE(w.process().running());
  auto st = status_of(w, secret);
  ASSERT_TRUE(st.is_ok()) << st.status().message();
  EXPECT_EQ(st.value()["connections"]["refused"], 7);  // the six above and wait_for_port's probe
  EXPECT_EQ(st.value()["bytes"]["from_head"], 0);
  EXPECT_EQ(st.value()["rpc_server"]["state"], "running");
  EXPECT_EQ(st.value()["rpc_server"]["isolated"], true) << st.value()["rpc_server"].dump();
  // ggml's server prints this for every client it accepts: it never saw one.
  EXPECT_EQ(w.log().find("Accepted client connection"), std::string::npos) << w.log();
}

TEST(Worker, ASecondHeadIsRefusedNamingTheFirst) {
  ScratchDir dir;
  const link::Secret secret = make_secret(dir.file("cluster.key"));
  WorkerProcess w(dir, "box-b", dir.file("cluster.key"));
  ASSERT_TRUE(w.up()) << w.log();
  link::Fd first = dial(w);
  ASSERT_TRUE(link::client_handshake(first.get(), secret, link::Role::rpc, named("head-a"), "worker box-b").is_ok());
  link::Fd second = dial(w);
  auto r = link::client_handshake(second.get(), secret, link::Role::rpc, named("head-b"), "worker box-b");
  ASSERT_FALSE(r.is_ok());
  EXPECT_NE(r.status().message().find("worker 'box-b' already serves head 'head-a' (127.0.0.1:"), std::string::npos)
      << r.status().message();
  EXPECT_TRUE(w.wait_log("peer 'head-b': refused: worker 'box-b' already serves head 'head-a'")) << w.log();
  // Once the first head leaves, the next one is served.
  first.reset();
  EXPECT_TRUE(w.wait_log("peer 'head-a': accepted; session ended")) << w.log();
  link::Fd third = dial(w);
  EXPECT_TRUE(link::client_handshake(third.get(), secret, link::Role::rpc, named("head-b"), "worker box-b").is_ok());
}

// Found by the fault suite (link cut during load): after a pulled cable the head's old rpc
// session still looked alive to the worker, which refused the same head's new sessions as busy
// until TCP gave up on the old one, and the cluster stayed down ~10 s after the cable was back.
TEST(Worker, TheSameHeadReconnectingReplacesItsStaleSession) {
  ScratchDir dir;
  const link::Secret secret = make_secret(dir.file("cluster.key"));
  WorkerProcess w(dir, "box-b", dir.file("cluster.key"));
  ASSERT_TRUE(w.up()) << w.log();
  link::Fd stale = dial(w);  // stays open: to the worker it is a live session
  ASSERT_TRUE(link::client_handshake(stale.get(), secret, link::Role::rpc, named("head-a"), "worker box-b").is_ok());
  link::Fd again = dial(w);
  auto r = link::client_handshake(again.get(), secret, link::Role::rpc, named("head-a"), "worker box-b");
  EXPECT_TRUE(r.is_ok()) << r.status().message();
  EXPECT_TRUE(closed_by_peer(stale.get(), 5000)) << "the stale session was not ended";
  EXPECT_TRUE(w.wait_log("head 'head-a' reconnected; ending its previous rpc session")) << w.log();
  // Another head is still refused while head-a holds the worker.
  link::Fd other = dial(w);
  auto o = link::client_handshake(other.get(), secret, link::Role::rpc, named("head-b"), "worker box-b");
  ASSERT_FALSE(o.is_ok());
  EXPECT_NE(o.status().message().find("already serves head 'head-a'"), std::string::npos) << o.status().message();
}

TEST(Worker, AKilledRpcServerIsReportedAndRestarted) {
  ScratchDir dir;
  const link::Secret secret = make_secret(dir.file("cluster.key"));
  WorkerProcess w(dir, "box-b", dir.file("cluster.key"));
  ASSERT_TRUE(w.up()) << w.log();
  // A control connection that will receive the event.
  link::Fd control = dial(w);
  ASSERT_TRUE(
      link::client_handshake(control.get(), secret, link::Role::control, named("head"), "worker box-b").is_ok());
  // A request answered on this connection: the worker has registered it for events by then (its
  // session thread does so before reading requests).
  ASSERT_TRUE(
      link::write_json(control.get(), {{"id", 1}, {"op", "status"}}, link::deadline_in(link::Millis(5000))).is_ok());
  link::LineReader reader(control.get());
  auto st = reader.read_json(link::deadline_in(link::Millis(10000)));
  ASSERT_TRUE(st.is_ok()) << st.status().message();
  const int pid = st.value()["result"]["rpc_server"]["pid"];
  ASSERT_GT(pid, 0);
  ASSERT_EQ(::kill(pid, SIGKILL), 0);
  auto event = reader.read_json(link::deadline_in(link::Millis(10000)));
  ASSERT_TRUE(event.is_ok()) << event.status().message();
  EXPECT_EQ(event.value()["event"], "rpc_server_exited");
  EXPECT_NE(event.value()["detail"].get<std::string>().find("killed by signal 9"), std::string::npos)
      << event.value().dump();
  EXPECT_TRUE(w.wait_log("killed by signal 9 (Killed); restarting it")) << w.log();
  // Restarted: running again under a new pid.
  bool restarted = false;
  for (int i = 0; i < 300 && !restarted; ++i) {
    auto s = status_of(w, secret);
    restarted = s.is_ok() && s.value()["rpc_server"]["state"] == "running" && s.value()["rpc_server"]["restarts"] == 1;
    if (!restarted) std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  EXPECT_TRUE(restarted) << w.log();
  EXPECT_TRUE(w.process().running());
}

TEST(Worker, WithoutAPrivateNamespaceItSaysSoPlainly) {
  ScratchDir dir;
  const link::Secret secret = make_secret(dir.file("cluster.key"));
  WorkerProcess w(dir, "box-b", dir.file("cluster.key"), {"--no-private-netns"});
  ASSERT_TRUE(w.up()) << w.log();
  EXPECT_TRUE(w.wait_log("NOT isolated")) << w.log();
  auto st = status_of(w, secret);
  ASSERT_TRUE(st.is_ok()) << st.status().message();
  EXPECT_EQ(st.value()["rpc_server"]["isolated"], false);
  EXPECT_NE(st.value()["rpc_server"]["isolation"].get<std::string>().find("open to every user of this host"),
            std::string::npos);
}

TEST(Worker, WhereTheHostForbidsANamespaceItSaysWhy) {
  // Without CAP_SYS_ADMIN (dropped from the bounding set), unshare(CLONE_NEWNET) fails.
  if (::access("/usr/bin/setpriv", X_OK) != 0) GTEST_SKIP() << "setpriv is not installed";
  ScratchDir dir;
  const link::Secret secret = make_secret(dir.file("cluster.key"));
  WorkerProcess w(dir, "box-b", dir.file("cluster.key"), {}, {"/usr/bin/setpriv", "--bounding-set", "-sys_admin"});
  ASSERT_TRUE(w.up()) << w.log();
  EXPECT_TRUE(
      w.wait_log("NOT isolated: could not create a private network namespace (unshare(CLONE_NEWNET): "
                 "Operation not permitted)"))
      << w.log();
  auto st = status_of(w, secret);
  ASSERT_TRUE(st.is_ok()) << st.status().message();
  EXPECT_EQ(st.value()["rpc_server"]["isolated"], false);
  EXPECT_EQ(st.value()["rpc_server"]["state"], "running");
}

TEST(Worker, SigtermStopsItCleanly) {
  ScratchDir dir;
  make_secret(dir.file("cluster.key"));
  WorkerProcess w(dir, "box-b", dir.file("cluster.key"));
  ASSERT_TRUE(w.up()) << w.log();
  ASSERT_TRUE(w.process().signal(SIGTERM));
  EXPECT_EQ(w.process().wait(15000), 0) << w.log();
  EXPECT_NE(w.log().find("worker: stopped"), std::string::npos) << w.log();
}

}  // namespace
}  // namespace tandem::worker

namespace tandem::worker {
namespace {

using namespace tandem::testing;

TEST(Worker, ListsItsCacheOnTheControlChannel) {
  ScratchDir dir;
  const link::Secret secret = make_secret(dir.file("cluster.key"));
  std::filesystem::create_directories(dir.file("cache"));
  write_file(dir.file("cache") + "/00000000000000ab", std::string(1234, 'x'));
  write_file(dir.file("cache") + "/not-an-entry", "ignored");
  WorkerProcess w(dir, "box-l", dir.file("cluster.key"), {"--cache-dir", dir.file("cache")});
  ASSERT_TRUE(w.up()) << w.log();
  auto r = link::control_request(w.ep(), secret, "cache", link::default_handshake_options());
  ASSERT_TRUE(r.is_ok()) << r.status().to_string();
  EXPECT_EQ(r->value("dir", ""), dir.file("cache"));
  EXPECT_EQ(r->at("entries"), nlohmann::json::parse(R"([["00000000000000ab", 1234]])"));
}

}  // namespace
}  // namespace tandem::worker
