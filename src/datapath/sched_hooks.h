// tandem-engine's view of ggml's scheduler at work, through the scheduler hooks of
// datapath/interpose.h: `ggml_backend_sched_graph_compute_async`, which libllama calls once per
// ubatch; `ggml_backend_tensor_copy`, through which the scheduler moves each split's inputs between
// devices; and, while a run lasts, `ggml_backend_graph_compute_async` (each split's launch) and
// `ggml_backend_synchronize`. They tell the input reuse (datapath/input_reuse.h) what a write is,
// hand the copies into the head's own GPUs to datapath/local_inputs.h, and say where a split's time
// goes.
#pragma once

#include <cstdint>

#include "common/status.h"
#include "datapath/input_reuse.h"

namespace tandem::datapath {

// Proves that ggml's calls reach tandem's definitions (datapath/self_check.h), once per process,
// then installs the scheduler hooks. Every engine load calls it; an error (the proof failed) means
// the engine must not start.
Status install_scheduler_hooks();

// While the scheduler copies a tensor out of host memory: which tensor, at which address, in which
// of its runs (nothing rewrites a run's inputs during the run). nullptr otherwise, or before the
// first run was seen. The calling thread's own copy only.
const ReuseTable::Identity* scheduler_copy_identity();

// True while the calling thread is inside a run of the scheduler.
bool in_scheduler_run();

// Where the scheduler's time went, summed over the process (seconds). `run_s` is spent inside
// its runs: launching splits, and, on the way, copying their inputs into RPC servers (`to_workers_s`:
// serialising and queueing, or the reuse markers), out of them (`from_workers_s`: mostly waiting for
// the worker's compute) and from host memory into local devices (`to_local_s`). Of the rest,
// `launch_s` is inside the `launches` of splits' graphs (for a GPU: checking and launching its
// CUDA graph; for an RPC server: sending the graph, or asking for it again) and `sync_s` in waits
// for a device (the scheduler waits before each input copy). The last split's device work runs
// after the run returns and is not in it.
struct SplitProfile {
  uint64_t runs = 0, launches = 0;
  double run_s = 0, to_workers_s = 0, from_workers_s = 0, to_local_s = 0, launch_s = 0, sync_s = 0;
};
SplitProfile split_profile();
SplitProfile operator-(const SplitProfile& a, const SplitProfile& b);

// When on, each run of the scheduler waits for every device before returning, so that no two runs'
// device work overlaps (libllama otherwise leaves the last split running, and under pipeline
// parallelism the next run's first splits start meanwhile). For measurement only.
void set_serial_runs(bool on);

}  // namespace tandem::datapath
