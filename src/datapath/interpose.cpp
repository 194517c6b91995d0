#include "datapath/interpose.h"

#include <dlfcn.h>

#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <mutex>

// ggml's private header declares this one; its signature is checked against the pinned source at
// build time (scripts/check-llama-internals.py). The others' come from ggml-backend.h.
// pinned llama.cpp: text ggml/src/ggml-backend-impl.h GGML_API bool ggml_backend_buffer_copy_tensor(const struct ggml_tensor * src, struct ggml_tensor * dst);
extern "C" bool ggml_backend_buffer_copy_tensor(const struct ggml_tensor* src, struct ggml_tensor* dst);

namespace tandem::datapath {
namespace {

constexpr int kSlots = 4;

// The hook table: which hooks the replaced functions run. The data path's one process-wide
// object, because ggml's functions take no context to find a session by. Calls read it without a
// lock; `edit` serialises changes.
struct HookTable {
  std::atomic<TensorSetHook> set_hooks[kSlots];
  std::mutex edit;
  std::atomic<SchedulerHooks*> sched{nullptr};
  std::atomic<DeviceFenceHooks*> fence{nullptr};
  std::atomic<FirstHooks*> first{nullptr};
};
HookTable g_table;

// Per thread: the self-check's canary (the definitions entered while it is on) and what hooks hand
// down one call (ThreadCall).
struct ThreadState {
  bool canary = false;
  uint32_t seen = 0;
  ThreadCall call;
};
thread_local ThreadState t_thread;

inline void entered(Interposed which) {
  if (t_thread.canary) t_thread.seen |= 1u << static_cast<uint32_t>(which);
}

template <typename Fn>
Fn real(Interposed which) {
  const char* name = kInterposedNames[static_cast<uint32_t>(which)];
  Fn fn = reinterpret_cast<Fn>(::dlsym(RTLD_NEXT, name));
  if (fn == nullptr) {
    std::fprintf(stderr, "tandem: %s not found in ggml's libraries (a build problem)\n", name);
    std::abort();
  }
  return fn;
}

inline void fence() {
  if (DeviceFenceHooks* f = g_table.fence.load(std::memory_order_acquire)) f->fence();
}

// Installs `hooks` into `slot` unless others are there.
template <typename Hooks>
bool install(std::atomic<Hooks*>& slot, Hooks* hooks) {
  std::lock_guard<std::mutex> lock(g_table.edit);
  Hooks* installed = slot.load();
  if (hooks != nullptr && installed != nullptr && installed != hooks) return false;
  slot.store(hooks, std::memory_order_release);
  return true;
}

}  // namespace

bool add_tensor_set_hook(TensorSetHook hook) {
  std::lock_guard<std::mutex> lock(g_table.edit);
  for (auto& h : g_table.set_hooks) {
    if (h.load() == hook) return false;
  }
  for (auto& h : g_table.set_hooks) {
    if (h.load() == nullptr) {
      h.store(hook);
      return true;
    }
  }
  return false;
}

void remove_tensor_set_hook(TensorSetHook hook) {
  std::lock_guard<std::mutex> lock(g_table.edit);
  for (auto& h : g_table.set_hooks) {
    if (h.load() == hook) h.store(nullptr);
  }
}

TensorSetFn real_tensor_set() {
  static TensorSetFn fn = real<TensorSetFn>(Interposed::tensor_set);
  return fn;
}

TensorGetFn real_tensor_get() {
  static TensorGetFn fn = real<TensorGetFn>(Interposed::tensor_get);
  return fn;
}

SynchronizeFn real_synchronize() {
  static SynchronizeFn fn = real<SynchronizeFn>(Interposed::synchronize);
  return fn;
}

bool set_first_hooks(FirstHooks* hooks) { return install(g_table.first, hooks); }
bool set_scheduler_hooks(SchedulerHooks* hooks) { return install(g_table.sched, hooks); }
bool set_device_fence_hooks(DeviceFenceHooks* hooks) { return install(g_table.fence, hooks); }

ThreadCall& this_thread_call() { return t_thread.call; }

bool tensor_set_interposed() {
  return ::dlsym(RTLD_DEFAULT, "ggml_backend_tensor_set") == interposer_address(Interposed::tensor_set) &&
         ::dlsym(RTLD_NEXT, "ggml_backend_tensor_set") != nullptr;
}

void set_interposer_canary(bool on) {
  t_thread.canary = on;
  t_thread.seen = 0;
}
uint32_t interposer_calls_seen() { return t_thread.seen; }

}  // namespace tandem::datapath

