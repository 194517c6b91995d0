// The tensor splits' reductions through the head, overlapped.
//
// llama.cpp's meta device (both tensor splits: engine::Placement) adds the devices' partial sums
// by copying each device's part to the others: ggml_backend_tensor_copy_async, which to or from an
// RPC server waits for the source, waits for the destination, reads the source (over the link) and
// writes the destination, one copy after the other. With this on, tandem's definition of that
// function queues each copy's read at once and writes the destination just before that device
// next runs a graph or is synchronised: the reads of one reduction travel together, one wait on
// the link per reduction instead of two round trips per copy. Copies with no RPC device on either
// side are ggml's own.
#pragma once

#include "common/status.h"
#include "ggml-backend.h"

namespace tandem::datapath {

// Turns the overlapped copies on or off for the process (off: ggml's own copies). Turning them on
// fails when ggml's calls would not reach tandem's definition (a build problem).
Status set_overlapped_reduce_copies(bool on);

// Writes the copies queued for `backend` (their reads done first). The data path calls it before
// every graph launch and synchronisation of a device; harmless when none is queued.
void flush_reduce_copies(ggml_backend_t backend);

// Copies whose read was queued so far (for tests and the engine's JSON).
unsigned long long overlapped_copies();

}  // namespace tandem::datapath
