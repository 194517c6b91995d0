// The scheduler's copies of a step's inputs into the head's own GPUs, queued instead of waited
// for one by one, and each distinct input copied from host memory once per split.
//
// Before a split runs on a GPU, ggml's scheduler copies each of its inputs from host memory, one
// `ggml_backend_tensor_copy` at a time: from pageable memory, waiting for the device each time.
// MiniMax-M3's sparse attention reads the step's position mask, block bias and position map through
// a view per layer, so a decode step makes ~4 such copies per layer (30 layers: ~120 waits, ~0.9 ms
// a token on an H200), and a 512-token chunk of a long prompt copies its mask (512 × positions × 4
// bytes) once per layer. While a `LocalInputCopies` lives, the engine's interposer of that copy
// (datapath/sched_hooks.h) hands such copies here: the first copy of an input in a split is staged
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

#include <cstdint>

#include "datapath/input_reuse.h"

struct ggml_tensor;
struct ggml_backend;

namespace tandem::datapath {

class LocalInputCopies {
 public:
  // Turns the queue on for this process; at most one lives at a time (a second one does nothing).
  // `slot_bytes` > 0 (`tandem engine`'s default: input_slot_bytes; off with --no-local-input-slots):
  // the scheduler's copies are pointed at one copy per run of each input in a buffer of that size
  // per GPU (counted by the planner) instead of being written, so that a repeat costs nothing on
  // the device; an input that does not fit is copied as without. The slots go with this object,
  // so it must outlive the scheduler whose copies point at them.
  explicit LocalInputCopies(uint64_t slot_bytes = 0);
  // Waits for what is queued, then turns it off and frees the streams and page-locked memory.
  ~LocalInputCopies();
  LocalInputCopies(const LocalInputCopies&) = delete;
  LocalInputCopies& operator=(const LocalInputCopies&) = delete;

  // Copies queued from page-locked memory, copies made on the device from an earlier copy of the
  // same input, and the host-to-device bytes those spared (all instances, for tests and diagnostics).
  static uint64_t staged();
  static uint64_t repeated();
  static uint64_t bytes_not_copied();
  // Results of RPC servers read at the launch of the split that reads them; of those, the ones
  // copied on the device from an earlier read of the same result in the same run, and the bytes
  // that spared reading from the servers.
  static uint64_t deferred();
  static uint64_t results_repeated();
  static uint64_t result_bytes_not_read();

 private:
  bool active_ = false;
};

// For the copy interposer: places the copy of host tensor `src` into `dst` when a queue is on and
// `dst` is in a GPU's memory, and returns true; false leaves it to ggml. `id` (may be null): what
// the scheduler is copying, for recognising a repeat.
bool copy_local_input(const ggml_tensor* src, ggml_tensor* dst, const ReuseTable::Identity* id);

// For the copy interposer: defers the copy of `src`, which an RPC server holds, into `dst` in a GPU's
// memory until the split that reads it launches, and returns true; false leaves it to ggml.
bool defer_worker_result(const ggml_tensor* src, ggml_tensor* dst);
// Seconds spent reading deferred results at launch, mostly waiting for the servers to finish.
double deferred_result_s();

// For the scheduler interposers: a new run starts (the queues' page-locked memory is free again);
// the scheduler launches a split's graph on `backend`, whose device must first have what was
// queued for it.
void local_inputs_new_run();
void local_inputs_before_launch(ggml_backend* backend);

}  // namespace tandem::datapath
