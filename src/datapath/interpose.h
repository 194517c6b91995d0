// Every ggml function tandem replaces, in one place, with one dispatch.
//
// The split's data path sees ggml's data on its way between devices by defining eleven of ggml's
// own functions in the executable: a shared library resolves such a symbol to the executable's
// definition first (the executable links a ggml library that calls it, so ld exports it), and each
// definition here forwards to ggml's own one (found with RTLD_NEXT) around what the installed hooks
// do. The hooks are tables a role installs: the head's engine its scheduler hooks
// (datapath/sched_hooks.h), the worker's RPC child its device fence (datapath/input_writes.h), either
// one its tensor-set hooks (cached uploads, asynchronous RPC writes, the cache loader, the input
// writes). With nothing installed each function only forwards. `check_interposition`
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
                                                   "ggml_backend_sched_graph_compute_async"};
static_assert(sizeof kInterposedNames / sizeof kInterposedNames[0] == static_cast<size_t>(Interposed::count));

// ggml's own functions, bypassing the hooks. Each is resolved once; a ggml without one stops the
// process with the name (a build problem).
using TensorSetFn = void (*)(ggml_tensor*, const void*, size_t, size_t);
using TensorCopyFn = void (*)(const ggml_tensor*, ggml_tensor*);
using LaunchFn = enum ggml_status (*)(ggml_backend_t, ggml_cgraph*);
using SynchronizeFn = void (*)(ggml_backend_t);
using SchedComputeFn = enum ggml_status (*)(ggml_backend_sched_t, ggml_cgraph*);
using TensorGetFn = void (*)(const ggml_tensor*, void*, size_t, size_t);
TensorSetFn real_tensor_set();
TensorGetFn real_tensor_get();  // without the device fence too

// Tensor-set hooks: true when it placed the data itself; false lets the next hook, and in the
// end ggml's own function, do it.
using TensorSetHook = bool (*)(ggml_tensor* tensor, const void* data, size_t offset, size_t size);
// Adds `hook` after those installed; at most four at a time: false when full (or already there).
bool add_tensor_set_hook(TensorSetHook hook);
// Removes `hook` if installed. The caller makes sure no call is inside it any more.
void remove_tensor_set_hook(TensorSetHook hook);

// Hooks that run before every other one on tensor sets and gets (the prompt cache's shares,
// datapath/kv_shares.h: a state's worker regions must not reach the input hooks, which would send
// or queue them as data). True when it handled the call. `get` runs before the device fence.
struct FirstHooks {
  bool (*set)(ggml_tensor* tensor, const void* data, size_t offset, size_t size);
  bool (*get)(const ggml_tensor* tensor, void* data, size_t offset, size_t size);
};
// Installs `hooks` (static storage; nullptr uninstalls) for the whole process.
void set_first_hooks(const FirstHooks* hooks);

// The head's view of ggml's scheduler. `run` wraps each ggml_backend_sched_graph_compute_async
// (one per ubatch); `launch`, `synchronize` and `copy` wrap ggml_backend_graph_compute_async,
// ggml_backend_synchronize and ggml_backend_tensor_copy. Each gets ggml's own function to call.
struct SchedulerHooks {
  enum ggml_status (*run)(ggml_backend_sched_t sched, ggml_cgraph* graph, SchedComputeFn real);
  enum ggml_status (*launch)(ggml_backend_t backend, ggml_cgraph* graph, LaunchFn real);
  void (*synchronize)(ggml_backend_t backend, SynchronizeFn real);
  void (*copy)(const ggml_tensor* src, ggml_tensor* dst, TensorCopyFn real);
};
// Installs `hooks` (static storage; nullptr uninstalls) for the whole process.
void set_scheduler_hooks(const SchedulerHooks* hooks);

// The RPC child's fence: `fence` runs before every ggml call that reads, runs on or releases device
// memory (graph_compute, tensor_get, tensor_memset, buffer_clear, buffer_free, buffer_copy_tensor),
// so that writes it queued land first; `graph` wraps ggml_backend_graph_compute (after the fence).
struct DeviceFenceHooks {
  void (*fence)();
  enum ggml_status (*graph)(ggml_backend_t backend, ggml_cgraph* graph, LaunchFn real);
};
void set_device_fence_hooks(const DeviceFenceHooks* hooks);

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