// The definitions: each resolves ggml's own function once. Including ggml-backend.h makes the
// compiler hold each to ggml's declared signature.
extern "C" {

using tandem::datapath::Interposed;

using tandem::datapath::g_table;

// With no hook it only forwards: seven relaxed loads per call.
void ggml_backend_tensor_set(struct ggml_tensor* tensor, const void* data, size_t offset, size_t size) {
  tandem::datapath::entered(Interposed::tensor_set);
  if (auto* first = g_table.first.load(std::memory_order_relaxed)) {
    if (first->set(tensor, data, offset, size)) return;
  }
  if (auto* sched = g_table.sched.load(std::memory_order_relaxed)) {
    if (sched->tensor_set(tensor, data, offset, size)) return;
  }
  for (auto& h : g_table.set_hooks) {
    const tandem::datapath::TensorSetHook hook = h.load(std::memory_order_relaxed);
    if (hook != nullptr && hook(tensor, data, offset, size)) return;
  }
  if (auto* fence = g_table.fence.load(std::memory_order_relaxed)) {
    if (fence->tensor_set(tensor, data, offset, size)) return;
  }
  tandem::datapath::real_tensor_set()(tensor, data, offset, size);
}

void ggml_backend_tensor_get(const struct ggml_tensor* tensor, void* data, size_t offset, size_t size) {
  tandem::datapath::entered(Interposed::tensor_get);
  if (auto* first = g_table.first.load(std::memory_order_relaxed)) {
    if (first->get(tensor, data, offset, size)) return;
  }
  tandem::datapath::fence();
  tandem::datapath::real_tensor_get()(tensor, data, offset, size);
}

void ggml_backend_tensor_memset(struct ggml_tensor* tensor, uint8_t value, size_t offset, size_t size) {
  static auto fn = tandem::datapath::real<void (*)(ggml_tensor*, uint8_t, size_t, size_t)>(Interposed::tensor_memset);
  tandem::datapath::entered(Interposed::tensor_memset);
  tandem::datapath::fence();
  fn(tensor, value, offset, size);
}

void ggml_backend_buffer_clear(ggml_backend_buffer_t buffer, uint8_t value) {
  static auto fn = tandem::datapath::real<void (*)(ggml_backend_buffer_t, uint8_t)>(Interposed::buffer_clear);
  tandem::datapath::entered(Interposed::buffer_clear);
  tandem::datapath::fence();
  fn(buffer, value);
}

void ggml_backend_buffer_free(ggml_backend_buffer_t buffer) {
  static auto fn = tandem::datapath::real<void (*)(ggml_backend_buffer_t)>(Interposed::buffer_free);
  tandem::datapath::entered(Interposed::buffer_free);
  tandem::datapath::fence();
  fn(buffer);
}

bool ggml_backend_buffer_copy_tensor(const struct ggml_tensor* src, struct ggml_tensor* dst) {
  static auto fn = tandem::datapath::real<bool (*)(const ggml_tensor*, ggml_tensor*)>(Interposed::buffer_copy_tensor);
  tandem::datapath::entered(Interposed::buffer_copy_tensor);
  tandem::datapath::fence();
  return fn(src, dst);
}

enum ggml_status ggml_backend_graph_compute(ggml_backend_t backend, struct ggml_cgraph* cgraph) {
  static auto fn = tandem::datapath::real<tandem::datapath::LaunchFn>(Interposed::graph_compute);
  tandem::datapath::entered(Interposed::graph_compute);
  if (auto* f = g_table.fence.load(std::memory_order_acquire)) return f->graph(backend, cgraph, fn);
  return fn(backend, cgraph);
}

enum ggml_status ggml_backend_graph_compute_async(ggml_backend_t backend, struct ggml_cgraph* cgraph) {
  static auto fn = tandem::datapath::real<tandem::datapath::LaunchFn>(Interposed::graph_compute_async);
  tandem::datapath::entered(Interposed::graph_compute_async);
  if (auto* h = g_table.sched.load(std::memory_order_acquire)) return h->launch(backend, cgraph, fn);
  return fn(backend, cgraph);
}

void ggml_backend_synchronize(ggml_backend_t backend) {
  const auto fn = tandem::datapath::real_synchronize();
  tandem::datapath::entered(Interposed::synchronize);
  if (auto* h = g_table.sched.load(std::memory_order_acquire)) return h->synchronize(backend, fn);
  fn(backend);
}

enum ggml_status ggml_backend_sched_graph_compute_async(ggml_backend_sched_t sched, struct ggml_cgraph* graph) {
  static auto fn = tandem::datapath::real<tandem::datapath::SchedComputeFn>(Interposed::sched_graph_compute_async);
  tandem::datapath::entered(Interposed::sched_graph_compute_async);
  if (auto* h = g_table.sched.load(std::memory_order_acquire)) return h->run(sched, graph, fn);
  return fn(sched, graph);
}

void ggml_backend_tensor_copy(const struct ggml_tensor* src, struct ggml_tensor* dst) {
  static auto fn = tandem::datapath::real<tandem::datapath::TensorCopyFn>(Interposed::tensor_copy);
  tandem::datapath::entered(Interposed::tensor_copy);
  if (auto* h = g_table.sched.load(std::memory_order_acquire)) return h->copy(src, dst, fn);
  fn(src, dst);
}

// llama.cpp's meta device (the tensor splits) reduces partial sums through it
// (datapath/reduce_copies.h).
void ggml_backend_tensor_copy_async(ggml_backend_t backend_src, ggml_backend_t backend_dst,
                                    const struct ggml_tensor* src, struct ggml_tensor* dst) {
  static auto fn = tandem::datapath::real<tandem::datapath::CopyAsyncFn>(Interposed::tensor_copy_async);
  tandem::datapath::entered(Interposed::tensor_copy_async);
  if (auto* h = g_table.sched.load(std::memory_order_acquire))
    return h->copy_async(backend_src, backend_dst, src, dst, fn);
  fn(backend_src, backend_dst, src, dst);
}

// libllama builds graphs with it (minimax-m3's sparse attention: its gather positions); the head's
// session may rewrite what it makes (datapath/head_session.h: the FFN tensor split).
ggml_tensor* ggml_arange(ggml_context* ctx, float start, float stop, float step) {
  static auto fn = tandem::datapath::real<ggml_tensor* (*)(ggml_context*, float, float, float)>(Interposed::arange);
  tandem::datapath::entered(Interposed::arange);
  ggml_tensor* t = fn(ctx, start, stop, step);
  if (auto* h = g_table.sched.load(std::memory_order_acquire); h != nullptr && t != nullptr) h->made_arange(ctx, t);
  return t;
}

// Hidden aliases of the definitions above: their addresses are this file's own even where the
// dynamic linker binds the public names elsewhere, which is what the self-check compares with.
#define TANDEM_OWN(own, name) __typeof__(name) own __attribute__((alias(#name), visibility("hidden")));
TANDEM_OWN(tandem_own_tensor_set, ggml_backend_tensor_set)
TANDEM_OWN(tandem_own_tensor_get, ggml_backend_tensor_get)
TANDEM_OWN(tandem_own_tensor_memset, ggml_backend_tensor_memset)
TANDEM_OWN(tandem_own_tensor_copy, ggml_backend_tensor_copy)
TANDEM_OWN(tandem_own_buffer_clear, ggml_backend_buffer_clear)
TANDEM_OWN(tandem_own_buffer_free, ggml_backend_buffer_free)
TANDEM_OWN(tandem_own_buffer_copy_tensor, ggml_backend_buffer_copy_tensor)
TANDEM_OWN(tandem_own_graph_compute, ggml_backend_graph_compute)
TANDEM_OWN(tandem_own_graph_compute_async, ggml_backend_graph_compute_async)
TANDEM_OWN(tandem_own_synchronize, ggml_backend_synchronize)
TANDEM_OWN(tandem_own_sched_graph_compute_async, ggml_backend_sched_graph_compute_async)
TANDEM_OWN(tandem_own_tensor_copy_async, ggml_backend_tensor_copy_async)
TANDEM_OWN(tandem_own_arange, ggml_arange)
#undef TANDEM_OWN

}  // extern "C"

