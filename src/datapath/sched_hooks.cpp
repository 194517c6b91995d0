#include "datapath/sched_hooks.h"

#include <atomic>

#include "common/step_trace.h"
#include "datapath/ggml_devices.h"
#include "datapath/interpose.h"
#include "datapath/local_casts.h"
#include "datapath/local_inputs.h"
#include "datapath/rpc_writes.h"
#include "datapath/self_check.h"
#include "ggml-backend.h"

namespace tandem::datapath {
namespace {

// Runs of ggml's scheduler (one per ubatch). 0 until the first: identities are then not used.
std::atomic<uint64_t> g_epoch{0};
thread_local const ReuseTable::Identity* t_identity = nullptr;
thread_local bool t_in_run = false;  // inside a run of the scheduler: its copies are split inputs

std::atomic<uint64_t> g_runs{0}, g_run_ns{0}, g_to_workers_ns{0}, g_from_workers_ns{0}, g_to_local_ns{0};
std::atomic<uint64_t> g_launches{0}, g_launch_ns{0}, g_sync_ns{0};
std::atomic<bool> g_serial{false};

// The trace's clock, so that its lines and these sums agree.
uint64_t now_ns() { return step_trace_now(); }

bool in_rpc_buffer(const ggml_tensor* t) {
  ggml_backend_buffer_t b = t->view_src != nullptr ? t->view_src->buffer : t->buffer;
  return b != nullptr && is_rpc_device(ggml_backend_buft_get_device(ggml_backend_buffer_get_type(b)));
}

}  // namespace

const ReuseTable::Identity* scheduler_copy_identity() { return t_identity; }

bool in_scheduler_run() { return t_in_run; }

SplitProfile split_profile() {
  SplitProfile p;
  p.runs = g_runs.load();
  p.run_s = g_run_ns.load() / 1e9;
  p.to_workers_s = g_to_workers_ns.load() / 1e9;
  p.from_workers_s = g_from_workers_ns.load() / 1e9 + deferred_result_s();
  p.to_local_s = g_to_local_ns.load() / 1e9;
  p.launches = g_launches.load();
  p.launch_s = g_launch_ns.load() / 1e9;
  p.sync_s = g_sync_ns.load() / 1e9;
  return p;
}

void set_serial_runs(bool on) { g_serial = on; }

SplitProfile operator-(const SplitProfile& a, const SplitProfile& b) {
  SplitProfile d;
  d.runs = a.runs - b.runs;
  d.launches = a.launches - b.launches;
  d.run_s = a.run_s - b.run_s;
  d.to_workers_s = a.to_workers_s - b.to_workers_s;
  d.from_workers_s = a.from_workers_s - b.from_workers_s;
  d.to_local_s = a.to_local_s - b.to_local_s;
  d.launch_s = a.launch_s - b.launch_s;
  d.sync_s = a.sync_s - b.sync_s;
  return d;
}

}  // namespace tandem::datapath

