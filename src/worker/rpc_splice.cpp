#include "worker/rpc_splice.h"

#include <sys/socket.h>
#include <sys/stat.h>

#include <cerrno>
#include <cstring>
#include <limits>
#include <mutex>
#include <thread>
#include <vector>

#include "common/cached_tensor.h"
#include "common/units.h"
#include "datapath/input_reuse.h"
#include "link/protocol.h"
#include "link/splice.h"

namespace tandem::worker {

using link::CachedMarker;
using link::kCachedMarkerSize;
using link::kReuseMarkerSize;
using link::parse_cached_marker;
using link::parse_reuse_marker;
using link::ReuseOp;
namespace {

// ggml-rpc's private command numbers, checked against the pinned source at build time
// (scripts/check-llama-internals.py).
// pinned llama.cpp: enum ggml/src/ggml-rpc/ggml-rpc.cpp rpc_cmd RPC_CMD_SET_TENSOR
constexpr uint8_t kCmdSetTensor = 6;
// pinned llama.cpp: enum ggml/src/ggml-rpc/ggml-rpc.cpp rpc_cmd RPC_CMD_GRAPH_COMPUTE
constexpr uint8_t kCmdGraphCompute = 10;
// pinned llama.cpp: enum ggml/src/ggml-rpc/ggml-rpc.cpp rpc_cmd RPC_CMD_GRAPH_RECOMPUTE
constexpr uint8_t kCmdGraphRecompute = 16;
// A SET_TENSOR payload is rpc_tensor | cache_flag (1) | offset (8) | data; a marker's data is
// kCachedMarkerSize bytes, so any SET_TENSOR this small is read whole and checked.
// pinned llama.cpp: text ggml/src/ggml-rpc/ggml-rpc.cpp // serialization format: | rpc_tensor | cache_flag (1 byte) | offset (8 bytes) | data (size bytes) |
// pinned llama.cpp: text ggml/src/ggml-rpc/ggml-rpc.cpp uint8_t cmd_byte = cmd; if (!sock->send_data(&cmd_byte, sizeof(cmd_byte))) { return false; } if (!sock->send_data(&input_size, sizeof(input_size))) {
constexpr size_t kMarkerTail = 1 + 8 + kCachedMarkerSize;
constexpr uint64_t kSmallFrame = 4096;
constexpr size_t kBuffer = 1 << 20;
// Payload left of a frame from which on it is relayed without passing through this process.
constexpr uint64_t kRelayMin = 64 * 1024;

bool send_all(int fd, const uint8_t* p, size_t n) {
  while (n > 0) {
    const ssize_t w = ::send(fd, p, n, MSG_NOSIGNAL);
    if (w < 0 && errno == EINTR) continue;
    if (w <= 0) return false;
    p += w;
    n -= static_cast<size_t>(w);
  }
  return true;
}

uint64_t get_u64(const uint8_t* p) {
  uint64_t v;
  std::memcpy(&v, p, 8);  // ggml RPC is little-endian on the wire (both ends are x86/ARM LE)
  return v;
}

class Session {
 public:
  Session(int head, int server, const RpcSpliceOptions& o) : head_(head), server_(server), o_(o) {}

  RpcSpliceResult run() {
    std::thread back([this] { server_to_head(); });
    head_to_server();
    back.join();
    result_.graph_computes = graph_computes_;
    result_.graph_recomputes = graph_recomputes_;
    return result_;
  }

 private:
  void fail(const std::string& why) {
    {
      std::lock_guard<std::mutex> lock(mutex_);
      if (result_.error.empty()) result_.error = why;
    }
    cut();
  }
  void cut() {
    ::shutdown(head_, SHUT_RDWR);
    ::shutdown(server_, SHUT_RDWR);
  }

