#include "common/tensor_set_hook.h"

#include <dlfcn.h>

#include <atomic>

extern "C" void ggml_backend_tensor_set(struct ggml_tensor* tensor, const void* data, size_t offset, size_t size);

namespace tandem {
namespace {
std::atomic<TensorSetHook> g_hook{nullptr};
}  // namespace

void set_tensor_set_hook(TensorSetHook hook) { g_hook.store(hook); }

TensorSetFn real_tensor_set() {
  static TensorSetFn fn = reinterpret_cast<TensorSetFn>(::dlsym(RTLD_NEXT, "ggml_backend_tensor_set"));
  return fn;
}

bool tensor_set_interposed() {
  return ::dlsym(RTLD_DEFAULT, "ggml_backend_tensor_set") == reinterpret_cast<void*>(&ggml_backend_tensor_set) &&
         real_tensor_set() != nullptr;
}

}  // namespace tandem

// Outside a hook's work it only forwards: one relaxed load per call.
extern "C" void ggml_backend_tensor_set(struct ggml_tensor* tensor, const void* data, size_t offset, size_t size) {
  const tandem::TensorSetHook hook = tandem::g_hook.load(std::memory_order_relaxed);
  if (hook != nullptr && hook(tensor, data, offset, size)) return;
  tandem::real_tensor_set()(tensor, data, offset, size);
}
