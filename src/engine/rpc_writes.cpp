#include "engine/rpc_writes.h"

#include <atomic>
#include <mutex>
#include <unordered_map>

#include "common/tensor_set_hook.h"
#include "engine/model_loader.h"
#include "ggml-backend.h"
#include "ggml.h"

namespace tandem::engine {
namespace {

std::mutex g_mutex;
bool g_live = false;
// One backend handle per RPC device, opened on first use. ggml's RPC backends share one
// connection (and its queue) per endpoint, so a handle opened here queues behind whatever the
// scheduler's own handle queued before. It is opened only while a buffer of that device exists,
// so the connection is always the one already open, never a new one.
std::unordered_map<ggml_backend_dev_t, ggml_backend_t> g_backends;
std::atomic<unsigned long long> g_writes{0};

bool write_async(ggml_tensor* tensor, const void* data, size_t offset, size_t size) {
  ggml_backend_buffer_t buf = tensor->view_src != nullptr ? tensor->view_src->buffer : tensor->buffer;
  // Weights keep ggml's path: it is where the client asks the server's cache first.
  if (buf == nullptr || ggml_backend_buffer_get_usage(buf) == GGML_BACKEND_BUFFER_USAGE_WEIGHTS) return false;
  ggml_backend_dev_t dev = ggml_backend_buft_get_device(ggml_backend_buffer_get_type(buf));
  if (!is_rpc_device(dev)) return false;
  ggml_backend_t backend = nullptr;
  {
    std::lock_guard<std::mutex> lock(g_mutex);
    auto it = g_backends.find(dev);
    if (it == g_backends.end()) it = g_backends.emplace(dev, ggml_backend_dev_init(dev, nullptr)).first;
    backend = it->second;
  }
  if (backend == nullptr) return false;
  ggml_backend_tensor_set_async(backend, tensor, data, offset, size);
  g_writes.fetch_add(1, std::memory_order_relaxed);
  return true;
}

}  // namespace

AsyncRpcWrites::AsyncRpcWrites() {
  std::lock_guard<std::mutex> lock(g_mutex);
  if (g_live || !tensor_set_interposed()) return;
  g_live = active_ = true;
  add_tensor_set_hook(&write_async);
}

AsyncRpcWrites::~AsyncRpcWrites() {
  if (!active_) return;
  remove_tensor_set_hook(&write_async);
  std::lock_guard<std::mutex> lock(g_mutex);
  for (auto& [dev, backend] : g_backends) {
    if (backend == nullptr) continue;
    // What was queued reaches the server before the handle lets go of the connection.
    ggml_backend_synchronize(backend);
    ggml_backend_free(backend);
  }
  g_backends.clear();
  g_live = false;
}

unsigned long long AsyncRpcWrites::writes() { return g_writes.load(); }

}  // namespace tandem::engine
