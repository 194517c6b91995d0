// The head's data path for one loaded model: every mechanism tandem-engine puts between ggml's
// scheduler and the devices, built from the placement's switches and owning all their state.
//
// While a session lives it is the scheduler hooks of datapath/interpose.h: it sees
// `ggml_backend_sched_graph_compute_async`, which libllama calls once per ubatch;
// `ggml_backend_tensor_copy`, through which the scheduler moves each split's inputs between
// devices; `ggml_backend_tensor_set`, through which those copies reach RPC servers;
// `ggml_backend_tensor_copy_async`, through which a tensor split reduces; `ggml_arange`, whose
// tensors the FFN split's graphs anchor; and, while a run lasts,
// `ggml_backend_graph_compute_async` (each split's launch) and `ggml_backend_synchronize`. It tells
// the input reuse (datapath/input_reuse.h) what a write is, offers each of the scheduler's copies to
// the mechanisms the copy policy lists for it (datapath/copy_policy.h), queues the writes to workers
// (datapath/rpc_writes.h), hands the copies into the head's own GPUs to datapath/local_inputs.h,
// makes a worker's cast of a step input itself (datapath/local_casts.h), overlaps a tensor split's
// reductions (datapath/reduce_copies.h), and says where a split's time goes. One session per
// process at a time: ggml's functions carry no context, so the hook table that finds it is the
// process's (datapath/interpose.h).
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <set>
#include <string>

#include "common/status.h"
#include "datapath/copy_policy.h"
#include "datapath/interpose.h"
#include "datapath/local_casts.h"
#include "datapath/local_inputs.h"
#include "datapath/reduce_copies.h"
#include "datapath/rpc_writes.h"

namespace tandem::datapath {

// Where the scheduler's time went (seconds). `run_s` is spent inside its runs: launching splits,
// and, on the way, copying their inputs into RPC servers (`to_workers_s`: serialising and queueing,
// or the reuse markers), out of them (`from_workers_s`: mostly waiting for the worker's compute) and
// from host memory into local devices (`to_local_s`). Of the rest, `launch_s` is inside the
// `launches` of splits' graphs (for a GPU: checking and launching its CUDA graph; for an RPC
// server: sending the graph, or asking for it again) and `sync_s` in waits for a device (the
// scheduler waits before each input copy). The last split's device work runs after the run returns
// and is not in it.
struct SplitProfile {
  uint64_t runs = 0, launches = 0;
  double run_s = 0, to_workers_s = 0, from_workers_s = 0, to_local_s = 0, launch_s = 0, sync_s = 0;
};
SplitProfile operator-(const SplitProfile& a, const SplitProfile& b);

// Which mechanisms a session runs (engine::head_options makes these from a placement).
struct HeadOptions {
  // Step inputs to RPC servers queued, not waited on (RpcWrites), with its endpoints and slots.
  bool async_rpc_writes = false;
  std::set<std::string> reuse_endpoints, runs_endpoints;
  uint64_t worker_slot_bytes = 0;
  // The head's GPUs get their inputs queued (LocalInputs), from slots of this size (0: none).
  bool queue_local_inputs = false;
  uint64_t local_slot_bytes = 0;
  bool local_casts = true;         // a worker's f32 cast of a step input made here (LocalCasts)
  bool serial_runs = false;        // each run waits for every device before returning (measurement)
  bool overlapped_reduce = false;  // a tensor split's reductions overlapped (ReduceCopies)
  // The FFN tensor split (engine/ffn_device.h): ggml's meta device derives each operation's split
  // from its sources and aborts on one that has none, ggml_arange, which minimax-m3's sparse
  // attention builds its gather positions with. With this on, each arange the model's graphs make
  // while the session is open gets a one-element source that is never read, a leaf like every
  // input, so the meta device runs it whole on every device.
  bool anchor_arange = false;
};

// What the session's mechanisms did since it opened.
struct HeadStats {
  SplitProfile profile;
  RpcWriteStats rpc;      // zero without async_rpc_writes
  LocalInputStats local;  // zero without queue_local_inputs
  uint64_t local_casts = 0, local_cast_bytes = 0;
  uint64_t overlapped_reduce_copies = 0;
};

class HeadSession final : public SchedulerHooks {
 public:
  // Proves that ggml's calls reach tandem's definitions (datapath/self_check.h, once per process),
  // then installs the session as the process's scheduler hooks. Errors: the proof failed (the
  // engine must not start), or another session is open in this process.
  static Result<std::unique_ptr<HeadSession>> open(const HeadOptions& options);
  // Uninstalls the hooks, then lets each mechanism finish what it queued and free what it holds.
  // Whatever scheduler's copies point at its slots must be gone first.
  ~HeadSession();
  HeadSession(const HeadSession&) = delete;
  HeadSession& operator=(const HeadSession&) = delete;

  // Any thread.
  HeadStats stats() const;

  // SchedulerHooks (datapath/interpose.h), for the interposers.
  enum ggml_status run(ggml_backend_sched_t sched, ggml_cgraph* graph, SchedComputeFn real) override;
  enum ggml_status launch(ggml_backend_t backend, ggml_cgraph* graph, LaunchFn real) override;
  void synchronize(ggml_backend_t backend, SynchronizeFn real) override;
  void copy(const ggml_tensor* src, ggml_tensor* dst, TensorCopyFn real) override;
  void copy_async(ggml_backend_t backend_src, ggml_backend_t backend_dst, const ggml_tensor* src, ggml_tensor* dst,
                  CopyAsyncFn real) override;
  bool tensor_set(ggml_tensor* tensor, const void* data, size_t offset, size_t size) override;
  void made_arange(ggml_context* ctx, ggml_tensor* tensor) override;

 private:
  explicit HeadSession(const HeadOptions& options);
  // True while the calling thread is inside this session's run of the scheduler: its copies are
  // split inputs, its launches splits (not an RPC server's inside this process).
  bool in_run() const;
  // Offers the scheduler's copy of `src` into `dst` in run `epoch`, with `facts`, to `route`'s
  // mechanism (datapath/copy_policy.h); true when it placed the copy. `input`: which step input a
  // copy from host memory is (may be null).
  bool take(CopyRoute route, const CopyFacts& facts, const ggml_tensor* src, ggml_tensor* dst, uint64_t epoch,
            const ReuseTable::Identity* input, TensorCopyFn real);

  const HeadOptions options_;
  std::unique_ptr<RpcWrites> rpc_;      // with async_rpc_writes
  std::unique_ptr<LocalInputs> local_;  // with queue_local_inputs
  LocalCasts casts_;                    // the scheduler's thread only
  ReduceCopies reduce_;
  // Runs of ggml's scheduler (one per ubatch). 0 until the first: identities are then not used.
  std::atomic<uint64_t> epoch_{0};
  std::atomic<uint64_t> runs_{0}, run_ns_{0}, to_workers_ns_{0}, from_workers_ns_{0}, to_local_ns_{0};
  std::atomic<uint64_t> launches_{0}, launch_ns_{0}, sync_ns_{0};
};

}  // namespace tandem::datapath
