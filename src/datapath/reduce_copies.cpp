#include "datapath/reduce_copies.h"

#include "datapath/ggml_devices.h"
#include "datapath/interpose.h"

namespace tandem::datapath {
namespace {

bool rpc_backend(ggml_backend_t b) { return b != nullptr && is_rpc_device(ggml_backend_get_device(b)); }

}  // namespace

bool ReduceCopies::queue(ggml_backend_t backend_src, ggml_backend_t backend_dst, const ggml_tensor* src,
                         ggml_tensor* dst) {
  if (backend_src == backend_dst || backend_src == nullptr || backend_dst == nullptr ||
      !(rpc_backend(backend_src) || rpc_backend(backend_dst)) || !ggml_is_contiguous(src) || !ggml_is_contiguous(dst) ||
      ggml_nbytes(src) != ggml_nbytes(dst) || src->buffer == nullptr || dst->buffer == nullptr) {
    return false;
  }
  Pending p;
  p.src = backend_src;
  p.dst_backend = backend_dst;
  p.dst = dst;
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (!spare_.empty()) {
      p.data = std::move(spare_.back());
      spare_.pop_back();
    } else {
      p.data = std::make_unique<std::vector<uint8_t>>();
    }
  }
  p.data->resize(ggml_nbytes(src));
  // In the source's queue after the graph that made it, so it reads the finished part.
  ggml_backend_tensor_get_async(backend_src, src, p.data->data(), 0, p.data->size());
  std::lock_guard<std::mutex> lock(mu_);
  pending_.push_back(std::move(p));
  any_pending_.store(true, std::memory_order_release);
  copies_.fetch_add(1, std::memory_order_relaxed);
  return true;
}

void ReduceCopies::flush(ggml_backend_t backend) {
  if (!any_pending_.load(std::memory_order_acquire)) return;
  // Reused: this runs before every launch of a tensor split's step, twice per layer.
  thread_local std::vector<Pending> mine;
  mine.clear();
  {
    std::lock_guard<std::mutex> lock(mu_);
    for (size_t i = 0; i < pending_.size();) {
      // A device's synchronisation also waits for the copies it is the source of: write them too,
      // so nothing stays queued past a point where ggml expects every copy done.
      if (pending_[i].dst_backend == backend || pending_[i].src == backend) {
        mine.push_back(std::move(pending_[i]));
        pending_.erase(pending_.begin() + static_cast<long>(i));
      } else {
        ++i;
      }
    }
    any_pending_.store(!pending_.empty(), std::memory_order_release);
  }
  for (Pending& p : mine) {
    real_synchronize()(p.src);  // the read has arrived
    ggml_backend_tensor_set_async(p.dst_backend, p.dst, p.data->data(), 0, p.data->size());
  }
  std::lock_guard<std::mutex> lock(mu_);
  for (Pending& p : mine) spare_.push_back(std::move(p.data));
  mine.clear();
}

}  // namespace tandem::datapath
