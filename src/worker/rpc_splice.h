// The worker's half of an `rpc` session: copies ggml RPC traffic between the head's link
// connection and the local RPC server, as link::splice does, but reading the head's requests frame
// by frame, so that it can check the engine's cached-weight markers (link/protocol.h)
// against the cache before the RPC child loads them (worker/cache_loader.h), and count what the
// session did. The link carries 32 bytes per cached weight.
//
// Framing (ggml RPC as pinned): a request is cmd (1 byte), size (u64), payload; answers pass
// through untouched.
#pragma once

#include <atomic>
#include <cstdint>
#include <string>

namespace tandem::worker {

struct RpcSpliceOptions {
  std::string cache_dir;                       // the RPC server's cache folder ("" = none)
  std::atomic<uint64_t>* from_head = nullptr;  // bytes read from the head (may be null)
  std::atomic<uint64_t>* to_head = nullptr;    // bytes written to the head (may be null)
};

struct RpcSpliceResult {
  uint64_t cached_loads = 0;  // markers passed to the RPC server to load from the cache
  uint64_t cached_bytes = 0;  // weight bytes they stood for
  // Graph requests from the head: a full graph, or "run the last graph again". A decode that
  // keeps sending whole graphs defeats the worker's CUDA graphs (its nodes are new every time).
  uint64_t graph_computes = 0;
  uint64_t graph_recomputes = 0;
  // Step inputs the head sent as copy markers (datapath/input_reuse.h), and the bytes they stood for.
  uint64_t input_copies = 0;
  uint64_t input_bytes_not_sent = 0;
  std::string error;  // why the splice cut the session itself ("" when a peer ended it)
};

// Runs until either side ends or fails; then both sockets are shut down (not closed). A marker
// for a weight that is not (or no longer) in the cache cuts the session with an error saying so:
// the head's load then fails and is retried with a fresh cache listing.
RpcSpliceResult rpc_splice(int head_fd, int server_fd, const RpcSpliceOptions& options);

}  // namespace tandem::worker