namespace tandem::datapath {
namespace {

// Each split's launch: the split's device first waits for the inputs queued for it.
enum ggml_status on_launch(ggml_backend_t backend, ggml_cgraph* cgraph, LaunchFn fn) {
  // Only the scheduler's own launches: not an RPC server's inside this process (or the worker's).
  if (!t_in_run) return fn(backend, cgraph);
  local_inputs_before_launch(backend);
  check_rpc_launch(backend, cgraph);
  const uint64_t t0 = now_ns();
  const enum ggml_status st = fn(backend, cgraph);
  const uint64_t t1 = now_ns();
  g_launch_ns.fetch_add(t1 - t0, std::memory_order_relaxed);
  g_launches.fetch_add(1, std::memory_order_relaxed);
  tandem::step_trace(is_rpc_device(ggml_backend_get_device(backend)) ? "launch-rpc" : "launch-local", t0, t1);
  return st;
}

void on_synchronize(ggml_backend_t backend, SynchronizeFn fn) {
  if (!t_in_run) return fn(backend);
  const uint64_t t0 = now_ns();
  fn(backend);
  const uint64_t t1 = now_ns();
  g_sync_ns.fetch_add(t1 - t0, std::memory_order_relaxed);
  tandem::step_trace("sync", t0, t1);
}

enum ggml_status on_run(ggml_backend_sched_t sched, ggml_cgraph* graph, SchedComputeFn fn) {
  g_epoch.fetch_add(1, std::memory_order_acq_rel);
  local_inputs_new_run();
  const uint64_t t0 = now_ns();
  t_in_run = true;
  const enum ggml_status st = fn(sched, graph);
  if (g_serial.load(std::memory_order_relaxed)) ggml_backend_sched_synchronize(sched);
  t_in_run = false;
  const uint64_t t1 = now_ns();
  g_run_ns.fetch_add(t1 - t0, std::memory_order_relaxed);
  g_runs.fetch_add(1, std::memory_order_relaxed);
  tandem::step_trace("run", t0, t1);
  return st;
}

void on_copy(const ggml_tensor* src, ggml_tensor* dst, TensorCopyFn fn) {
  const bool src_host = src->buffer != nullptr && ggml_backend_buffer_is_host(src->buffer);
  std::atomic<uint64_t>* bucket = in_rpc_buffer(dst)   ? &g_to_workers_ns
                                  : in_rpc_buffer(src) ? &g_from_workers_ns
                                                       : &g_to_local_ns;
  const uint64_t epoch = g_epoch.load(std::memory_order_acquire);
  const uint64_t t0 = now_ns();
  bool deferred = false;
  ggml_tensor made;
  tandem::datapath::ReuseTable::Identity made_id;
  if (t_in_run && in_rpc_buffer(src) && make_worker_result_here(src, epoch, &made, &made_id)) {
    // made here from the head's own input (local_casts.h): nothing read from the worker
    bucket = in_rpc_buffer(dst) ? &g_to_workers_ns : &g_to_local_ns;
    if (!(in_rpc_buffer(dst) ? redirect_rpc_input(&made, dst, &made_id) : copy_local_input(&made, dst, &made_id))) {
      ggml_backend_tensor_set(dst, made.data, 0, ggml_nbytes(&made));
    }
  } else if (t_in_run && in_rpc_buffer(src) && !in_rpc_buffer(dst) && defer_worker_result(src, dst)) {
    deferred = true;  // read at the split's launch; the time is counted and traced there (deferred_result_s)
  } else if (t_in_run && in_rpc_buffer(src) && in_rpc_buffer(dst) && relay_rpc_result(src, dst, epoch)) {
    // read once per run, sent on as an input (rpc_writes.h)
  } else if (!src_host || ggml_backend_buffer_get_usage(src->buffer) == GGML_BACKEND_BUFFER_USAGE_WEIGHTS) {
    fn(src, dst);
  } else {
    const ggml_tensor* base = src->view_src != nullptr ? src->view_src : src;
    const tandem::datapath::ReuseTable::Identity id{base, src->view_src != nullptr ? src->view_offs : 0, src->data,
                                                    epoch};
    const tandem::datapath::ReuseTable::Identity* known = epoch != 0 ? &id : nullptr;
    if (t_in_run && in_rpc_buffer(dst)) note_worker_input(src, dst, epoch);
    if (t_in_run && in_rpc_buffer(dst) && redirect_rpc_input(src, dst, known)) {
      // the worker reads it from the head's slot: nothing written into dst (rpc_writes.h)
    } else if (!t_in_run || !copy_local_input(src, dst, known)) {
      t_identity = known;
      fn(src, dst);
      t_identity = nullptr;
    }
  }
  const uint64_t t1 = now_ns();
  bucket->fetch_add(t1 - t0, std::memory_order_relaxed);
  if (bucket != &g_to_local_ns && !deferred) {
    tandem::step_trace(bucket == &g_from_workers_ns ? "from-workers" : "to-workers", t0, t1, ggml_nbytes(src));
  }
}

constexpr SchedulerHooks kHooks{&on_run, &on_launch, &on_synchronize, &on_copy};

}  // namespace

Status install_scheduler_hooks() {
  TANDEM_RETURN_IF_ERROR(check_interposition());
  set_scheduler_hooks(&kHooks);
  return Status::ok();
}

}  // namespace tandem::datapath
