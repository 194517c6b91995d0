// Every ggml function tandem replaces, in one place, with one dispatch.
//
// The split's data path sees ggml's data on its way between devices by defining thirteen of ggml's
// own functions in the executable: a shared library resolves such a symbol to the executable's
// definition first (the executable links a ggml library that calls it, so ld exports it), and each
// definition here forwards to ggml's own one (found with RTLD_NEXT) around what the installed hooks
// do. The hooks are what a role installs: the head's session its scheduler hooks
// (datapath/head_session.h), the worker's RPC child its device fence (datapath/input_writes.h), either
// one its tensor-set hooks (cached uploads, the cache loader, the input writes). With nothing
// installed each function only forwards. The hook table itself (which hooks are installed) and
// the per-thread `ThreadCall` are the only process-wide state: ggml's functions carry no context. `check_interposition`
// (datapath/self_check.h) proves at start that ggml's calls really reach these definitions.
#pragma once

#include <cstddef>
#include <cstdint>

#include "ggml-backend.h"

namespace tandem::datapath {

// The functions replaced, in the order of `kInterposedNames`.
enum class Interposed : uint32_t {
  tensor_set,
  tensor_get,
  tensor_memset,
  tensor_copy,
  buffer_clear,
  buffer_free,
  buffer_copy_tensor,
  graph_compute,
  graph_compute_async,
  synchronize,
  sched_graph_compute_async,
  tensor_copy_async,
  arange,
  count
};
inline constexpr const char* kInterposedNames[] = {"ggml_backend_tensor_set",
                                                   "ggml_backend_tensor_get",
                                                   "ggml_backend_tensor_memset",
                                                   "ggml_backend_tensor_copy",
                                                   "ggml_backend_buffer_clear",
                                                   "ggml_backend_buffer_free",
                                                   "ggml_backend_buffer_copy_tensor",
                                                   "ggml_backend_graph_compute",
                                                   "ggml_backend_graph_compute_async",
                                                   "ggml_backend_synchronize",
                                                   "ggml_backend_sched_graph_compute_async",
                                                   "ggml_backend_tensor_copy_async",
                                                   "ggml_arange"};
static_assert(sizeof kInterposedNames / sizeof kInterposedNames[0] == static_cast<size_t>(Interposed::count));

// ggml's own functions, bypassing the hooks. Each is resolved once; a ggml without one stops the
// process with the name (a build problem).
using TensorSetFn = void (*)(ggml_tensor*, const void*, size_t, size_t);
using TensorCopyFn = void (*)(const ggml_tensor*, ggml_tensor*);
using LaunchFn = enum ggml_status (*)(ggml_backend_t, ggml_cgraph*);
using SynchronizeFn = void (*)(ggml_backend_t);
using SchedComputeFn = enum ggml_status (*)(ggml_backend_sched_t, ggml_cgraph*);
using TensorGetFn = void (*)(const ggml_tensor*, void*, size_t, size_t);
using CopyAsyncFn = void (*)(ggml_backend_t, ggml_backend_t, const ggml_tensor*, ggml_tensor*);
TensorSetFn real_tensor_set();
SynchronizeFn real_synchronize();
TensorGetFn real_tensor_get();  // without the device fence too

// Tensor-set hooks: true when it placed the data itself; false lets the next hook, and in the
// end ggml's own function, do it.
using TensorSetHook = bool (*)(ggml_tensor* tensor, const void* data, size_t offset, size_t size);
// Adds `hook` after those installed; at most four at a time: false when full (or already there).
bool add_tensor_set_hook(TensorSetHook hook);
// Removes `hook` if installed. The caller makes sure no call is inside it any more.
void remove_tensor_set_hook(TensorSetHook hook);

// Hooks that run before every other one on tensor sets and gets (the prompt cache's shares: the
// head's datapath/kv_shares.h, the RPC child's datapath/kv_share_store.h: a state's worker regions
// must not reach the input hooks, which would send or queue them as data). True when it handled
// the call. `get` runs before the device fence.
class FirstHooks {
 public:
  virtual bool set(ggml_tensor* tensor, const void* data, size_t offset, size_t size) = 0;
  virtual bool get(const ggml_tensor* tensor, void* data, size_t offset, size_t size) = 0;