namespace tandem::datapath {

void* interposer_address(Interposed which) {
  switch (which) {
    case Interposed::tensor_set:
      return reinterpret_cast<void*>(&tandem_own_tensor_set);
    case Interposed::tensor_get:
      return reinterpret_cast<void*>(&tandem_own_tensor_get);
    case Interposed::tensor_memset:
      return reinterpret_cast<void*>(&tandem_own_tensor_memset);
    case Interposed::tensor_copy:
      return reinterpret_cast<void*>(&tandem_own_tensor_copy);
    case Interposed::buffer_clear:
      return reinterpret_cast<void*>(&tandem_own_buffer_clear);
    case Interposed::buffer_free:
      return reinterpret_cast<void*>(&tandem_own_buffer_free);
    case Interposed::buffer_copy_tensor:
      return reinterpret_cast<void*>(&tandem_own_buffer_copy_tensor);
    case Interposed::graph_compute:
      return reinterpret_cast<void*>(&tandem_own_graph_compute);
    case Interposed::graph_compute_async:
      return reinterpret_cast<void*>(&tandem_own_graph_compute_async);
    case Interposed::synchronize:
      return reinterpret_cast<void*>(&tandem_own_synchronize);
    case Interposed::sched_graph_compute_async:
      return reinterpret_cast<void*>(&tandem_own_sched_graph_compute_async);
    case Interposed::tensor_copy_async:
      return reinterpret_cast<void*>(&tandem_own_tensor_copy_async);
    case Interposed::arange:
      return reinterpret_cast<void*>(&tandem_own_arange);
    case Interposed::count:
      break;
  }
  return nullptr;
}

}  // namespace tandem::datapath
