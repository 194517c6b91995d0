// Both sides of the handshake over a socket pair, one side on a thread.
#include <gtest/gtest.h>
#include <sys/socket.h>
#include <unistd.h>

#include <thread>

#include "link/protocol.h"
#include "link/socket.h"
#include "socket_pair.h"

namespace tandem::link {
namespace {

HandshakeOptions opts(const std::string& name, const std::string& commit = "abc") {
  HandshakeOptions o;
  o.name = name;
  o.llama_commit = commit;
  o.step_timeout = Millis(2000);
  return o;
}

const Secret kKey(std::vector<uint8_t>(32, 0x11));
const Secret kOther(std::vector<uint8_t>(32, 0x22));

struct Outcome {
  Result<PeerInfo> client = Status::internal("not run");
  Result<PeerInfo> server = Status::internal("not run");
};

Outcome run(const Secret& client_key, const Secret& server_key, const HandshakeOptions& co, const HandshakeOptions& so,
            AdmitFn admit = nullptr) {
  Pair p;
  Outcome o;
  std::thread server([&] { o.server = server_handshake(p.b.get(), server_key, so, admit); });
  o.client = client_handshake(p.a.get(), client_key, Role::rpc, co, "worker w");
  server.join();
  return o;
}

TEST(Handshake, SameSecretAuthenticatesBothWays) {
  auto o = run(kKey, kKey, opts("head"), opts("w"));
  ASSERT_TRUE(o.client.is_ok()) << o.client.status().message();
  ASSERT_TRUE(o.server.is_ok()) << o.server.status().message();
  EXPECT_EQ(o.client->name, "w");
  EXPECT_EQ(o.server->name, "head");
  EXPECT_EQ(o.server->role, Role::rpc);
}

TEST(Handshake, WrongSecretIsRejectedOnBothSides) {
  auto o = run(kOther, kKey, opts("head"), opts("w"));
  ASSERT_FALSE(o.client.is_ok());
  ASSERT_FALSE(o.server.is_ok());
  EXPECT_NE(o.client.status().message().find("worker w: handshake rejected: wrong cluster secret"), std::string::npos)
      << o.client.status().message();
  EXPECT_EQ(o.server.status().message(), "wrong cluster secret");
}

TEST(Handshake, CommitMismatchNamesBoth) {
  auto o = run(kKey, kKey, opts("head", "1111111111112222"), opts("w", "3333333333334444"));
  ASSERT_FALSE(o.client.is_ok());
  const std::string m = o.client.status().message();
  EXPECT_NE(m.find("111111111111"), std::string::npos) << m;
  EXPECT_NE(m.find("333333333333"), std::string::npos) << m;
}

TEST(Handshake, AdmissionCanRefuseAfterAuthentication) {
  auto o = run(kKey, kKey, opts("head"), opts("w"), [](const PeerInfo&) {
    return Verdict{VerdictCode::busy, "already serves head 'other'"};
  });
  ASSERT_FALSE(o.client.is_ok());
  EXPECT_NE(o.client.status().message().find("already serves head 'other'"), std::string::npos);
}

TEST(Handshake, OldVersionGetsAVerdictNamingBothVersions) {
  Pair p;
  Result<PeerInfo> server = Status::internal("not run");
  std::thread t([&] { server = server_handshake(p.b.get(), kKey, opts("w"), nullptr); });
  std::vector<uint8_t> frame = encode_hello(Hello{});
  frame[kFrameHeaderSize + 1] = 3;  // version 3 (big-endian u16), the one before this build's
  ASSERT_EQ(::write(p.a.get(), frame.data(), frame.size()), static_cast<ssize_t>(frame.size()));
  t.join();
  ASSERT_FALSE(server.is_ok());
  EXPECT_NE(server.status().message().find("speaks version 4, the peer version 3"), std::string::npos);
  uint8_t hdr[kFrameHeaderSize];
  ASSERT_EQ(read_exact(p.a.get(), hdr, sizeof hdr, deadline_in(Millis(1000))), Io::ok);
  auto h = parse_frame_header(hdr);
  ASSERT_TRUE(h.is_ok());
  EXPECT_EQ(h->type, MsgType::verdict);
}

TEST(Handshake, SilentPeerIsCutAtTheDeadline) {
  Pair p;
  HandshakeOptions so = opts("w");
  so.step_timeout = Millis(200);
  auto r = server_handshake(p.b.get(), kKey, so, nullptr);
  ASSERT_FALSE(r.is_ok());
  EXPECT_EQ(r.status().message(), "no handshake within 200 ms");
}

}  // namespace
}  // namespace tandem::link
