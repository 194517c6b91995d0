#include "datapath/input_writes.h"

#include <unistd.h>

#include <array>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <thread>
#include <unordered_map>

#include "common/log.h"
#include "common/step_trace.h"
#include "common/units.h"
#include "datapath/device_stream.h"
#include "datapath/input_reuse.h"
#include "datapath/interpose.h"
#include "ggml-backend.h"
#include "ggml.h"
#include "link/protocol.h"

namespace tandem::datapath {

using link::decode_word_runs;
using link::kReuseMarkerSize;
using link::kReuseSlots;
using link::kWordRunsHeader;
using link::parse_reuse_marker;
using link::ReuseMarker;
using link::ReuseOp;
using link::word_runs_size;
namespace {

constexpr size_t kMaxWrite = size_t{1} << 20;
constexpr size_t kArenaBytes = size_t{8} << 20;
constexpr size_t kAlign = 256;

uint64_t now_ns() { return step_trace_now(); }

// A marker that cannot be what the head meant: the head and this child disagree about the slots,
// and computing on would use wrong inputs. Ends the process, as a failed cached load does.
[[noreturn]] void reuse_failed(const std::string& why) {
  log::error("rpc-server",
             "repeated input: " + why +
                 "; the RPC server stops rather than compute with a wrong input "
                 "(the worker restarts it). Head and worker should run the same tandem build (`tandem doctor` "
                 "checks); if they do, this is a bug: report this line");
  std::fflush(nullptr);
  std::this_thread::sleep_for(std::chrono::milliseconds(200));  // see cache_loader.cpp
  ::_exit(kInputReuseFailedExit);
}

}  // namespace

void InputWrites::flush_locked() {
  for (auto& entry : queues_) {
    DeviceQueue& q = entry.second;
    if (!q.pending) continue;
    ggml_backend_synchronize(q.stream.backend);
    q.pending = false;
    q.used = 0;
  }
  pending_.store(false, std::memory_order_release);
}

// The queue of `buft`, opened on first use; nullptr when writes to it are not queued. Under mutex_.
InputWrites::DeviceQueue* InputWrites::queue_of(ggml_backend_buffer_type_t buft) {
  auto it = queues_.find(buft);
  if (it == queues_.end()) {
    it = queues_.emplace(buft, DeviceQueue{open_device_stream(buft, kArenaBytes, /*with_event=*/false)}).first;
  }
  return it->second.stream.backend != nullptr ? &it->second : nullptr;
}

// A device-to-device copy, queued behind the queued writes on that device's stream when there is
// one; otherwise after them, waiting.
void InputWrites::copy_bytes(ggml_tensor* src, ggml_tensor* dst) {
  DeviceQueue* q = queueing_ ? queue_of(ggml_backend_buffer_get_type(dst->buffer)) : nullptr;
  if (q == nullptr) {
    if (pending_.load(std::memory_order_relaxed)) flush_locked();
    ggml_backend_tensor_copy(src, dst);
    return;
  }
  ggml_backend_tensor_copy_async(q->stream.backend, q->stream.backend, src, dst);
  q->pending = true;
  pending_.store(true, std::memory_order_relaxed);
}

void InputWrites::free_slot(Slot& s) {
  if (s.buffer != nullptr) {
    if (pending_.load(std::memory_order_relaxed)) flush_locked();  // a queued copy may still read it
    ggml_backend_buffer_free(s.buffer);
  }
  s = Slot{};
}

void InputWrites::apply_marker(ggml_tensor* tensor, size_t offset, const ReuseMarker& m) {
  ggml_backend_buffer_t buf = tensor->view_src != nullptr ? tensor->view_src->buffer : tensor->buffer;
  if (buf == nullptr || offset + m.bytes > ggml_nbytes(tensor)) {
    reuse_failed(std::string("a marker for ") + format_bytes(m.bytes) + " at offset " + std::to_string(offset) +
                 " of tensor '" + tensor->name + "' (" + format_bytes(ggml_nbytes(tensor)) + ")");
  }
  std::lock_guard<std::recursive_mutex> lock(mutex_);
  if (m.session != session_.load()) {
    if (m.op == ReuseOp::copy) reuse_failed("a copy from slot " + std::to_string(m.slot) + " of another session");
    for (Slot& s : slots_) free_slot(s);
    session_.store(m.session);
  }
  ggml_tensor region = raw_bytes(buf, static_cast<uint8_t*>(tensor->data) + offset, m.bytes);
  Slot& slot = slots_[m.slot];
  if (m.op == ReuseOp::copy) {
    if (slot.buffer == nullptr || slot.bytes != m.bytes) {
      reuse_failed("slot " + std::to_string(m.slot) + " holds " + format_bytes(slot.bytes) + ", the head asked for " +
                   format_bytes(m.bytes));
    }
    ggml_tensor kept = raw_bytes(slot.buffer, ggml_backend_buffer_get_base(slot.buffer), m.bytes);
    copy_bytes(&kept, &region);
    reuse_copies_.fetch_add(1, std::memory_order_relaxed);
    return;
  }
  for (uint32_t i = 0; i < kReuseSlots; ++i) {
    if ((m.drop >> i & 1u) != 0 && i != m.slot) free_slot(slots_[i]);
  }
  ggml_backend_buffer_type_t type = ggml_backend_buffer_get_type(buf);
  const size_t capacity = slot.buffer != nullptr ? ggml_backend_buffer_get_size(slot.buffer) : 0;
  // Exact-ish sizes keep the device memory held close to what the head counts.
  if (slot.type != type || capacity < m.bytes || capacity > m.bytes + m.bytes / 4) {
    free_slot(slot);
    slot.buffer = ggml_backend_buft_alloc_buffer(type, m.bytes);
    if (slot.buffer == nullptr)
      reuse_failed("cannot allocate " + format_bytes(m.bytes) + " on " + ggml_backend_buft_name(type));
    slot.type = type;
  }
  ggml_tensor kept = raw_bytes(slot.buffer, ggml_backend_buffer_get_base(slot.buffer), m.bytes);
  copy_bytes(&region, &kept);
  slot.bytes = m.bytes;
}

// An input the head sent as runs (link/protocol.h): expanded here, then written as if it had
// come whole. Runs that would write past the tensor stop the process, as a bad marker does.
void InputWrites::expand_runs(ggml_tensor* tensor, const void* data, size_t offset, size_t size, uint64_t expanded) {
  if (offset + expanded > ggml_nbytes(tensor)) {
    reuse_failed(std::string("runs expanding to ") + format_bytes(expanded) + " at offset " + std::to_string(offset) +
                 " of tensor '" + tensor->name + "' (" + format_bytes(ggml_nbytes(tensor)) + ")");
  }
  thread_local std::vector<uint8_t> bytes;  // kept: a fresh buffer a chunk would fault in every page
  bytes.resize(expanded);
  if (!decode_word_runs(data, size, bytes.data(), expanded)) reuse_failed("runs that do not decode");
  runs_expanded_.fetch_add(1, std::memory_order_relaxed);
  if (place_write(tensor, bytes.data(), offset, expanded)) return;
  real_tensor_set()(tensor, bytes.data(), offset, expanded);  // place_write waited for the queue
}

bool InputWrites::place_write(ggml_tensor* tensor, const void* data, size_t offset, size_t size) {
  ggml_backend_buffer_t buf = tensor->view_src != nullptr ? tensor->view_src->buffer : tensor->buffer;
  if (buf == nullptr || size == 0) return false;
  if (size >= kWordRunsHeader) {
    if (auto expanded = word_runs_size(data, size)) {
      expand_runs(tensor, data, offset, size, *expanded);
      return true;
    }
  }
  if (size == kReuseMarkerSize) {
    if (auto m = parse_reuse_marker(data, size)) {
      apply_marker(tensor, offset, *m);
      return true;
    }
  }
  if (!queueing_) return false;
  const bool candidate = size <= kMaxWrite && ggml_backend_buffer_get_usage(buf) != GGML_BACKEND_BUFFER_USAGE_WEIGHTS &&
                         !ggml_backend_buffer_is_host(buf);
  std::lock_guard<std::recursive_mutex> lock(mutex_);
  DeviceQueue* q = candidate ? queue_of(ggml_backend_buffer_get_type(buf)) : nullptr;
  if (q == nullptr) {
    // ggml writes this one itself, on another stream: what was queued goes first.
    if (pending_.load(std::memory_order_relaxed)) flush_locked();
    return false;
  }
  if (q->used + size > kArenaBytes) flush_locked();
  uint8_t* staged = q->stream.base + q->used;
  std::memcpy(staged, data, size);
  ggml_backend_tensor_set_async(q->stream.backend, tensor, staged, offset, size);
  q->used += (size + kAlign - 1) / kAlign * kAlign;
  q->pending = true;
  pending_.store(true, std::memory_order_relaxed);
  count_.fetch_add(1, std::memory_order_relaxed);
  return true;
}

bool InputWrites::place(ggml_tensor* tensor, const void* data, size_t offset, size_t size) {
  const uint64_t t0 = now_ns();
  if (!place_write(tensor, data, offset, size)) return false;
  writes_.fetch_add(1, std::memory_order_relaxed);
  write_ns_.fetch_add(now_ns() - t0, std::memory_order_relaxed);
  return true;
}

enum ggml_status InputWrites::run_graph(ggml_backend_t backend, ggml_cgraph* cgraph, LaunchFn fn) {
  const uint64_t t0 = now_ns();
  flush();
  const uint64_t t_run = now_ns();
  const enum ggml_status st = fn(backend, cgraph);
  const uint64_t t1 = now_ns();
  graphs_.fetch_add(1, std::memory_order_relaxed);
  graph_ns_.fetch_add(t1 - t0, std::memory_order_relaxed);
  step_trace("inputs", t0, t_run);
  step_trace("graph", t_run, t1);
  return st;
}

// With nothing queued the wait is one atomic load.
void InputWrites::flush() {
  if (!pending_.load(std::memory_order_acquire)) return;
  std::lock_guard<std::recursive_mutex> lock(mutex_);
  flush_locked();
}

InputWrites::~InputWrites() {
  std::lock_guard<std::recursive_mutex> lock(mutex_);
  for (Slot& s : slots_) free_slot(s);
  flush_locked();
  for (auto& entry : queues_) close_device_stream(entry.second.stream);
}

void InputWrites::release(uint64_t session) {
  std::lock_guard<std::recursive_mutex> lock(mutex_);
  if (session == 0 || session_.load() != session) return;
  for (Slot& s : slots_) free_slot(s);
}

StepWork InputWrites::take_step_work() {
  StepWork w;
  w.graphs = graphs_.exchange(0);
  w.graph_s = graph_ns_.exchange(0) / 1e9;
  w.writes = writes_.exchange(0);
  w.write_s = write_ns_.exchange(0) / 1e9;
  w.runs = runs_expanded_.exchange(0);
  return w;
}

}  // namespace tandem::datapath