 protected:
  ~FirstHooks() = default;
};
// Installs `hooks` for the whole process (nullptr uninstalls); false, installing nothing, when
// others are installed. The caller keeps them alive until it uninstalls them.
bool set_first_hooks(FirstHooks* hooks);

// The head's view of ggml's scheduler, implemented by the head's session (datapath/head_session.h).
// `run` wraps each ggml_backend_sched_graph_compute_async (one per ubatch); `launch`, `synchronize`,
// `copy` and `copy_async` wrap ggml_backend_graph_compute_async, ggml_backend_synchronize,
// ggml_backend_tensor_copy and ggml_backend_tensor_copy_async; each gets ggml's own function to
// call. `made_arange` sees each tensor ggml_arange returns. `tensor_set` runs on every tensor set after the first hooks and before the tensor-set hooks
// (true: it placed the data). Called from any thread that calls ggml.
class SchedulerHooks {
 public:
  virtual enum ggml_status run(ggml_backend_sched_t sched, ggml_cgraph* graph, SchedComputeFn real) = 0;
  virtual enum ggml_status launch(ggml_backend_t backend, ggml_cgraph* graph, LaunchFn real) = 0;
  virtual void synchronize(ggml_backend_t backend, SynchronizeFn real) = 0;
  virtual void copy(const ggml_tensor* src, ggml_tensor* dst, TensorCopyFn real) = 0;
  virtual void copy_async(ggml_backend_t backend_src, ggml_backend_t backend_dst, const ggml_tensor* src,
                          ggml_tensor* dst, CopyAsyncFn real) = 0;
  virtual bool tensor_set(ggml_tensor* tensor, const void* data, size_t offset, size_t size) = 0;
  // After ggml_arange made `tensor` in `ctx` (libllama builds graphs with it): the head may
  // rewrite it for the graphs of its model.
  virtual void made_arange(ggml_context* ctx, ggml_tensor* tensor) = 0;

 protected:
  ~SchedulerHooks() = default;
};
// Installs `hooks` for the whole process (nullptr uninstalls); false, installing nothing, when
// other hooks are installed. The caller keeps `hooks` alive until it uninstalls them and makes sure
// no call is inside them any more.
bool set_scheduler_hooks(SchedulerHooks* hooks);

// What one hook hands to another further down the same thread's call into ggml, whose functions
// carry no context: the head's copy interposer tells the tensor set that ggml's copy makes which
// input it is (`copy_identity`, see datapath/input_reuse.h), and marks the thread that runs a
// session's scheduler (`run_owner`). The calling thread's own.
struct ThreadCall {
  const void* copy_identity = nullptr;
  const void* run_owner = nullptr;
};
ThreadCall& this_thread_call();

// The RPC child's fence (datapath/rpc_child_session.h implements it): `fence` runs before every ggml
// call that reads, runs on or releases device memory (graph_compute, tensor_get, tensor_memset,
// buffer_clear, buffer_free, buffer_copy_tensor), so that writes it queued land first; `graph`
// wraps ggml_backend_graph_compute (after the fence); `tensor_set` runs on every tensor set after
// the tensor-set hooks (the cache loader's markers come first), true when it placed the data.
class DeviceFenceHooks {
 public:
  virtual void fence() = 0;
  virtual enum ggml_status graph(ggml_backend_t backend, ggml_cgraph* graph, LaunchFn real) = 0;
  virtual bool tensor_set(ggml_tensor* tensor, const void* data, size_t offset, size_t size) = 0;

 protected:
  ~DeviceFenceHooks() = default;
};
// As set_first_hooks.
bool set_device_fence_hooks(DeviceFenceHooks* hooks);

// True when calls to `ggml_backend_tensor_set` from ggml's libraries resolve to this file's
// definition (resolution only; datapath/self_check.h checks real calls).
bool tensor_set_interposed();

// For the self-check: while on (this thread), each definition here that is entered marks its bit
// (1 << Interposed) in `interposer_calls_seen`.
void set_interposer_canary(bool on);
uint32_t interposer_calls_seen();
// The address of this file's definition of `which` (for comparing with what the dynamic linker
// resolves).
void* interposer_address(Interposed which);

}  // namespace tandem::datapath
