#include "link/protocol.h"

#include <gtest/gtest.h>

#include <cstring>

namespace tandem::link {
namespace {

std::vector<uint8_t> body_of(const std::vector<uint8_t>& frame) {
  return {frame.begin() + kFrameHeaderSize, frame.end()};
}

Result<FrameHeader> header_of(const std::vector<uint8_t>& bytes) {
  uint8_t h[kFrameHeaderSize] = {};
  std::memcpy(h, bytes.data(), std::min(bytes.size(), kFrameHeaderSize));
  return parse_frame_header(h);
}

TEST(Protocol, HelloRoundTrips) {
  Hello h;
  h.role = Role::control;
  h.nonce.fill(7);
  h.llama_commit = "de3ff815ea7d559ee917f063901b8986f038abc6";
  h.name = "box-a";
  const auto frame = encode_hello(h);
  ASSERT_EQ(frame.size(), kFrameHeaderSize + kHelloBody);
  auto hdr = header_of(frame);
  ASSERT_TRUE(hdr.is_ok());
  EXPECT_EQ(hdr->type, MsgType::hello);
  EXPECT_EQ(hdr->length, kHelloBody);
  auto back = parse_hello(body_of(frame));
  ASSERT_TRUE(back.is_ok()) << back.status().message();
  EXPECT_EQ(back->role, Role::control);
  EXPECT_EQ(back->name, "box-a");
  EXPECT_EQ(back->llama_commit, h.llama_commit);
  EXPECT_EQ(back->nonce, h.nonce);
}

TEST(Protocol, MalformedMessagesAreErrors) {
  auto body = body_of(encode_hello(Hello{}));
  body[2] = 9;  // role
  EXPECT_NE(parse_hello(body).status().message().find("unknown role 9"), std::string::npos);
  body = body_of(encode_hello(Hello{}));
  body.pop_back();
  EXPECT_FALSE(parse_hello(body).is_ok());
  EXPECT_FALSE(parse_challenge(std::vector<uint8_t>(10)).is_ok());
  EXPECT_FALSE(parse_proof(std::vector<uint8_t>(31)).is_ok());
  EXPECT_FALSE(parse_verdict({0, 0, 0, 5, 'a'}).is_ok());
  auto v = parse_verdict(body_of(encode_verdict({VerdictCode::busy, "taken"})));
  ASSERT_TRUE(v.is_ok());
  EXPECT_EQ(v->code, VerdictCode::busy);
  EXPECT_EQ(v->text, "taken");
}

TEST(Protocol, AnotherVersionParsesOnlyTheVersion) {
  std::vector<uint8_t> body = {0, 0, 1};  // version 0, then anything
  auto h = parse_hello(body);
  ASSERT_TRUE(h.is_ok());
  EXPECT_EQ(h->version, 0);
}

TEST(Protocol, FrameHeadersSayWhatTheBytesLookLike) {
  // ggml RPC HELLO: command 14, then a u64 size of 24.
  auto ggml = header_of({14, 24, 0, 0, 0, 0, 0, 0});
  ASSERT_FALSE(ggml.is_ok());
  EXPECT_NE(ggml.status().message().find("raw ggml RPC HELLO"), std::string::npos);
  auto garbage = header_of({'G', 'E', 'T', ' ', '/', ' ', 'H', 'T'});
  EXPECT_NE(garbage.status().message().find("garbage"), std::string::npos);
  EXPECT_FALSE(header_of({'T', 'N', 'D', 'M', 9, 0, 0, 0}).is_ok());     // unknown type
  EXPECT_FALSE(header_of({'T', 'N', 'D', 'M', 1, 0, 0x10, 0}).is_ok());  // 4096-byte body
  EXPECT_FALSE(header_of({'T', 'N', 'D', 'M', 1, 1, 0, 0}).is_ok());     // flags
}

}  // namespace
}  // namespace tandem::link

namespace tandem::link {
namespace {

// Whatever the bytes, the parsers answer with a value or an error: never a crash or an assert.
TEST(Protocol, RandomBytesNeverCrashTheParsers) {
  uint64_t x = 0x9e3779b97f4a7c15ULL;
  auto next = [&] {
    x ^= x << 13;
    x ^= x >> 7;
    x ^= x << 17;
    return static_cast<uint8_t>(x);
  };
  for (int i = 0; i < 20000; ++i) {
    std::vector<uint8_t> body(next() % 200 + (i % 3 == 0 ? kChallengeBody - 100 : 0));
    for (auto& b : body) b = next();
    if (i % 2 == 0 && body.size() >= 2) body[0] = 0, body[1] = 1;  // valid version: parse the rest
    (void)parse_hello(body);
    (void)parse_challenge(body);
    (void)parse_proof(body);
    (void)parse_verdict(body);
    uint8_t h[kFrameHeaderSize];
    for (auto& b : h) b = next();
    (void)parse_frame_header(h);
  }
  SUCCEED();
}

}  // namespace
}  // namespace tandem::link
