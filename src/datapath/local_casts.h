// Worker results the head makes itself instead of reading them over the link.
//
// MiniMax-M3's first sparse layer casts the step's attention mask (f16, positions × tokens) to f32
// once, and every later sparse layer reads a view of that cast. When a worker holds the first
// sparse layer and the head, or a second worker, holds later ones, the cast's bytes cross the link
// once per step: 8 MB for a 512-token chunk at 4096 positions, 64 MB at 32k. Yet the head holds
// the f16 mask they were made from: it is a step input, which the head sent to that worker. So the
// scheduler's copies of host inputs into workers are noted per run, and a read of a worker's f32
// cast of one is answered from the head's own f16 bytes, converted here (exact: every f16 value is
// an f32 value).
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <unordered_map>
#include <vector>

#include "datapath/input_reuse.h"

struct ggml_tensor;

namespace tandem::datapath {

// One head session's casts (datapath/head_session.h); used by the scheduler's thread only.
class LocalCasts {
 public:
  // `on` false: every worker result is read over the link (for measurement).
  explicit LocalCasts(bool on = true) : on_(on) {}
  LocalCasts(const LocalCasts&) = delete;
  LocalCasts& operator=(const LocalCasts&) = delete;

  // The scheduler copies host tensor `src` into `dst`, in a worker's buffer, during run `epoch`.
  void note_worker_input(const ggml_tensor* src, const ggml_tensor* dst, uint64_t epoch);

  // When `src`, in a worker's buffer, is an f16 → f32 cast of a step input noted in run `epoch` (or
  // a view of one), fills `*out` with a host tensor of src's layout holding the bytes a read of
  // `src` would return, and `*id` with their identity for the input paths' reuse; the bytes stay
  // valid until the next run. False, touching nothing, for anything else or when off.
  bool make_worker_result_here(const ggml_tensor* src, uint64_t epoch, ggml_tensor* out, ReuseTable::Identity* id);

  // Worker results made here, and their bytes.
  uint64_t casts() const { return casts_.load(std::memory_order_relaxed); }
  uint64_t cast_bytes() const { return cast_bytes_.load(std::memory_order_relaxed); }

 private:
  void enter(uint64_t epoch);
  std::vector<float>* free_buffer(size_t n);

  const bool on_;
  std::atomic<uint64_t> casts_{0}, cast_bytes_{0};  // read by stats() from any thread
  // This run's host inputs by the worker tensor the scheduler copied each into, and the f32
  // conversions made of them. Forgotten when a new run begins; the conversions' buffers are kept
  // for the next runs (a prompt chunk's mask is megabytes: fresh memory each chunk would fault in).
  uint64_t epoch_ = 0;
  std::unordered_map<const ggml_tensor*, const ggml_tensor*> inputs_;
  std::unordered_map<const ggml_tensor*, std::vector<float>*> converted_;
  std::vector<std::unique_ptr<std::vector<float>>> buffers_;
};

}  // namespace tandem::datapath
