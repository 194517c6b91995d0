// The RPC child's writes of each step's inputs, without a device synchronisation per write.
//
// Every decode step the head writes the step's inputs into the worker's compute buffers: for
// MiniMax-M3 with 30 layers here, ~100 writes of a few hundred bytes per token. ggml's RPC server
// passes each to `ggml_backend_tensor_set`, which for a GPU copies from pageable memory and waits
// for the device, one write after another. With input writes installed, the child's tensor-set
// hook (datapath/interpose.h) copies such a write (a buffer that holds no weights, on a GPU,
// up to 1 MiB) into page-locked memory and queues it on a stream of its own; whatever next reads
// or runs on the device through ggml (a graph, a read, a copy, a clear, a memset, a free) first
// waits for the queued writes, so everything the server does still sees them, in order.
//
// The same hook takes the head's input-reuse markers (datapath/input_reuse.h): "keep" copies the
// bytes just written into a slot of device memory, "copy" copies a slot into the destination,
// both on the device and in order with the queued writes. A marker that names a slot this process
// does not hold as the head says ends the process (ggml's server cannot fail a SET_TENSOR): the
// worker restarts its RPC server and the head's request fails rather than compute on wrong inputs.
#pragma once

#include <cstdint>

#include "common/status.h"

namespace tandem::datapath {

// Installs the hook and the waits in front of ggml's device calls, for this process; `queue` false
// leaves the writes to ggml (one wait each) and handles only the reuse markers. Errors: this
// executable does not interpose `ggml_backend_tensor_set`.
Status install_input_writes(bool queue = true);

// Waits until the queued writes are on the device. Cheap when none are queued.
void flush_input_writes();

// Writes that went through the queue since the process started (tests and diagnostics).
uint64_t queued_input_writes();

// The head session whose reuse slots this process holds (0: none yet). Async-signal-safe.
uint64_t input_reuse_session();
// Frees the reuse slots if they still belong to `session` (a later session's are kept).
void release_input_reuse(uint64_t session);
// Copy markers served since the process started (tests and diagnostics).
uint64_t input_reuse_copies();

// What this server did for the head since the last call: graphs it computed and the seconds inside
// them (the device's work, which ggml's server waits for, and launching it), and step inputs the
// hook placed (queued writes and reuse markers) with the seconds that took, of which `runs` came
// as runs (link/protocol.h) and were expanded here. Resets the counts.
struct StepWork {
  uint64_t graphs = 0;
  double graph_s = 0;
  uint64_t writes = 0;
  double write_s = 0;
  uint64_t runs = 0;
};
StepWork take_step_work();

// The exit status of an RPC child that got a reuse marker it could not serve.
inline constexpr int kInputReuseFailedExit = 4;

}  // namespace tandem::datapath
