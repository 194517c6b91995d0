// Worker results the head makes itself instead of reading them over the link.
//
// MiniMax-M3's first sparse layer casts the step's attention mask (f16, positions × tokens) to f32
// once, and every later sparse layer reads a view of that cast. When a worker holds the first
// sparse layer and the head, or a second worker, holds later ones, the cast's bytes cross the link
// once per step: 8 MB for a 512-token chunk at 4096 positions, 64 MB at 32k. Yet the head holds
// the f16 mask they were made from: it is a step input, which the head sent to that worker. So the
// scheduler's copies of host inputs into workers are noted per run, and a read of a worker's f32
// cast of one is answered from the head's own f16 bytes, converted here (exact: every f16 value is
// an f32 value). The scheduler's thread only.
#pragma once

#include <cstdint>

#include "datapath/input_reuse.h"

struct ggml_tensor;

namespace tandem::datapath {

// The scheduler copies host tensor `src` into `dst`, in a worker's buffer, during run `epoch`.
void note_worker_input(const ggml_tensor* src, const ggml_tensor* dst, uint64_t epoch);

// When `src`, in a worker's buffer, is an f16 → f32 cast of a step input noted in run `epoch` (or a
// view of one), fills `*out` with a host tensor of src's layout holding the bytes a read of `src`
// would return, and `*id` with their identity for the input paths' reuse; the bytes stay valid
// until the next run. False, touching nothing, for anything else or when turned off.
bool make_worker_result_here(const ggml_tensor* src, uint64_t epoch, ggml_tensor* out, ReuseTable::Identity* id);

// On by default; off reads every worker result over the link (for measurement).
void set_local_casts(bool on);
// Worker results made here since the process started, and their bytes.
uint64_t local_casts();
uint64_t local_cast_bytes();

}  // namespace tandem::datapath
