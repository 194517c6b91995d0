// A peer that holds the cluster secret but speaks garbage on its `rpc` connection: random bytes,
// truncated commands, sizes far beyond memory, commands with nonsense arguments. ggml's RPC server
// trusts its client (docs/protocol.md), so such a peer may kill the RPC child; the worker must
// survive every time, restart the child, and serve the next honest head.
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cstring>
#include <random>

#include "link/control.h"
#include "link/protocol.h"
#include "link/socket.h"
#include "worker_env.h"

namespace tandem::worker {
namespace {

using namespace tandem::testing;

constexpr uint8_t kHello = 14;     // RPC_CMD_HELLO, frozen by ggml
constexpr size_t kHelloReq = 24;   // rpc_msg_hello_req: the connection capabilities
constexpr size_t kHelloRsp = 28;   // rpc_msg_hello_rsp: version, padding, capabilities
constexpr uint8_t kCommands = 19;  // RPC_CMD_COUNT of the pinned ggml

std::vector<uint8_t> command(uint8_t cmd, uint64_t size, const std::vector<uint8_t>& payload) {
  std::vector<uint8_t> b = {cmd};
  for (int i = 0; i < 8; ++i) b.push_back(static_cast<uint8_t>(size >> (8 * i)));
  b.insert(b.end(), payload.begin(), payload.end());
  return b;
}

std::vector<uint8_t> hello() { return command(kHello, kHelloReq, std::vector<uint8_t>(kHelloReq, 0)); }

// An authenticated rpc connection to `w`, or an invalid Fd (with a test failure).
link::Fd rpc_session(const WorkerProcess& w, const link::Secret& secret) {
  // The previous session may still hold the worker's one rpc slot for a moment, or the child may
  // be restarting: retry briefly, as a head would.
  for (int attempt = 0; attempt < 100; ++attempt) {
    auto fd = link::connect_tcp(w.ep(), link::deadline_in(link::Millis(5000)));
    if (!fd.is_ok()) break;
    auto o = link::default_handshake_options();
    o.name = "mallory";
    if (link::client_handshake(fd->get(), secret, link::Role::rpc, o, "worker").is_ok()) return std::move(fd.value());
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  ADD_FAILURE() << "no rpc session with the worker";
  return link::Fd();
}

// Sends `bytes` (best effort: the server may close early), then closes our side and waits until
// the worker has ended the session.
void send_and_close(link::Fd fd, const std::vector<uint8_t>& bytes) {
  (void)link::write_all(fd.get(), bytes.data(), bytes.size(), link::deadline_in(link::Millis(3000)));
  ::shutdown(fd.get(), SHUT_WR);
  char buf[4096];
  const auto deadline = link::deadline_in(link::Millis(5000));
  while (link::wait_readable(fd.get(), deadline) && ::recv(fd.get(), buf, sizeof buf, 0) > 0) {}
}

// The honest head after the attack: a HELLO gets ggml's answer.
bool honest_hello_works(const WorkerProcess& w, const link::Secret& secret) {
  link::Fd fd = rpc_session(w, secret);
  if (!fd.valid()) return false;
  const auto h = hello();
  if (link::write_all(fd.get(), h.data(), h.size(), link::deadline_in(link::Millis(3000))) != link::Io::ok)
    return false;
  uint8_t rsp[8 + kHelloRsp];
  if (link::read_exact(fd.get(), rsp, sizeof rsp, link::deadline_in(link::Millis(5000))) != link::Io::ok) return false;
  uint64_t size = 0;
  std::memcpy(&size, rsp, 8);
  return size == kHelloRsp;
}

TEST(HostilePeer, GarbageOnAnRpcConnectionNeverKillsTheWorker) {
  ScratchDir dir;
  const link::Secret secret = make_secret(dir.file("cluster.key"));
  WorkerProcess w(dir, "box-b", dir.file("cluster.key"));
  ASSERT_TRUE(w.up()) << w.log();
  std::mt19937_64 rng(42);
  auto random_bytes = [&](size_t n) {
    std::vector<uint8_t> b(n);
    for (auto& x : b) x = static_cast<uint8_t>(rng());
    return b;
  };

  const std::vector<uint8_t> h = hello();
  std::vector<std::pair<std::string, std::vector<uint8_t>>> attacks = {
      {"random bytes instead of HELLO", random_bytes(256 * 1024)},
      {"a truncated HELLO", std::vector<uint8_t>(h.begin(), h.begin() + 5)},
      {"HELLO with a wrong size", command(kHello, 1u << 30, {})},
  };
  auto after_hello = [&](const std::vector<uint8_t>& rest) {
    auto b = hello();
    b.insert(b.end(), rest.begin(), rest.end());
    return b;
  };
  attacks.push_back({"random bytes after HELLO", after_hello(random_bytes(256 * 1024))});
  // Sizes no machine has: ggml's reader fails its allocation (sizes near the memory of this host
  // would be zero-filled and could take the test machine down with them, so none is tried).
  attacks.push_back({"a command of 2^62 bytes", after_hello(command(6, uint64_t{1} << 62, random_bytes(64)))});
  attacks.push_back({"a command of 2^64-1 bytes", after_hello(command(10, ~uint64_t{0}, random_bytes(64)))});
  attacks.push_back({"a truncated command", after_hello(command(10, 4096, random_bytes(100)))});
  for (uint8_t cmd = 0; cmd < kCommands + 2; ++cmd) {
    const size_t n = rng() % 96;
    attacks.push_back({"command " + std::to_string(cmd) + " with " + std::to_string(n) + " random bytes",
                       after_hello(command(cmd, n, random_bytes(n)))});
  }

  // The child's restart count, counting one more while it is down (it restarts after a second).
  auto restarts = [&] {
    auto st = link::control_request(w.ep(), secret, "status", link::default_handshake_options());
    if (!st.is_ok()) return -1;
    const auto& rs = st.value()["rpc_server"];
    return rs["restarts"].get<int>() + (rs["state"] == "running" ? 0 : 1);
  };
  std::string fatal;  // the attacks that killed the RPC child
  for (const auto& [name, bytes] : attacks) {
    SCOPED_TRACE(name);
    const int before = restarts();
    link::Fd fd = rpc_session(w, secret);
    ASSERT_TRUE(fd.valid()) << w.log();
    send_and_close(std::move(fd), bytes);
    ASSERT_TRUE(w.process().running()) << "the worker died of: " << name << "\n" << w.log();
    std::this_thread::sleep_for(std::chrono::milliseconds(100));  // a dying child is reaped meanwhile
    if (restarts() != before) fatal += (fatal.empty() ? "" : "; ") + name;
  }
  std::printf("hostile peer: attacks that killed the RPC child: %s\n", fatal.empty() ? "none" : fatal.c_str());
  // Whatever died meanwhile is back, and an honest head is served.
  EXPECT_TRUE(honest_hello_works(w, secret)) << w.log();
  auto st = link::control_request(w.ep(), secret, "status", link::default_handshake_options());
  ASSERT_TRUE(st.is_ok()) << st.status().message();
  EXPECT_EQ(st.value()["rpc_server"]["state"], "running") << st.value().dump();
  std::printf("hostile peer: %zu attacks, the RPC child was restarted %d times, the worker never died\n",
              attacks.size(), st.value()["rpc_server"]["restarts"].get<int>());
  EXPECT_TRUE(w.process().running());
}

}  // namespace
}  // namespace tandem::worker
