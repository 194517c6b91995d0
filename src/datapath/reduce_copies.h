// The tensor splits' reductions through the head, overlapped.
//
// llama.cpp's meta device (both tensor splits: engine::Placement) adds the devices' partial sums
// by copying each device's part to the others: ggml_backend_tensor_copy_async, which to or from an
// RPC server waits for the source, waits for the destination, reads the source (over the link) and
// writes the destination, one copy after the other. With this on, the head's session (through its
// interposer of that function, datapath/interpose.h) queues each copy's read at once and writes the
// destination just before that device next runs a graph or is synchronised: the reads of one
// reduction travel together, one wait on the link per reduction instead of two round trips per
// copy. Copies with no RPC device on either side are ggml's own.
#pragma once

#include <atomic>
#include <memory>
#include <mutex>
#include <vector>

#include "ggml-backend.h"

namespace tandem::datapath {

class ReduceCopies {
 public:
  ReduceCopies() = default;
  ReduceCopies(const ReduceCopies&) = delete;
  ReduceCopies& operator=(const ReduceCopies&) = delete;

  // Queues the read of `src` on its device and returns true; false leaves the copy to ggml (not
  // one between two backends of which one is an RPC server's, or not contiguous).
  bool queue(ggml_backend_t backend_src, ggml_backend_t backend_dst, const ggml_tensor* src, ggml_tensor* dst);

  // Writes the copies queued for `backend` (their reads done first). The session calls it before
  // every graph launch and synchronisation of a device; harmless when none is queued.
  void flush(ggml_backend_t backend);

  // Copies whose read was queued so far.
  unsigned long long copies() const { return copies_.load(std::memory_order_relaxed); }

 private:
  struct Pending {
    ggml_backend_t src = nullptr, dst_backend = nullptr;
    ggml_tensor* dst = nullptr;
    std::unique_ptr<std::vector<uint8_t>> data;
  };
  std::atomic<bool> any_pending_{false};
  std::atomic<unsigned long long> copies_{0};
  std::mutex mu_;
  std::vector<Pending> pending_;                              // guarded by mu_
  std::vector<std::unique_ptr<std::vector<uint8_t>>> spare_;  // guarded by mu_: read buffers to reuse
};

}  // namespace tandem::datapath
