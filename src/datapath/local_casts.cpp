#include "datapath/local_casts.h"

#include <atomic>
#include <cstring>
#include <memory>
#include <unordered_map>
#include <vector>

#include "ggml-backend.h"
#include "ggml.h"

namespace tandem::datapath {
namespace {

std::atomic<bool> g_on{true};
std::atomic<uint64_t> g_casts{0}, g_cast_bytes{0};

// This run's host inputs by the worker tensor the scheduler copied each into, and the f32
// conversions made of them. Forgotten when a new run begins; the conversions' buffers are kept
// for the next runs (a prompt chunk's mask is megabytes: fresh memory each chunk would fault in).
thread_local uint64_t t_epoch = 0;
thread_local std::unordered_map<const ggml_tensor*, const ggml_tensor*> t_inputs;
thread_local std::unordered_map<const ggml_tensor*, std::vector<float>*> t_converted;
thread_local std::vector<std::unique_ptr<std::vector<float>>> t_buffers;

void enter(uint64_t epoch) {
  if (t_epoch == epoch) return;
  t_epoch = epoch;
  t_inputs.clear();
  t_converted.clear();
}

// A buffer of `n` floats none of this run's conversions holds.
std::vector<float>* free_buffer(size_t n) {
  if (t_converted.size() == t_buffers.size()) t_buffers.push_back(std::make_unique<std::vector<float>>());
  std::vector<float>* b = t_buffers[t_converted.size()].get();
  b->resize(n);
  return b;
}

}  // namespace

void note_worker_input(const ggml_tensor* src, const ggml_tensor* dst, uint64_t epoch) {
  if (epoch == 0 || !g_on.load(std::memory_order_relaxed)) return;
  if (src->type != GGML_TYPE_F16 || src->view_src != nullptr || src->buffer == nullptr ||
      !ggml_backend_buffer_is_host(src->buffer) || !ggml_is_contiguous(src) || dst->type != GGML_TYPE_F16 ||
      !ggml_are_same_shape(src, dst) || !ggml_is_contiguous(dst)) {
    return;
  }
  enter(epoch);
  t_inputs[dst] = src;
}

bool make_worker_result_here(const ggml_tensor* src, uint64_t epoch, ggml_tensor* out, ReuseTable::Identity* id) {
  if (epoch == 0 || epoch != t_epoch || t_inputs.empty() || !g_on.load(std::memory_order_relaxed)) return false;
  const ggml_tensor* cast = src->view_src != nullptr ? src->view_src : src;
  // ggml_cast: a CPY whose second source is itself.
  // pinned llama.cpp: text ggml/src/ggml.c result->op = GGML_OP_CPY; result->src[0] = a; result->src[1] = result;
  if (cast->op != GGML_OP_CPY || cast->src[1] != cast || cast->type != GGML_TYPE_F32 || cast->src[0] == nullptr ||
      !ggml_is_contiguous(cast) || cast->data == nullptr || src->data == nullptr) {
    return false;
  }
  auto input = t_inputs.find(cast->src[0]);
  if (input == t_inputs.end() || ggml_nelements(input->second) != ggml_nelements(cast)) return false;
  const ggml_tensor* mask = input->second;
  const ptrdiff_t offset = static_cast<const char*>(src->data) - static_cast<const char*>(cast->data);
  const size_t n = ggml_nbytes(src);
  if (offset < 0 || offset % sizeof(float) != 0 || static_cast<size_t>(offset) + n > ggml_nbytes(cast)) return false;
  auto converted = t_converted.find(mask);
  if (converted == t_converted.end()) {
    std::vector<float>* b = free_buffer(static_cast<size_t>(ggml_nelements(mask)));
    ggml_fp16_to_fp32_row(static_cast<const ggml_fp16_t*>(mask->data), b->data(), ggml_nelements(mask));
    converted = t_converted.emplace(mask, b).first;
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
  g_casts.fetch_add(1, std::memory_order_relaxed);
  g_cast_bytes.fetch_add(n, std::memory_order_relaxed);
  return true;
}

void set_local_casts(bool on) { g_on = on; }
uint64_t local_casts() { return g_casts.load(); }
uint64_t local_cast_bytes() { return g_cast_bytes.load(); }

}  // namespace tandem::datapath