  // A complete small SET_TENSOR frame. A marker passes unchanged (the RPC child loads it from the
  // cache: worker/cache_loader.h) once the cache is known to hold its weight; without that check
  // the child would stop, which is a much slower way to fail the head's load.
  bool small_set_tensor(const std::vector<uint8_t>& frame) {
    const size_t payload = frame.size() - 9;
    const uint8_t* p = frame.data() + 9;
    if (payload > kMarkerTail) {
      const size_t tensor_size = payload - kMarkerTail;
      if (auto m = parse_cached_marker(p + tensor_size + 9, kCachedMarkerSize)) {
        if (std::string why = check_cache(*m); !why.empty()) {
          fail(why);
          return false;
        }
        std::lock_guard<std::mutex> lock(mutex_);
        ++result_.cached_loads;
        result_.cached_bytes += m->bytes;
      }
    }
    if (payload > 9 + kReuseMarkerSize) {
      if (auto m = parse_reuse_marker(p + payload - kReuseMarkerSize, kReuseMarkerSize); m && m->op == ReuseOp::copy) {
        std::lock_guard<std::mutex> lock(mutex_);
        ++result_.input_copies;
        result_.input_bytes_not_sent += m->bytes;
      }
    }
    return send_all(server_, frame.data(), frame.size());
  }

  std::string check_cache(const CachedMarker& m) const {
    const std::string path = o_.cache_dir + "/" + hash_name(m.hash);
    struct stat st {};
    if (o_.cache_dir.empty())
      return "the head asked for cached weight " + hash_name(m.hash) + " but this worker has no --cache-dir";
    if (::stat(path.c_str(), &st) != 0 || static_cast<uint64_t>(st.st_size) != m.bytes) {
      return "the head asked for cached weight " + hash_name(m.hash) + " (" + format_bytes(m.bytes) +
             "), which is not in " + o_.cache_dir +
             " (evicted or removed since the head listed the cache); the head's load fails and is retried";
    }
    return "";
  }

  void head_to_server() {
    std::vector<uint8_t> buf(kBuffer);
    uint8_t hdr[9];
    size_t hdr_len = 0;
    uint64_t pass = 0;           // payload bytes of the current frame still to copy through
    std::vector<uint8_t> small;  // a small SET_TENSOR frame being collected
    uint64_t small_want = 0;
    for (;;) {
      // The rest of a large frame (a weight, a batch's hidden state) goes through the kernel.
      if (pass >= kRelayMin) {
        if (link::relay(head_, server_, pass, o_.from_head) < pass) return cut();
        pass = 0;
        continue;
      }
      const ssize_t r = ::recv(head_, buf.data(), buf.size(), 0);
      if (r < 0 && errno == EINTR) continue;
      if (r <= 0) break;
      if (o_.from_head != nullptr) o_.from_head->fetch_add(static_cast<uint64_t>(r), std::memory_order_relaxed);
      const uint8_t* p = buf.data();
      size_t n = static_cast<size_t>(r);
      while (n > 0) {
        if (pass > 0) {
          const size_t k = static_cast<size_t>(std::min<uint64_t>(pass, n));
          if (!send_all(server_, p, k)) return cut();
          pass -= k, p += k, n -= k;
        } else if (small_want > 0) {
          const size_t k = static_cast<size_t>(std::min<uint64_t>(small_want, n));
          small.insert(small.end(), p, p + k);
          small_want -= k, p += k, n -= k;
          if (small_want == 0 && !small_set_tensor(small)) return cut();
        } else {
          const size_t k = std::min(sizeof hdr - hdr_len, n);
          std::memcpy(hdr + hdr_len, p, k);
          hdr_len += k, p += k, n -= k;
          if (hdr_len < sizeof hdr) continue;
          hdr_len = 0;
          const uint64_t size = get_u64(hdr + 1);
          if (hdr[0] == kCmdGraphCompute) ++graph_computes_;
          if (hdr[0] == kCmdGraphRecompute) ++graph_recomputes_;
          if (hdr[0] == kCmdSetTensor && size <= kSmallFrame) {
            small.assign(hdr, hdr + sizeof hdr);
            small_want = size;
            if (size == 0 && !small_set_tensor(small)) return cut();
          } else {
            if (!send_all(server_, hdr, sizeof hdr)) return cut();
            pass = size;
          }
        }
      }
    }
    cut();  // ggml's RPC protocol has no half-closed state
  }

  void server_to_head() {
    link::relay(server_, head_, std::numeric_limits<uint64_t>::max(), o_.to_head);
    cut();
  }

  const int head_, server_;
  const RpcSpliceOptions& o_;
  uint64_t graph_computes_ = 0, graph_recomputes_ = 0;  // head_to_server's thread only
  std::mutex mutex_;
  RpcSpliceResult result_;
};

}  // namespace

RpcSpliceResult rpc_splice(int head_fd, int server_fd, const RpcSpliceOptions& options) {
  return Session(head_fd, server_fd, options).run();
}

}  // namespace tandem::worker
