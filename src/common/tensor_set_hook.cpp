#include "common/tensor_set_hook.h"

#include <dlfcn.h>

#include <atomic>
#include <mutex>

extern "C" void ggml_backend_tensor_set(struct ggml_tensor* tensor, const void* data, size_t offset, size_t size);

namespace tandem {
namespace {
constexpr int kSlots = 4;
std::atomic<TensorSetHook> g_hooks[kSlots];
std::mutex g_edit;  // serialises edits; calls read the slots without it
}  // namespace

bool add_tensor_set_hook(TensorSetHook hook) {
  std::lock_guard<std::mutex> lock(g_edit);
  for (auto& h : g_hooks) {
    if (h.load() == hook) return false;
  }
  for (auto& h : g_hooks) {
    if (h.load() == nullptr) {
      h.store(hook);
      return true;
    }
  }
  return false;
}

void remove_tensor_set_hook(TensorSetHook hook) {
  std::lock_guard<std::mutex> lock(g_edit);
  for (auto& h : g_hooks) {
    if (h.load() == hook) h.store(nullptr);
  }
}

TensorSetFn real_tensor_set() {
  static TensorSetFn fn = reinterpret_cast<TensorSetFn>(::dlsym(RTLD_NEXT, "ggml_backend_tensor_set"));
  return fn;
}

bool tensor_set_interposed() {
  return ::dlsym(RTLD_DEFAULT, "ggml_backend_tensor_set") == reinterpret_cast<void*>(&ggml_backend_tensor_set) &&
         real_tensor_set() != nullptr;
}

}  // namespace tandem

// With no hook it only forwards: four relaxed loads per call.
extern "C" void ggml_backend_tensor_set(struct ggml_tensor* tensor, const void* data, size_t offset, size_t size) {
  for (auto& h : tandem::g_hooks) {
    const tandem::TensorSetHook hook = h.load(std::memory_order_relaxed);
    if (hook != nullptr && hook(tensor, data, offset, size)) return;
  }
  tandem::real_tensor_set()(tensor, data, offset, size);
}
