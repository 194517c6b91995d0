#include "datapath/local_inputs.h"

#include <atomic>
#include <cstring>
#include <mutex>
#include <unordered_map>
#include <vector>

#include "common/step_trace.h"
#include "datapath/device_stream.h"
#include "ggml-backend.h"
#include "ggml.h"

namespace tandem::datapath {
namespace {

// A decode step's copies are a few hundred bytes each; a long prompt's masks a few MiB per chunk.
constexpr size_t kArenaBytes = size_t{32} << 20;
constexpr size_t kMaxStaged = size_t{16} << 20;
constexpr size_t kAlign = 256;

uint64_t now_ns() { return step_trace_now(); }

}  // namespace

struct LocalInputs::Deferred {
  const ggml_tensor* src;
  ggml_tensor to;
};

// One per GPU buffer type. `firsts` holds the current split's first copies; they stay intact until
// the split's graph, which comes after every copy on the device's stream, runs.
struct LocalInputs::Queue {
  DeviceStream stream;
  ggml_backend_dev_t dev = nullptr;
  size_t used = 0;
  bool pending = false;  // copies queued since the device's stream last waited for the queue
  std::unordered_map<CopyKey, First, CopyKeyHash> firsts;
  std::vector<Deferred> deferred;
  // Input slots: this run's inputs, once each, at offsets in the order of the copies.
  ggml_backend_buffer_t slots = nullptr;
  ggml_backend_t last_launch = nullptr;  // the backend of the last split launched on this device
  bool slots_failed = false;
  size_t slots_used = 0;
  std::unordered_map<CopyKey, size_t, CopyKeyHash> slot_of;
};

// Page-locked room for `n` bytes in `q`'s arena, waiting for the stream when it is full.
uint8_t* LocalInputs::stage(Queue& q, size_t n) {
  if (q.used + n > q.stream.size) {
    ggml_backend_synchronize(q.stream.backend);  // the staged bytes are read
    q.used = 0;
  }
  uint8_t* at = q.stream.base + q.used;
  q.used += (n + kAlign - 1) / kAlign * kAlign;
  return at;
}

// Reads the deferred results of the split about to launch (waiting for their servers) and queues
// them onto the device. A result read twice for the split (the same bytes of the same server's
// buffer) is copied on the device from the first read instead; only within one split, whose input
// copies all stay intact until its graph runs (without pipeline parallelism ggml may reuse an
// earlier split's input memory once that split has run).
// MiniMax-M3's sparse layers each read a view of one mask the worker's first sparse layer cast,
// so without this a 512-token chunk read 512 × positions × 4 bytes over the link per head layer.
void LocalInputs::read_deferred(Queue& q) {
  if (q.deferred.empty()) return;
  const uint64_t t0 = now_ns();
  uint64_t bytes = 0;
  std::unordered_map<CopyKey, First, CopyKeyHash> firsts;
  for (Deferred& d : q.deferred) {
    const size_t n = ggml_nbytes(d.src);
    const CopyKey key{d.src->view_src != nullptr ? d.src->view_src->buffer : d.src->buffer, 0, d.src->data, n};
    auto first = firsts.find(key);
    if (first != firsts.end()) {
      if (first->second.data != d.to.data) {
        ggml_tensor from = raw_bytes(first->second.buffer, first->second.data, n);
        ggml_backend_tensor_copy_async(q.stream.backend, q.stream.backend, &from, &d.to);
        q.pending = true;
      }
      results_repeated_.fetch_add(1, std::memory_order_relaxed);
      result_bytes_not_read_.fetch_add(n, std::memory_order_relaxed);
      continue;
    }
    bytes += n;
    if (n <= kMaxStaged) {
      uint8_t* staged = stage(q, n);
      ggml_backend_tensor_get(d.src, staged, 0, n);
      ggml_backend_tensor_set_async(q.stream.backend, &d.to, staged, 0, n);
      q.pending = true;
    } else {
      std::vector<uint8_t> host(n);
      ggml_backend_tensor_get(d.src, host.data(), 0, n);
      ggml_backend_tensor_set(&d.to, host.data(), 0, n);
    }
    firsts.emplace(key, First{d.to.buffer, d.to.data});
  }
  deferred_.fetch_add(q.deferred.size(), std::memory_order_relaxed);
  q.deferred.clear();
  const uint64_t t1 = now_ns();
  deferred_ns_.fetch_add(t1 - t0, std::memory_order_relaxed);
  step_trace("from-workers", t0, t1, bytes);
}

namespace {

// What ggml_backend_tensor_copy asserts before copying raw bytes.
bool same_layout(const ggml_tensor* a, const ggml_tensor* b) {
  if (a->type != b->type) return false;
  for (int i = 0; i < GGML_MAX_DIMS; ++i) {
    if (a->ne[i] != b->ne[i] || a->nb[i] != b->nb[i]) return false;
  }
  return true;
}

// The device buffer a copy of `src` into `dst` writes: one this file takes (not host memory, not
// weights, a plain byte copy); nullptr otherwise.
ggml_backend_buffer_t device_destination(const ggml_tensor* src, const ggml_tensor* dst) {
  ggml_backend_buffer_t buf = dst->view_src != nullptr ? dst->view_src->buffer : dst->buffer;
  if (buf == nullptr || dst->data == nullptr || ggml_backend_buffer_is_host(buf) ||
      ggml_backend_buffer_get_usage(buf) == GGML_BACKEND_BUFFER_USAGE_WEIGHTS || !same_layout(src, dst) ||
      ggml_nbytes(src) == 0) {
    return nullptr;
  }
  return buf;
}

}  // namespace

LocalInputs::Queue* LocalInputs::queue_for(ggml_backend_buffer_t buf) {
  ggml_backend_buffer_type_t buft = ggml_backend_buffer_get_type(buf);
  auto it = queues_.find(buft);
  if (it == queues_.end()) {
    auto q = std::make_unique<Queue>();
    q->stream = open_device_stream(buft, kArenaBytes, /*with_event=*/true);
    q->dev = ggml_backend_buft_get_device(buft);
    it = queues_.emplace(buft, std::move(q)).first;
  }
  return it->second->stream.backend != nullptr ? it->second.get() : nullptr;
}

// The split about to run on `backend` reads what was queued: its stream waits for the queue.
void LocalInputs::hand_over(Queue& q, ggml_backend_t backend) {
  q.last_launch = backend;
  read_deferred(q);
  if (q.pending) {
    if (q.stream.event != nullptr) {
      ggml_backend_event_record(q.stream.event, q.stream.backend);
      ggml_backend_event_wait(backend, q.stream.event);
    } else {
      ggml_backend_synchronize(q.stream.backend);
    }
    q.pending = false;
  }
  q.firsts.clear();
}

// Input slots: points `dst` at this run's copy of the bytes `key` names in `q`'s slot buffer,
// staging them there first if they are not yet; false when they do not fit (the same in every run
// of a graph, so a graph's addresses do not change between its runs).
bool LocalInputs::place_in_slot(Queue& q, ggml_backend_buffer_t buf, const ggml_tensor* src, ggml_tensor* dst,
                                const CopyKey& key) {
  if (q.slots_failed || dst->view_src != nullptr) return false;
  if (q.slots == nullptr) {
    q.slots = ggml_backend_buft_alloc_buffer(ggml_backend_buffer_get_type(buf), slot_bytes_);
    if (q.slots == nullptr) {
      q.slots_failed = true;
      return false;
    }
  }
  auto* base = static_cast<uint8_t*>(ggml_backend_buffer_get_base(q.slots));
  auto it = q.slot_of.find(key);
  if (it == q.slot_of.end()) {
    const size_t align = ggml_backend_buffer_get_alignment(q.slots);
    const size_t need = (key.bytes + align - 1) / align * align;
    if (key.bytes > kMaxStaged || q.slots_used + need > ggml_backend_buffer_get_size(q.slots)) return false;
    // The slots are rewritten every run: the last run's graphs on this device must be done reading
    // them. ggml's scheduler has waited for them already unless it pipelines (then it waits for an
    // older run's only).
    if (q.slots_used == 0 && q.last_launch != nullptr) {
      const uint64_t t0 = now_ns();
      ggml_backend_synchronize(q.last_launch);
      step_trace("slot-wait", t0, now_ns());
    }
    it = q.slot_of.emplace(key, q.slots_used).first;
    q.slots_used += need;
    ggml_tensor slot = raw_bytes(q.slots, base + it->second, key.bytes);
    uint8_t* staged = stage(q, key.bytes);
    std::memcpy(staged, src->data, key.bytes);
    ggml_backend_tensor_set_async(q.stream.backend, &slot, staged, 0, key.bytes);
    q.pending = true;
    staged_.fetch_add(1, std::memory_order_relaxed);
  } else {
    repeated_.fetch_add(1, std::memory_order_relaxed);
    bytes_not_copied_.fetch_add(key.bytes, std::memory_order_relaxed);
  }
  dst->buffer = q.slots;
  dst->data = base + it->second;
  return true;
}

void LocalInputs::before_launch(ggml_backend_t backend) {
  std::lock_guard<std::mutex> lock(mutex_);
  if (queues_.empty()) return;
  ggml_backend_dev_t dev = ggml_backend_get_device(backend);
  for (auto& entry : queues_) {
    if (entry.second->stream.backend != nullptr && entry.second->dev == dev) hand_over(*entry.second, backend);
  }
}

LocalInputs::LocalInputs(uint64_t slot_bytes) : slot_bytes_(slot_bytes) {}

LocalInputs::~LocalInputs() {
  std::lock_guard<std::mutex> lock(mutex_);
  for (auto& entry : queues_) {
    close_device_stream(entry.second->stream);
    if (entry.second->slots != nullptr) ggml_backend_buffer_free(entry.second->slots);
  }
  queues_.clear();
}

LocalInputStats LocalInputs::stats() const {
  LocalInputStats s;
  s.staged = staged_.load();
  s.repeated = repeated_.load();
  s.bytes_not_copied = bytes_not_copied_.load();
  s.deferred = deferred_.load();
  s.results_repeated = results_repeated_.load();
  s.result_bytes_not_read = result_bytes_not_read_.load();
  s.deferred_s = deferred_ns_.load() / 1e9;
  return s;
}

bool LocalInputs::copy(const ggml_tensor* src, ggml_tensor* dst, const ReuseTable::Identity* id) {
  ggml_backend_buffer_t buf = device_destination(src, dst);
  if (buf == nullptr) return false;
  const size_t n = ggml_nbytes(src);
  std::lock_guard<std::mutex> lock(mutex_);
  Queue* q = queue_for(buf);
  if (q == nullptr) return false;
  ggml_tensor to = raw_bytes(buf, dst->data, n);
  const CopyKey key{id != nullptr ? id->tensor : nullptr, id != nullptr ? id->offset : 0, src->data, n};
  if (slot_bytes_ > 0 && id != nullptr && place_in_slot(*q, buf, src, dst, key)) return true;
  if (id != nullptr) {
    auto it = q->firsts.find(key);
    if (it != q->firsts.end()) {
      if (it->second.data != dst->data) {
        ggml_tensor from = raw_bytes(it->second.buffer, it->second.data, n);
        ggml_backend_tensor_copy_async(q->stream.backend, q->stream.backend, &from, &to);
        q->pending = true;
      }
      repeated_.fetch_add(1, std::memory_order_relaxed);
      bytes_not_copied_.fetch_add(n, std::memory_order_relaxed);
      return true;
    }
  }
  if (n <= kMaxStaged) {
    uint8_t* staged = stage(*q, n);
    std::memcpy(staged, src->data, n);
    ggml_backend_tensor_set_async(q->stream.backend, &to, staged, 0, n);
    q->pending = true;
    staged_.fetch_add(1, std::memory_order_relaxed);
  } else {
    ggml_backend_tensor_set(&to, src->data, 0, n);  // too big to stage: ggml's copy, which waits
  }
  if (id != nullptr) q->firsts.emplace(key, First{buf, dst->data});
  return true;
}

bool LocalInputs::defer_worker_result(const ggml_tensor* src, ggml_tensor* dst) {
  ggml_backend_buffer_t buf = device_destination(src, dst);
  if (buf == nullptr) return false;
  std::lock_guard<std::mutex> lock(mutex_);
  Queue* q = queue_for(buf);
  if (q == nullptr) return false;
  q->deferred.push_back(Deferred{src, raw_bytes(buf, dst->data, ggml_nbytes(src))});
  return true;
}

void LocalInputs::new_run() {
  std::lock_guard<std::mutex> lock(mutex_);
  for (auto& entry : queues_) {
    Queue& q = *entry.second;
    if (q.stream.backend == nullptr) continue;
    // Copies queued but never launched (a failed run) still land before anything else is queued.
    if (q.used > 0 || q.pending) ggml_backend_synchronize(q.stream.backend);
    q.used = 0;
    q.pending = false;
    q.firsts.clear();
    q.deferred.clear();  // never launched
    q.slots_used = 0;
    q.slot_of.clear();
  }
}

}  // namespace tandem::datapath
