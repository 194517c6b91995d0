// Writes into a worker's compute buffers without waiting on each one.
//
// Every decode step, ggml's scheduler copies the step's inputs into each RPC server's compute
// buffer (token embeddings or the hidden state, positions, masks, and for MiniMax-M3's sparse
// attention three small inputs once per layer: ~100 writes per token for 30 layers). ggml's RPC
// client makes each such `ggml_backend_tensor_set` wait until its dispatcher thread has written
// it to the socket, two thread hand-offs per write; its asynchronous path queues the same bytes
// on the same connection, in the same order, and returns. While an `AsyncRpcWrites` lives, the
// engine's tensor-set interposer (common/tensor_set_hook.h) sends writes into RPC buffers that do
// not hold weights through that asynchronous path. The data is copied when queued, so callers may
// reuse it at once, and everything later on that connection (the graph, reading results) still
// comes after it. To a tandem worker, a step's inputs that repeat (the same bytes once per layer)
// go over the link once (common/input_reuse.h).
#pragma once

#include <set>
#include <string>

namespace tandem::engine {

class AsyncRpcWrites {
 public:
  // Installs the interposer's hook; at most one lives at a time (a second one installs nothing,
  // as does a build that does not interpose ggml_backend_tensor_set). `reuse_endpoints`: the RPC
  // endpoints ("host:port") that reach a tandem worker of this build, which take input-reuse
  // markers; never a stock RPC server.
  explicit AsyncRpcWrites(std::set<std::string> reuse_endpoints = {});
  // Uninstalls it and frees the backend handles it opened on the RPC connections.
  ~AsyncRpcWrites();
  AsyncRpcWrites(const AsyncRpcWrites&) = delete;
  AsyncRpcWrites& operator=(const AsyncRpcWrites&) = delete;

  // Writes that took the asynchronous path so far (all instances, for tests and diagnostics).
  static unsigned long long writes();
  // Of those, the writes sent as a copy marker instead of their bytes, and the bytes they spared
  // the link.
  static unsigned long long reused_writes();
  // Of those, the ones recognised without comparing bytes: a copy of the same host tensor within
  // one run of ggml's scheduler, which nothing rewrites during the run.
  static unsigned long long identified_writes();
  static unsigned long long bytes_not_sent();

 private:
  bool active_ = false;
};

}  // namespace tandem::engine
