// Fuzz target: the link's wire input before authentication and on the control channel.
//
// The first byte picks what the rest is:
//   0  the bytes a client sends to a worker: the real server_handshake runs on a socket pair
//   1  the bytes a worker sends to a head: the real client_handshake
//   2  one message body for each parse function (header, HELLO, CHALLENGE, PROOF, VERDICT)
//   3  control-channel lines read by LineReader as JSON
// The peer's end is shut down after the input, so every read ends at once (no deadline is waited).
#include <sys/socket.h>
#include <unistd.h>

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <vector>

#include "link/control.h"
#include "link/protocol.h"

namespace {

using namespace tandem::link;

const Secret& secret() {
  static const Secret s(std::vector<uint8_t>(32, 0x5a));
  return s;
}

HandshakeOptions options() {
  HandshakeOptions o;
  o.name = "fuzz";
  o.llama_commit = std::string(40, 'a');
  o.step_timeout = std::chrono::milliseconds(200);
  return o;
}

// A connected pair with `input` already written to (and the write side closed on) the peer's end.
bool pair_with_input(const uint8_t* data, size_t size, int fds[2]) {
  if (::socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, fds) != 0) return false;
  int buf = 1 << 20;
  ::setsockopt(fds[1], SOL_SOCKET, SO_SNDBUF, &buf, sizeof buf);
  ::setsockopt(fds[0], SOL_SOCKET, SO_SNDBUF, &buf, sizeof buf);
  size_t done = 0;
  while (done < size) {
    const ssize_t w = ::send(fds[1], data + done, size - done, MSG_NOSIGNAL);
    if (w <= 0) break;
    done += static_cast<size_t>(w);
  }
  ::shutdown(fds[1], SHUT_WR);
  return true;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0 || size > 64 * 1024) return 0;
  const uint8_t mode = data[0] % 4;
  ++data;
  --size;
  if (mode == 2) {
    if (size >= kFrameHeaderSize) {
      uint8_t h[kFrameHeaderSize];
      std::memcpy(h, data, sizeof h);
      (void)parse_frame_header(h);
    }
    const std::vector<uint8_t> body(data, data + size);
    (void)parse_hello(body);
    (void)parse_challenge(body);
    (void)parse_proof(body);
    (void)parse_verdict(body);
    return 0;
  }
  int fds[2];
  if (!pair_with_input(data, size, fds)) return 0;
  if (mode == 0) {
    (void)server_handshake(fds[0], secret(), options(), [](const PeerInfo&) { return Verdict{}; });
  } else if (mode == 1) {
    (void)client_handshake(fds[0], secret(), Role::rpc, options(), "fuzz");
  } else {
    LineReader reader(fds[0]);
    for (int i = 0; i < 64; ++i) {
      if (!reader.read_json(deadline_in(std::chrono::milliseconds(200))).is_ok()) break;
    }
  }
  ::close(fds[0]);
  ::close(fds[1]);
  return 0;
}
