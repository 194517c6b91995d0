// Writes into a worker's compute buffers without waiting on each one.
//
// Every decode step, ggml's scheduler copies the step's inputs into each RPC server's compute
// buffer (token embeddings or the hidden state, positions, masks, and for MiniMax-M3's sparse
// attention three small inputs once per layer: ~100 writes per token for 30 layers). ggml's RPC
// client makes each such `ggml_backend_tensor_set` wait until its dispatcher thread has written
// it to the socket, two thread hand-offs per write; its asynchronous path queues the same bytes
// on the same connection, in the same order, and returns. When the head's session has them on
// (datapath/head_session.h), its tensor-set hook sends writes into RPC buffers that do not hold
// weights through that asynchronous path. The data is copied when queued, so callers may
// reuse it at once, and everything later on that connection (the graph, reading results) still
// comes after it. To a tandem worker, a step's inputs that repeat (the same bytes once per layer)
// go over the link once (datapath/input_reuse.h).
#pragma once

#include <atomic>
#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include "datapath/input_reuse.h"

struct ggml_tensor;
struct ggml_backend;
struct ggml_backend_buffer;
struct ggml_backend_device;
struct ggml_cgraph;

namespace tandem::datapath {

// What the writes did. `writes`: writes that took the asynchronous path. Of those, the writes sent
// as a copy marker instead of their bytes (`reused_writes`), the ones recognised without comparing
// bytes (`identified_writes`: a copy of the same host tensor within one run of ggml's scheduler,
// which nothing rewrites during the run) and the bytes they spared the link. Step inputs a server
// read from a slot of the head's instead of its own copy, and the bytes of those that repeated in a
// step and were not sent again (redirect_input). Copies from one RPC server into another served
// from the head's copy of the same result, read earlier in the run, and the bytes that spared
// reading (relay_result). Step inputs sent as runs, and the bytes that spared the link.
struct RpcWriteStats {
  uint64_t writes = 0, reused_writes = 0, identified_writes = 0, bytes_not_sent = 0;
  uint64_t slotted_inputs = 0, slot_bytes_not_sent = 0;
  uint64_t relayed_results = 0, relayed_bytes_not_read = 0;
  uint64_t run_inputs = 0, run_bytes_not_sent = 0;
};

// One head session's writes into its RPC servers (datapath/head_session.h).
class RpcWrites {
 public:
  // `reuse_endpoints`: the RPC endpoints ("host:port") that reach a tandem worker of this build,
  // which take input-reuse markers; never a stock RPC server. `slot_bytes`: the input slots' size on
  // each server (input_slot_bytes; 0: none), see redirect_input. `runs_endpoints`: tandem workers of
  // this build too, to which a step input that is mostly runs of one value goes as runs
  // (link/protocol.h), in a slot or not.
  RpcWrites(std::set<std::string> reuse_endpoints, uint64_t slot_bytes, std::set<std::string> runs_endpoints);
  // Waits until what was queued reached the servers, then frees the slots and the backend handles it
  // opened on the RPC connections.
  ~RpcWrites();
  RpcWrites(const RpcWrites&) = delete;
  RpcWrites& operator=(const RpcWrites&) = delete;

  // For the tensor-set hook: queues a write into an RPC buffer that holds no weights and returns
  // true; false leaves it to ggml. `id` (may be null): the scheduler's copy this write is, for
  // recognising a repeat without comparing bytes.
  bool write(ggml_tensor* tensor, const void* data, size_t offset, size_t size, const ReuseTable::Identity* id);

  // Input slots (on unless `tandem engine --no-worker-input-slots`): the scheduler's copy of a
  // step's input into an RPC server, `dst`, is pointed at one copy per step of those bytes in a
  // buffer the head allocated on that server (`slot_bytes`, counted by the planner) instead of being
  // written: an input the scheduler copies once per layer crosses the link once and costs the
  // server no message and no copy for the other layers, whatever server it is. Offsets follow the
  // order of the copies in a run, so a graph gets the same addresses in every run, as a graph the
  // server keeps and runs again needs; inputs beyond the buffer take the usual path, in every run
  // alike. The buffer goes with this object, which must outlive the scheduler whose copies point at
  // it. True when it placed the copy.
  bool redirect_input(const ggml_tensor* src, ggml_tensor* dst, const ReuseTable::Identity* id);
  // The scheduler's copy of `src`, which one RPC server computed, into `dst` on another, in the run
  // `epoch`. ggml reads the bytes to the head and writes them on, once per copy; MiniMax-M3's sparse
  // layers each copy a view of one mask the first of them made, so the second worker got 512 ×
  // positions × 4 bytes per layer and prompt chunk, each read from the first. Here the bytes are
  // read once per run and go on as a step input (an input slot, or a write that a repeat turns into
  // a marker). False leaves the copy to ggml (the same server). The scheduler's thread only.
  bool relay_result(const ggml_tensor* src, ggml_tensor* dst, uint64_t epoch);

  // For the launch interposer: stops the process, saying why, if a split's graph on `backend` holds
  // a view of a redirected copy (ggml's scheduler makes none: a view follows its source's device),
  // which would read where nothing was written.
  void check_launch(ggml_backend* backend, ggml_cgraph* graph);

  RpcWriteStats stats() const;

 private:
  struct Connection;
  Connection* connection_of(ggml_backend_buffer* buf);
  void send_input(Connection& c, ggml_tensor* tensor, const void* data, size_t offset, size_t size);

  const std::set<std::string> reuse_endpoints_, runs_endpoints_;
  const uint64_t slot_bytes_;  // 0: no input slots
  std::mutex mutex_;
  std::unordered_map<ggml_backend_device*, std::unique_ptr<Connection>> connections_;  // guarded by mutex_
  std::atomic<uint64_t> writes_{0}, copies_{0}, identified_{0}, bytes_not_sent_{0};
  std::atomic<uint64_t> slotted_{0}, slot_bytes_not_sent_{0};
  std::atomic<uint64_t> relayed_{0}, relayed_bytes_not_read_{0}, run_inputs_{0}, run_bytes_not_sent_{0};
  // relay_result's copies of this run's results, by where they lie on their server.
  uint64_t relay_epoch_ = 0;
  std::unordered_map<CopyKey, std::unique_ptr<std::vector<uint8_t>>, CopyKeyHash> relayed_copies_;
};

}  // namespace tandem::datapath
