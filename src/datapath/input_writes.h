// The RPC child's writes of each step's inputs, without a device synchronisation per write.
//
// Every decode step the head writes the step's inputs into the worker's compute buffers: for
// MiniMax-M3 with 30 layers here, ~100 writes of a few hundred bytes per token. ggml's RPC server
// passes each to `ggml_backend_tensor_set`, which for a GPU copies from pageable memory and waits
// for the device, one write after another. With the child's session open (datapath/rpc_child_session.h)
// its tensor-set hook (datapath/interpose.h) copies such a write (a buffer that holds no weights, on
// a GPU, up to 1 MiB) into page-locked memory and queues it on a stream of its own; whatever next
// reads or runs on the device through ggml (a graph, a read, a copy, a clear, a memset, a free)
// first waits for the queued writes, so everything the server does still sees them, in order.
//
// The same hook takes the head's input-reuse markers (datapath/input_reuse.h): "keep" copies the
// bytes just written into a slot of device memory, "copy" copies a slot into the destination,
// both on the device and in order with the queued writes. A marker that names a slot this process
// does not hold as the head says ends the process (ggml's server cannot fail a SET_TENSOR): the
// worker restarts its RPC server and the head's request fails rather than compute on wrong inputs.
#pragma once

#include <array>
#include <atomic>
#include <cstdint>
#include <mutex>
#include <unordered_map>

#include "datapath/device_stream.h"
#include "datapath/interpose.h"
#include "link/protocol.h"

namespace tandem::datapath {

// What this server did for the head since the last take_step_work: graphs it computed and the
// seconds inside them (the device's work, which ggml's server waits for, and launching it), and
// step inputs the hook placed (queued writes and reuse markers) with the seconds that took, of
// which `runs` came as runs (link/protocol.h) and were expanded here.
struct StepWork {
  uint64_t graphs = 0;
  double graph_s = 0;
  uint64_t writes = 0;
  double write_s = 0;
  uint64_t runs = 0;
};

// The exit status of an RPC child that got a reuse marker it could not serve.
inline constexpr int kInputReuseFailedExit = 4;

// One RPC child's input writes and reuse slots (datapath/rpc_child_session.h calls them).
class InputWrites {
 public:
  // `queue` false leaves the writes to ggml (one wait each) and handles only the markers.
  explicit InputWrites(bool queue = true) : queueing_(queue) {}
  // Waits for what is queued, then frees the slots and streams.
  ~InputWrites();
  InputWrites(const InputWrites&) = delete;
  InputWrites& operator=(const InputWrites&) = delete;

  // The tensor-set hook: true when it placed the write (queued it, or carried out a marker).
  bool place(ggml_tensor* tensor, const void* data, size_t offset, size_t size);
  // Waits until the queued writes are on the device. Cheap when none are queued.
  void flush();
  // The fence's graph: what was queued lands first, and the graph's time is counted.
  enum ggml_status run_graph(ggml_backend_t backend, ggml_cgraph* graph, LaunchFn real);

  // Writes that went through the queue, and copy markers served.
  uint64_t queued() const { return count_.load(); }
  uint64_t reuse_copies() const { return reuse_copies_.load(); }
  // The head session whose reuse slots this process holds (0: none yet). Async-signal-safe.
  uint64_t session() const { return session_.load(); }
  // Frees the reuse slots if they still belong to `session` (a later session's are kept).
  void release(uint64_t session);
  // What was done since the last call; resets the counts.
  StepWork take_step_work();

 private:
  // One per device buffer type (datapath/device_stream.h); its stream carries the queued copies.
  struct DeviceQueue {
    DeviceStream stream;  // no backend: writes to this buffer type are not queued
    size_t used = 0;
    bool pending = false;
  };
  // Input reuse (datapath/input_reuse.h): the slots of the head's current session, in device memory.
  struct Slot {
    ggml_backend_buffer_t buffer = nullptr;
    ggml_backend_buffer_type_t type = nullptr;
    uint64_t bytes = 0;  // what the last keep put there
  };

  bool place_write(ggml_tensor* tensor, const void* data, size_t offset, size_t size);
  void expand_runs(ggml_tensor* tensor, const void* data, size_t offset, size_t size, uint64_t expanded);
  void apply_marker(ggml_tensor* tensor, size_t offset, const link::ReuseMarker& m);
  DeviceQueue* queue_of(ggml_backend_buffer_type_t buft);
  void copy_bytes(ggml_tensor* src, ggml_tensor* dst);
  void free_slot(Slot& s);
  void flush_locked();

  const bool queueing_;
  // Recursive: freeing a buffer inside the lock passes through the fence.
  std::recursive_mutex mutex_;
  std::unordered_map<ggml_backend_buffer_type_t, DeviceQueue> queues_;  // guarded by mutex_
  std::array<Slot, link::kReuseSlots> slots_;                           // guarded by mutex_
  std::atomic<bool> pending_{false};
  std::atomic<uint64_t> session_{0};
  std::atomic<uint64_t> count_{0}, reuse_copies_{0};
  std::atomic<uint64_t> graphs_{0}, graph_ns_{0}, writes_{0}, write_ns_{0}, runs_expanded_{0};  // StepWork
};

}  // namespace tandem::datapath
