#include "datapath/head_session.h"

#include "common/step_trace.h"
#include "datapath/ggml_devices.h"
#include "datapath/self_check.h"
#include "ggml-backend.h"
#include "ggml.h"

namespace tandem::datapath {
namespace {

// The trace's clock, so that its lines and these sums agree.
uint64_t now_ns() { return step_trace_now(); }

bool in_rpc_buffer(const ggml_tensor* t) {
  ggml_backend_buffer_t b = t->view_src != nullptr ? t->view_src->buffer : t->buffer;
  return b != nullptr && is_rpc_device(ggml_backend_buft_get_device(ggml_backend_buffer_get_type(b)));
}

}  // namespace

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

HeadSession::HeadSession(const HeadOptions& options) : options_(options), casts_(options.local_casts) {
  if (options.async_rpc_writes) {
    rpc_ = std::make_unique<RpcWrites>(options.reuse_endpoints, options.worker_slot_bytes, options.runs_endpoints);
  }
  if (options.queue_local_inputs) local_ = std::make_unique<LocalInputs>(options.local_slot_bytes);
}

Result<std::unique_ptr<HeadSession>> HeadSession::open(const HeadOptions& options) {
  TANDEM_RETURN_IF_ERROR(check_interposition());
  std::unique_ptr<HeadSession> s(new HeadSession(options));
  if (!set_scheduler_hooks(s.get())) {
    return Status::internal("a head data-path session is already open in this process (one model at a time)");
  }
  return s;
}

HeadSession::~HeadSession() { set_scheduler_hooks(nullptr); }

HeadStats HeadSession::stats() const {
  HeadStats h;
  SplitProfile& p = h.profile;
  if (rpc_ != nullptr) h.rpc = rpc_->stats();
  if (local_ != nullptr) h.local = local_->stats();
  p.runs = runs_.load();
  p.run_s = run_ns_.load() / 1e9;
  p.to_workers_s = to_workers_ns_.load() / 1e9;
  p.from_workers_s = from_workers_ns_.load() / 1e9 + h.local.deferred_s;
  p.to_local_s = to_local_ns_.load() / 1e9;
  p.launches = launches_.load();
  p.launch_s = launch_ns_.load() / 1e9;
  p.sync_s = sync_ns_.load() / 1e9;
  h.local_casts = casts_.casts();
  h.local_cast_bytes = casts_.cast_bytes();
  h.overlapped_reduce_copies = reduce_.copies();
  return h;
}

bool HeadSession::in_run() const { return this_thread_call().run_owner == this; }

// Each split's launch: the split's device first waits for the inputs queued for it.
enum ggml_status HeadSession::launch(ggml_backend_t backend, ggml_cgraph* cgraph, LaunchFn fn) {
  reduce_.flush(backend);
  // Only the scheduler's own launches: not an RPC server's inside this process (or the worker's).
  if (!in_run()) return fn(backend, cgraph);
  if (local_ != nullptr) local_->before_launch(backend);
  if (rpc_ != nullptr) rpc_->check_launch(backend, cgraph);
  const uint64_t t0 = now_ns();
  const enum ggml_status st = fn(backend, cgraph);
  const uint64_t t1 = now_ns();
  launch_ns_.fetch_add(t1 - t0, std::memory_order_relaxed);
  launches_.fetch_add(1, std::memory_order_relaxed);
  tandem::step_trace(is_rpc_device(ggml_backend_get_device(backend)) ? "launch-rpc" : "launch-local", t0, t1);
  return st;
}

void HeadSession::synchronize(ggml_backend_t backend, SynchronizeFn fn) {
  reduce_.flush(backend);
  if (!in_run()) return fn(backend);
  const uint64_t t0 = now_ns();
  fn(backend);
  const uint64_t t1 = now_ns();
  sync_ns_.fetch_add(t1 - t0, std::memory_order_relaxed);
  tandem::step_trace("sync", t0, t1);
}

enum ggml_status HeadSession::run(ggml_backend_sched_t sched, ggml_cgraph* graph, SchedComputeFn fn) {
  epoch_.fetch_add(1, std::memory_order_acq_rel);
  if (local_ != nullptr) local_->new_run();
  const uint64_t t0 = now_ns();
  ThreadCall& call = this_thread_call();
  const void* outer = call.run_owner;
  call.run_owner = this;
  const enum ggml_status st = fn(sched, graph);
  if (options_.serial_runs) ggml_backend_sched_synchronize(sched);
  call.run_owner = outer;
  const uint64_t t1 = now_ns();
  run_ns_.fetch_add(t1 - t0, std::memory_order_relaxed);
  runs_.fetch_add(1, std::memory_order_relaxed);
  tandem::step_trace("run", t0, t1);
  return st;
}

void HeadSession::copy_async(ggml_backend_t backend_src, ggml_backend_t backend_dst, const ggml_tensor* src,
                             ggml_tensor* dst, CopyAsyncFn real) {
  if (src == dst) return;
  if (options_.overlapped_reduce && reduce_.queue(backend_src, backend_dst, src, dst)) return;
  real(backend_src, backend_dst, src, const_cast<ggml_tensor*>(dst));
}

bool HeadSession::tensor_set(ggml_tensor* tensor, const void* data, size_t offset, size_t size) {
  if (rpc_ == nullptr) return false;
  return rpc_->write(tensor, data, offset, size,
                     static_cast<const ReuseTable::Identity*>(this_thread_call().copy_identity));
}

void HeadSession::made_arange(ggml_context* ctx, ggml_tensor* tensor) {
  if (options_.anchor_arange) tensor->src[0] = ggml_new_tensor_1d(ctx, GGML_TYPE_F32, 1);
}

bool HeadSession::take(CopyRoute route, const CopyFacts& f, const ggml_tensor* src, ggml_tensor* dst, uint64_t epoch,
                       const ReuseTable::Identity* input, TensorCopyFn fn) {
  switch (route) {
    case CopyRoute::cast_here: {
      ggml_tensor made;
      ReuseTable::Identity made_id;
      if (!casts_.make_worker_result_here(src, epoch, &made, &made_id)) return false;
      // Placed as the step input it is; nothing read from the worker.
      const bool placed = f.to_worker ? rpc_ != nullptr && rpc_->redirect_input(&made, dst, &made_id)
                                      : local_ != nullptr && local_->copy(&made, dst, &made_id);
      if (!placed) ggml_backend_tensor_set(dst, made.data, 0, ggml_nbytes(&made));
      return true;
    }
    case CopyRoute::defer_to_launch:
      return local_ != nullptr && local_->defer_worker_result(src, dst);
    case CopyRoute::relay:
      return rpc_ != nullptr && rpc_->relay_result(src, dst, epoch);
    case CopyRoute::worker_slot:
      return rpc_ != nullptr && rpc_->redirect_input(src, dst, input);
    case CopyRoute::local_queue:
      return local_ != nullptr && local_->copy(src, dst, input);
    case CopyRoute::ggml: {
      // A step input's write that ggml's copy makes learns which input it is (RpcWrites::write).
      ThreadCall& call = this_thread_call();
      call.copy_identity = input;
      fn(src, dst);
      call.copy_identity = nullptr;
      return true;
    }
  }
  return false;
}

void HeadSession::copy(const ggml_tensor* src, ggml_tensor* dst, TensorCopyFn fn) {
  CopyFacts f;
  f.in_run = in_run();
  f.from_worker = in_rpc_buffer(src);
  f.to_worker = in_rpc_buffer(dst);
  f.host_input = src->buffer != nullptr && ggml_backend_buffer_is_host(src->buffer) &&
                 ggml_backend_buffer_get_usage(src->buffer) != GGML_BACKEND_BUFFER_USAGE_WEIGHTS;
  const uint64_t epoch = epoch_.load(std::memory_order_acquire);
  // Which step input a copy from host memory is, within this run (none before the first run).
  const ggml_tensor* base = src->view_src != nullptr ? src->view_src : src;
  const ReuseTable::Identity id{base, src->view_src != nullptr ? src->view_offs : 0, src->data, epoch};
  const ReuseTable::Identity* input = f.host_input && epoch != 0 ? &id : nullptr;
  // The head makes a worker's cast of a step input it copied to that worker in this run.
  if (f.in_run && f.to_worker && f.host_input) casts_.note_worker_input(src, dst, epoch);
  const uint64_t t0 = now_ns();
  CopyRoute taken = CopyRoute::ggml;
  for (CopyRoute route : classify(f)) {
    if (take(route, f, src, dst, epoch, input, fn)) {
      taken = route;
      break;
    }
  }
  const uint64_t t1 = now_ns();
  // Where the time goes: made here, nothing came from a worker; a deferred read is counted and
  // traced at the split's launch (LocalInputStats::deferred_s).
  const bool from_worker = f.from_worker && taken != CopyRoute::cast_here;
  std::atomic<uint64_t>& bucket = f.to_worker ? to_workers_ns_ : from_worker ? from_workers_ns_ : to_local_ns_;
  bucket.fetch_add(t1 - t0, std::memory_order_relaxed);
  if (&bucket != &to_local_ns_ && taken != CopyRoute::defer_to_launch) {
    tandem::step_trace(&bucket == &from_workers_ns_ ? "from-workers" : "to-workers", t0, t1, ggml_nbytes(src));
  }
}

}  // namespace tandem::datapath
