// The byte splice of an `rpc` connection: copies both ways between two connected sockets until
// either side closes or fails, counting bytes.
#pragma once

#include <atomic>
#include <cstdint>

namespace tandem::link {

// Blocks until both directions have ended; either side closing (or an error) ends both: the
// sockets are shut down, not closed (the caller owns them). To cut a splice from another thread,
// call ::shutdown(fd, SHUT_RDWR) on either socket. Counters (may be null) are added to as bytes
// are written. Uses one extra thread for the second direction.
//
// The reads wait without a deadline on purpose: an RPC session may sit idle for hours. Liveness
// is the heartbeat's job (forwarder.h) and TCP keepalive's on the worker (socket.h).
void splice(int a, int b, std::atomic<uint64_t>* a_to_b, std::atomic<uint64_t>* b_to_a);

// How relay() moves bytes: through the kernel (splice(2) over a pipe, with no copy into this
// process and back) or through a buffer here. The kernel path falls back to the buffer by itself
// where a socket does not support splice(2).
enum class RelayPath { kernel, buffer };

// Moves bytes from socket `from` to socket `to` until `from` ends, either side fails, or `limit`
// bytes have been moved; never reads past `limit`. Blocking sockets only. Adds the bytes written
// to `counter` (may be null) as it goes. Returns the bytes moved: fewer than `limit` means a side
// ended or failed. Shuts neither socket down.
uint64_t relay(int from, int to, uint64_t limit, std::atomic<uint64_t>* counter, RelayPath path = RelayPath::kernel);

}  // namespace tandem::link
