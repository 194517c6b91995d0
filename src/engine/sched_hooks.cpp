#include "engine/sched_hooks.h"

#include <dlfcn.h>

#include <atomic>
#include <chrono>

#include "engine/local_inputs.h"
#include "engine/rpc_writes.h"
#include "engine/ggml_devices.h"
#include "ggml-backend.h"

namespace tandem::engine {
namespace {

// Runs of ggml's scheduler (one per ubatch). 0 until the first: identities are then not used.
std::atomic<uint64_t> g_epoch{0};
thread_local const ReuseTable::Identity* t_identity = nullptr;
thread_local bool t_in_run = false;  // inside a run of the scheduler: its copies are split inputs

std::atomic<uint64_t> g_runs{0}, g_run_ns{0}, g_to_workers_ns{0}, g_from_workers_ns{0}, g_to_local_ns{0};
std::atomic<uint64_t> g_launches{0}, g_launch_ns{0}, g_sync_ns{0};

uint64_t now_ns() {
  return static_cast<uint64_t>(
      std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now().time_since_epoch()).count());
}

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

}  // namespace tandem::engine

// Each resolves ggml's own function once.
extern "C" {

// Each split's launch: the split's device first waits for the inputs queued for it.
enum ggml_status ggml_backend_graph_compute_async(ggml_backend_t backend, struct ggml_cgraph* cgraph) {
  using Fn = enum ggml_status (*)(ggml_backend_t, ggml_cgraph*);
  static Fn fn = reinterpret_cast<Fn>(::dlsym(RTLD_NEXT, "ggml_backend_graph_compute_async"));
  using namespace tandem::engine;
  // Only the scheduler's own launches: not an RPC server's inside this process (or the worker's).
  if (!t_in_run) return fn(backend, cgraph);
  local_inputs_before_launch(backend);
  check_rpc_launch(backend, cgraph);
  const uint64_t t0 = now_ns();
  const enum ggml_status st = fn(backend, cgraph);
  g_launch_ns.fetch_add(now_ns() - t0, std::memory_order_relaxed);
  g_launches.fetch_add(1, std::memory_order_relaxed);
  return st;
}

void ggml_backend_synchronize(ggml_backend_t backend) {
  using Fn = void (*)(ggml_backend_t);
  static Fn fn = reinterpret_cast<Fn>(::dlsym(RTLD_NEXT, "ggml_backend_synchronize"));
  using namespace tandem::engine;
  if (!t_in_run) return fn(backend);
  const uint64_t t0 = now_ns();
  fn(backend);
  g_sync_ns.fetch_add(now_ns() - t0, std::memory_order_relaxed);
}

enum ggml_status ggml_backend_sched_graph_compute_async(ggml_backend_sched_t sched, struct ggml_cgraph* graph) {
  using Fn = enum ggml_status (*)(ggml_backend_sched_t, ggml_cgraph*);
  static Fn fn = reinterpret_cast<Fn>(::dlsym(RTLD_NEXT, "ggml_backend_sched_graph_compute_async"));
  using namespace tandem::engine;
  g_epoch.fetch_add(1, std::memory_order_acq_rel);
  local_inputs_new_run();
  const uint64_t t0 = now_ns();
  t_in_run = true;
  const enum ggml_status st = fn(sched, graph);
  t_in_run = false;
  g_run_ns.fetch_add(now_ns() - t0, std::memory_order_relaxed);
  g_runs.fetch_add(1, std::memory_order_relaxed);
  return st;
}

void ggml_backend_tensor_copy(const struct ggml_tensor* src, struct ggml_tensor* dst) {
  using Fn = void (*)(const ggml_tensor*, ggml_tensor*);
  static Fn fn = reinterpret_cast<Fn>(::dlsym(RTLD_NEXT, "ggml_backend_tensor_copy"));
  using namespace tandem::engine;
  const bool src_host = src->buffer != nullptr && ggml_backend_buffer_is_host(src->buffer);
  std::atomic<uint64_t>& bucket = in_rpc_buffer(dst) ? g_to_workers_ns : in_rpc_buffer(src) ? g_from_workers_ns : g_to_local_ns;
  const uint64_t epoch = g_epoch.load(std::memory_order_acquire);
  const uint64_t t0 = now_ns();
  if (t_in_run && in_rpc_buffer(src) && !in_rpc_buffer(dst) && defer_worker_result(src, dst)) {
    // read at the split's launch; the time is counted there (deferred_result_s)
  } else if (!src_host || ggml_backend_buffer_get_usage(src->buffer) == GGML_BACKEND_BUFFER_USAGE_WEIGHTS) {
    fn(src, dst);
  } else {
    const ggml_tensor* base = src->view_src != nullptr ? src->view_src : src;
    const tandem::ReuseTable::Identity id{base, src->view_src != nullptr ? src->view_offs : 0, src->data, epoch};
    const tandem::ReuseTable::Identity* known = epoch != 0 ? &id : nullptr;
    if (t_in_run && in_rpc_buffer(dst) && redirect_rpc_input(src, dst, known)) {
      // the worker reads it from the head's slot: nothing written into dst (rpc_writes.h)
    } else if (!t_in_run || !copy_local_input(src, dst, known)) {
      t_identity = known;
      fn(src, dst);
      t_identity = nullptr;
    }
  }
  bucket.fetch_add(now_ns() - t0, std::memory_order_relaxed);
}

}  // extern "C"
