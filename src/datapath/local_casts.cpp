#include "datapath/local_casts.h"

#include <cstring>
#include <memory>
#include <unordered_map>
#include <vector>

#include "ggml-backend.h"
#include "ggml.h"

namespace tandem::datapath {

void LocalCasts::enter(uint64_t epoch) {
  if (epoch_ == epoch) return;
  epoch_ = epoch;
  inputs_.clear();
  converted_.clear();
}

// A buffer of `n` floats none of this run's conversions holds.
std::vector<float>* LocalCasts::free_buffer(size_t n) {
  if (converted_.size() == buffers_.size()) buffers_.push_back(std::make_unique<std::vector<float>>());
  std::vector<float>* b = buffers_[converted_.size()].get();
  b->resize(n);
  return b;
}

void LocalCasts::note_worker_input(const ggml_tensor* src, const ggml_tensor* dst, uint64_t epoch) {
  if (epoch == 0 || !on_) return;
  if (src->type != GGML_TYPE_F16 || src->view_src != nullptr || src->buffer == nullptr ||
      !ggml_backend_buffer_is_host(src->buffer) || !ggml_is_contiguous(src) || dst->type != GGML_TYPE_F16 ||
      !ggml_are_same_shape(src, dst) || !ggml_is_contiguous(dst)) {
    return;
  }
  enter(epoch);
  inputs_[dst] = src;
}

bool LocalCasts::make_worker_result_here(const ggml_tensor* src, uint64_t epoch, ggml_tensor* out,
                                         ReuseTable::Identity* id) {
  if (epoch == 0 || epoch != epoch_ || inputs_.empty() || !on_) return false;
  const ggml_tensor* cast = src->view_src != nullptr ? src->view_src : src;
  // ggml_cast: a CPY whose second source is itself.
  // pinned llama.cpp: text ggml/src/ggml.c result->op = GGML_OP_CPY; result->src[0] = a; result->src[1] = result;
  if (cast->op != GGML_OP_CPY || cast->src[1] != cast || cast->type != GGML_TYPE_F32 || cast->src[0] == nullptr ||
      !ggml_is_contiguous(cast) || cast->data == nullptr || src->data == nullptr) {
    return false;
  }
  auto input = inputs_.find(cast->src[0]);
  if (input == inputs_.end() || ggml_nelements(input->second) != ggml_nelements(cast)) return false;
  const ggml_tensor* mask = input->second;
  const ptrdiff_t offset = static_cast<const char*>(src->data) - static_cast<const char*>(cast->data);
  const size_t n = ggml_nbytes(src);
  if (offset < 0 || offset % sizeof(float) != 0 || static_cast<size_t>(offset) + n > ggml_nbytes(cast)) return false;
  auto converted = converted_.find(mask);
  if (converted == converted_.end()) {
    std::vector<float>* b = free_buffer(static_cast<size_t>(ggml_nelements(mask)));
    ggml_fp16_to_fp32_row(static_cast<const ggml_fp16_t*>(mask->data), b->data(), ggml_nelements(mask));
    converted = converted_.emplace(mask, b).first;
  }
  std::vector<float>* f32 = converted->second;
  *out = *src;
  out->buffer = nullptr;
  out->view_src = nullptr;
  out->view_offs = 0;
  out->op = GGML_OP_NONE;
  std::memset(out->src, 0, sizeof out->src);
  out->data = reinterpret_cast<char*>(f32->data()) + offset;
  *id = ReuseTable::Identity{f32, static_cast<size_t>(offset), out->data, epoch};
  casts_.fetch_add(1, std::memory_order_relaxed);
  cast_bytes_.fetch_add(n, std::memory_order_relaxed);
  return true;
}

}  // namespace tandem::datapath
