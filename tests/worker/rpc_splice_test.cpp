// The worker's frame-aware splice, against a stand-in head and RPC server on socket pairs: it
// passes ggml RPC bytes through unchanged, passes a cached-weight marker on (counted) when the
// cache holds its weight, and cuts the session when the cache lacks it.
#include "worker/rpc_splice.h"

#include <gtest/gtest.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cstring>
#include <filesystem>
#include <thread>
#include <vector>

#include "common/cached_tensor.h"
#include "link/protocol.h"
#include "link/socket_pair.h"
#include "test_util.h"

using tandem::link::encode_cached_marker;

namespace tandem::worker {
namespace {

using namespace tandem::testing;
using Bytes = std::vector<uint8_t>;
using link::take;

constexpr size_t kTensor = 304;  // sizeof(rpc_tensor) in the pinned ggml; any size works here

Bytes u64(uint64_t v) {
  Bytes b(8);
  std::memcpy(b.data(), &v, 8);
  return b;
}

Bytes frame(uint8_t cmd, const Bytes& payload) {
  Bytes f{cmd};
  const Bytes n = u64(payload.size());
  f.insert(f.end(), n.begin(), n.end());
  f.insert(f.end(), payload.begin(), payload.end());
  return f;
}

Bytes answer(const Bytes& payload) {
  Bytes a = u64(payload.size());
  a.insert(a.end(), payload.begin(), payload.end());
  return a;
}

void put(int fd, const Bytes& b) {
  ASSERT_EQ(::send(fd, b.data(), b.size(), MSG_NOSIGNAL), static_cast<ssize_t>(b.size()));
}

// True when nothing (more) is readable within `ms`.
bool quiet(int fd, int ms) {
  struct timeval tv {
    0, ms * 1000
  };
  ::setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
  uint8_t c;
  const ssize_t r = ::recv(fd, &c, 1, 0);
  tv = {0, 0};
  ::setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
  return r < 0 && (errno == EAGAIN || errno == EWOULDBLOCK);
}

Bytes marker_set_tensor(uint64_t hash, uint64_t bytes, Bytes* tensor) {
  tensor->assign(kTensor, 0);
  for (size_t i = 0; i < kTensor; ++i) (*tensor)[i] = static_cast<uint8_t>(i * 7);
  Bytes p = *tensor;
  p.push_back(0);  // cache flag
  const Bytes off = u64(0);
  p.insert(p.end(), off.begin(), off.end());
  const auto m = encode_cached_marker({hash, bytes});
  p.insert(p.end(), m.begin(), m.end());
  return frame(6, p);  // RPC_CMD_SET_TENSOR
}

class RpcSplice : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_EQ(::socketpair(AF_UNIX, SOCK_STREAM, 0, head_), 0);
    ASSERT_EQ(::socketpair(AF_UNIX, SOCK_STREAM, 0, server_), 0);
    std::filesystem::create_directories(dir_.file("cache"));
    options_.cache_dir = dir_.file("cache");
  }
  void start() {
    thread_ = std::thread([this] { result_ = rpc_splice(head_[1], server_[1], options_); });
  }
  void TearDown() override {
    ::shutdown(head_[0], SHUT_RDWR);
    ::shutdown(server_[0], SHUT_RDWR);
    if (thread_.joinable()) thread_.join();
    for (int fd : {head_[0], head_[1], server_[0], server_[1]}) ::close(fd);
  }
  ScratchDir dir_;
  int head_[2], server_[2];  // [0]: the test's end, [1]: the splice's
  RpcSpliceOptions options_;
  RpcSpliceResult result_;
  std::thread thread_;
};

TEST_F(RpcSplice, PassesRequestsAndAnswersThroughUnchanged) {
  start();
  const Bytes hello = frame(14, Bytes(24, 0));
  Bytes big(3 << 20);  // a weight upload, larger than the splice's buffer
  for (size_t i = 0; i < big.size(); ++i) big[i] = static_cast<uint8_t>(i * 31 + 1);
  const Bytes upload = frame(6, big);
  const Bytes small_set = frame(6, Bytes(kTensor + 9 + 16, 5));  // small SET_TENSOR, not a marker
  std::thread writer([&] {
    put(head_[0], hello);
    put(head_[0], upload);
    put(head_[0], small_set);
  });
  EXPECT_EQ(take(server_[0], hello.size()), hello);
  EXPECT_EQ(take(server_[0], upload.size()), upload);
  EXPECT_EQ(take(server_[0], small_set.size()), small_set);
  writer.join();
  const Bytes rsp = answer({1, 2, 3, 4});
  put(server_[0], rsp);
  EXPECT_EQ(take(head_[0], rsp.size()), rsp);
}

TEST_F(RpcSplice, PassesAMarkerWhoseWeightIsCachedOnAndCountsIt) {
  write_file(dir_.file("cache") + "/" + hash_name(0xabcdef), std::string(5000, 'w'));
  start();
  Bytes tensor;
  const Bytes marker = marker_set_tensor(0xabcdef, 5000, &tensor);
  put(head_[0], marker);
  const Bytes get = frame(1, Bytes(4, 0));  // the engine's next request, which has an answer
  put(head_[0], get);
  EXPECT_EQ(take(server_[0], marker.size()), marker);  // the RPC child loads it (cache_loader_test)
  EXPECT_EQ(take(server_[0], get.size()), get);
  const Bytes rsp = answer(u64(32));
  put(server_[0], rsp);
  EXPECT_EQ(take(head_[0], rsp.size()), rsp);
  EXPECT_TRUE(quiet(head_[0], 100));
  ::shutdown(head_[0], SHUT_RDWR);
  thread_.join();
  EXPECT_EQ(result_.cached_loads, 1u);
  EXPECT_EQ(result_.cached_bytes, 5000u);
  EXPECT_EQ(result_.error, "");
}

TEST_F(RpcSplice, AMarkerForAWeightNotInTheCacheCutsTheSession) {
  write_file(dir_.file("cache") + "/" + hash_name(0x1234), std::string(10, 'w'));  // wrong size
  start();
  Bytes tensor;
  put(head_[0], marker_set_tensor(0x1234, 5000, &tensor));
  EXPECT_TRUE(take(head_[0], 1).empty());  // the head's connection ends
  thread_.join();
  EXPECT_NE(result_.error.find("not in " + dir_.file("cache")), std::string::npos) << result_.error;
  EXPECT_TRUE(take(server_[0], 9).empty());  // nothing reached the server
}

TEST_F(RpcSplice, AMarkerWithoutACacheFolderCutsTheSession) {
  options_.cache_dir.clear();
  start();
  Bytes tensor;
  put(head_[0], marker_set_tensor(0x99, 64, &tensor));
  EXPECT_TRUE(take(head_[0], 1).empty());
  thread_.join();
  EXPECT_NE(result_.error.find("has no --cache-dir"), std::string::npos) << result_.error;
  EXPECT_TRUE(take(server_[0], 9).empty());
}

}  // namespace
}  // namespace tandem::worker
