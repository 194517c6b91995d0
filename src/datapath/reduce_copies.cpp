#include "datapath/reduce_copies.h"

#include <dlfcn.h>

#include <atomic>
#include <memory>
#include <mutex>
#include <vector>

#include "datapath/ggml_devices.h"

namespace tandem::datapath {
namespace {

using CopyAsyncFn = void (*)(ggml_backend_t, ggml_backend_t, const ggml_tensor*, ggml_tensor*);
using SyncFn = void (*)(ggml_backend_t);

std::atomic<bool> g_on{false};
std::atomic<bool> g_any_pending{false};
std::atomic<unsigned long long> g_copies{0};

struct Pending {
  ggml_backend_t src = nullptr, dst_backend = nullptr;
  ggml_tensor* dst = nullptr;
  std::unique_ptr<std::vector<uint8_t>> data;
};

std::mutex g_mu;
std::vector<Pending> g_pending;
std::vector<std::unique_ptr<std::vector<uint8_t>>> g_spare;  // read buffers to reuse

SyncFn real_sync() {
  static const auto fn = reinterpret_cast<SyncFn>(dlsym(RTLD_NEXT, "ggml_backend_synchronize"));
  return fn;
}

bool rpc_backend(ggml_backend_t b) { return b != nullptr && is_rpc_device(ggml_backend_get_device(b)); }

// Queues the read of `src` on its device; false when the copy is not one this handles.
bool queue_copy(ggml_backend_t backend_src, ggml_backend_t backend_dst, const ggml_tensor* src, ggml_tensor* dst) {
  if (!g_on.load(std::memory_order_relaxed) || backend_src == backend_dst || backend_src == nullptr ||
      backend_dst == nullptr || !(rpc_backend(backend_src) || rpc_backend(backend_dst)) || !ggml_is_contiguous(src) ||
      !ggml_is_contiguous(dst) || ggml_nbytes(src) != ggml_nbytes(dst) || src->buffer == nullptr ||
      dst->buffer == nullptr) {
    return false;
  }
  Pending p;
  p.src = backend_src;
  p.dst_backend = backend_dst;
  p.dst = dst;
  {
    std::lock_guard<std::mutex> lock(g_mu);
    if (!g_spare.empty()) {
      p.data = std::move(g_spare.back());
      g_spare.pop_back();
    } else {
      p.data = std::make_unique<std::vector<uint8_t>>();
    }
  }
  p.data->resize(ggml_nbytes(src));
  // In the source's queue after the graph that made it, so it reads the finished part.
  ggml_backend_tensor_get_async(backend_src, src, p.data->data(), 0, p.data->size());
  std::lock_guard<std::mutex> lock(g_mu);
  g_pending.push_back(std::move(p));
  g_any_pending.store(true, std::memory_order_release);
  g_copies.fetch_add(1, std::memory_order_relaxed);
  return true;
}

}  // namespace

Status set_overlapped_reduce_copies(bool on) {
  if (!on) {
    g_on = false;
    return Status::ok();
  }
  if (dlsym(RTLD_DEFAULT, "ggml_backend_tensor_copy_async") !=
      reinterpret_cast<void*>(&::ggml_backend_tensor_copy_async)) {
    return Status::internal("ggml_backend_tensor_copy_async does not resolve to tandem's definition");
  }
  g_on = true;
  return Status::ok();
}

unsigned long long overlapped_copies() { return g_copies.load(std::memory_order_relaxed); }

void flush_reduce_copies(ggml_backend_t backend) {
  if (!g_any_pending.load(std::memory_order_acquire)) return;
  // Reused: this runs before every launch of a tensor split's step, twice per layer.
  thread_local std::vector<Pending> mine;
  mine.clear();
  {
    std::lock_guard<std::mutex> lock(g_mu);
    for (size_t i = 0; i < g_pending.size();) {
      // A device's synchronisation also waits for the copies it is the source of: write them too,
      // so nothing stays queued past a point where ggml expects every copy done.
      if (g_pending[i].dst_backend == backend || g_pending[i].src == backend) {
        mine.push_back(std::move(g_pending[i]));
        g_pending.erase(g_pending.begin() + static_cast<long>(i));
      } else {
        ++i;
      }
    }
    g_any_pending.store(!g_pending.empty(), std::memory_order_release);
  }
  for (Pending& p : mine) {
    real_sync()(p.src);  // the read has arrived
    ggml_backend_tensor_set_async(p.dst_backend, p.dst, p.data->data(), 0, p.data->size());
  }
  std::lock_guard<std::mutex> lock(g_mu);
  for (Pending& p : mine) g_spare.push_back(std::move(p.data));
  mine.clear();
}

}  // namespace tandem::datapath

// ggml's own forwards every copy this does not overlap (see reduce_copies.h).
extern "C" void ggml_backend_tensor_copy_async(ggml_backend_t backend_src, ggml_backend_t backend_dst,
                                               const struct ggml_tensor* src, struct ggml_tensor* dst) {
  static const auto real =
      reinterpret_cast<tandem::datapath::CopyAsyncFn>(dlsym(RTLD_NEXT, "ggml_backend_tensor_copy_async"));
  if (src == dst || tandem::datapath::queue_copy(backend_src, backend_dst, src, dst)) return;
  real(backend_src, backend_dst, src, dst);
}
