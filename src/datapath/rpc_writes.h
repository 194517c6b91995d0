// Writes into a worker's compute buffers without waiting on each one.
//
// Every decode step, ggml's scheduler copies the step's inputs into each RPC server's compute
// buffer (token embeddings or the hidden state, positions, masks, and for MiniMax-M3's sparse
// attention three small inputs once per layer: ~100 writes per token for 30 layers). ggml's RPC
// client makes each such `ggml_backend_tensor_set` wait until its dispatcher thread has written
// it to the socket, two thread hand-offs per write; its asynchronous path queues the same bytes
// on the same connection, in the same order, and returns. While an `AsyncRpcWrites` lives, the
// engine's tensor-set interposer (datapath/interpose.h) sends writes into RPC buffers that do
// not hold weights through that asynchronous path. The data is copied when queued, so callers may
// reuse it at once, and everything later on that connection (the graph, reading results) still
// comes after it. To a tandem worker, a step's inputs that repeat (the same bytes once per layer)
// go over the link once (datapath/input_reuse.h).
#pragma once

#include <set>
#include <string>

#include "datapath/input_reuse.h"

struct ggml_tensor;
struct ggml_backend;
struct ggml_cgraph;

namespace tandem::datapath {

class AsyncRpcWrites {
 public:
  // Installs the interposer's hook; at most one lives at a time (a second one installs nothing,
  // as does a build that does not interpose ggml_backend_tensor_set). `reuse_endpoints`: the RPC
  // endpoints ("host:port") that reach a tandem worker of this build, which take input-reuse
  // markers; never a stock RPC server. `slot_bytes`: the input slots' size on each server
  // (input_slot_bytes; 0: none), see redirect_rpc_input. `runs_endpoints`: tandem workers of this
  // build too, to which a step input that is mostly runs of one value goes as runs
  // (link/protocol.h), in a slot or not.
  explicit AsyncRpcWrites(std::set<std::string> reuse_endpoints = {}, uint64_t slot_bytes = 0,
                          std::set<std::string> runs_endpoints = {});
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
  // Step inputs a server read from a slot of the head's instead of its own copy, and the bytes of
  // those that repeated in a step and were not sent again (redirect_rpc_input).
  static unsigned long long slotted_inputs();
  static unsigned long long slot_bytes_not_sent();
  // Copies from one RPC server into another served from the head's copy of the same result, read
  // earlier in the run, and the bytes that spared reading (relay_rpc_result).
  static unsigned long long relayed_results();
  static unsigned long long relayed_bytes_not_read();
  // Step inputs sent as runs, and the bytes that spared the link.
  static unsigned long long run_inputs();
  static unsigned long long run_bytes_not_sent();

 private:
  bool active_ = false;
};

// Input slots (on unless `tandem engine --no-worker-input-slots`): the scheduler's copy of a step's
// input into an RPC server, `dst`, is pointed at one copy per step of those bytes in a buffer the
// head allocated on that server (the AsyncRpcWrites' `slot_bytes`, counted by the planner) instead
// of being written: an input the scheduler copies once per layer crosses the link once and costs the
// server no message and no copy for the other layers, whatever server it is. Offsets follow the
// order of the copies in a run, so a graph gets the same addresses in every run, as a graph the
// server keeps and runs again needs; inputs beyond the buffer take the usual path, in every run
// alike. The buffer goes with the AsyncRpcWrites, which must outlive the scheduler whose copies
// point at it. For the copy interposer: true when it placed the copy.
bool redirect_rpc_input(const ggml_tensor* src, ggml_tensor* dst, const ReuseTable::Identity* id);
// For the copy interposer, while an AsyncRpcWrites lives: the scheduler's copy of `src`, which one
// RPC server computed, into `dst` on another, in the run `epoch`. ggml reads the bytes to the head
// and writes them on, once per copy; MiniMax-M3's sparse layers each copy a view of one mask the
// first of them made, so the second worker got 512 × positions × 4 bytes per layer and prompt
// chunk, each read from the first. Here the bytes are read once per run and go on as a step input
// (an input slot, or a write that a repeat turns into a marker). False leaves the copy to ggml
// (the same server, no AsyncRpcWrites).
bool relay_rpc_result(const ggml_tensor* src, ggml_tensor* dst, uint64_t epoch);

// For the launch interposer: stops the process, saying why, if a split's graph on `backend` holds a
// view of a redirected copy (ggml's scheduler makes none: a view follows its source's device), which
// would read where nothing was written.
void check_rpc_launch(ggml_backend* backend, ggml_cgraph* graph);

}  // namespace tandem::datapath
