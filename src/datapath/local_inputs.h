// The scheduler's copies of a step's inputs into the head's own GPUs, queued instead of waited
// for one by one, and each distinct input copied from host memory once per split.
//
// Before a split runs on a GPU, ggml's scheduler copies each of its inputs from host memory, one
// `ggml_backend_tensor_copy` at a time: from pageable memory, waiting for the device each time.
// MiniMax-M3's sparse attention reads the step's position mask, block bias and position map through
// a view per layer, so a decode step makes ~4 such copies per layer (30 layers: ~120 waits, ~0.9 ms
// a token on an H200), and a 512-token chunk of a long prompt copies its mask (512 × positions × 4
// bytes) once per layer. When the head's session has them on, its interposer of that copy
// (datapath/head_session.h) hands such copies here: the first copy of an input in a split is staged
// in page-locked memory and queued on a stream of tandem's own; a later copy of the same input
// (the same host tensor at the same offset, in the same run of the scheduler) is a device-to-device
// copy from the first, queued behind it. When the scheduler launches the split, the device's
// stream waits for the queue (an event: the host does not wait).
//
// The split's inputs that an RPC server computed (the hidden state after the worker's layers) are
// read when the split launches, not in the scheduler's order of inputs, where they come first and
// wait for the worker: the split's other inputs are copied while the worker computes. A result
// read once per layer (a mask the worker's first sparse layer made, which every sparse layer reads
// through a view) crosses the link once per run and is copied on the device for the other layers.
//
// The queues serve the scheduler of one thread at a time, as the engine runs it; launches from
// other threads (an RPC server inside the engine) are left alone.
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <mutex>
#include <unordered_map>
#include <vector>

#include "datapath/device_stream.h"
#include "datapath/input_reuse.h"

struct ggml_tensor;
struct ggml_backend;
struct ggml_backend_buffer;
struct ggml_backend_buffer_type;
struct ggml_backend_device;

namespace tandem::datapath {

// What the queues did: copies queued from page-locked memory, copies made on the device from an
// earlier copy of the same input, and the host-to-device bytes those spared; results of RPC servers
// read at the launch of the split that reads them, of those the ones copied on the device from an
// earlier read of the same result in the same run, the bytes that spared reading from the servers,
// and the seconds spent reading them (mostly waiting for the servers to finish).
struct LocalInputStats {
  uint64_t staged = 0, repeated = 0, bytes_not_copied = 0;
  uint64_t deferred = 0, results_repeated = 0, result_bytes_not_read = 0;
  double deferred_s = 0;
};

// One head session's queues (datapath/head_session.h).
class LocalInputs {
 public:
  // `slot_bytes` > 0 (`tandem engine`'s default: input_slot_bytes; off with --no-local-input-slots):
  // the scheduler's copies are pointed at one copy per run of each input in a buffer of that size
  // per GPU (counted by the planner) instead of being written, so that a repeat costs nothing on
  // the device; an input that does not fit is copied as without. The slots go with this object,
  // so it must outlive the scheduler whose copies point at them.
  explicit LocalInputs(uint64_t slot_bytes = 0);
  // Waits for what is queued, then frees the streams, slots and page-locked memory.
  ~LocalInputs();
  LocalInputs(const LocalInputs&) = delete;
  LocalInputs& operator=(const LocalInputs&) = delete;

  // Places the copy of host tensor `src` into `dst` when `dst` is in a GPU's memory, and returns
  // true; false leaves it to ggml. `id` (may be null): what the scheduler is copying, for
  // recognising a repeat.
  bool copy(const ggml_tensor* src, ggml_tensor* dst, const ReuseTable::Identity* id);
  // Defers the copy of `src`, which an RPC server holds, into `dst` in a GPU's memory until the
  // split that reads it launches, and returns true; false leaves it to ggml.
  bool defer_worker_result(const ggml_tensor* src, ggml_tensor* dst);
  // A new run starts (the queues' page-locked memory is free again).
  void new_run();
  // The scheduler launches a split's graph on `backend`, whose device must first have what was
  // queued for it.
  void before_launch(ggml_backend* backend);

  LocalInputStats stats() const;

 private:
  struct First {
    ggml_backend_buffer* buffer;
    void* data;
  };
  // A result of an RPC server to read when the split launches (`src` lives until then: same run).
  struct Deferred;
  struct Queue;

  static uint8_t* stage(Queue& q, size_t n);
  Queue* queue_for(ggml_backend_buffer* buf);
  void read_deferred(Queue& q);
  void hand_over(Queue& q, ggml_backend* backend);
  bool place_in_slot(Queue& q, ggml_backend_buffer* buf, const ggml_tensor* src, ggml_tensor* dst, const CopyKey& key);

  const uint64_t slot_bytes_;  // 0: no slots
  std::mutex mutex_;
  std::unordered_map<ggml_backend_buffer_type*, std::unique_ptr<Queue>> queues_;  // guarded by mutex_
  std::atomic<uint64_t> staged_{0}, repeated_{0}, bytes_not_copied_{0}, deferred_{0}, deferred_ns_{0};
  std::atomic<uint64_t> results_repeated_{0}, result_bytes_not_read_{0};
};

}  // namespace tandem::datapath
