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
#include "datapath/self_check.h"
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

// One per device buffer type (datapath/device_stream.h); its stream carries the queued copies.
struct DeviceQueue {
  DeviceStream stream;  // no backend: writes to this buffer type are not queued
  size_t used = 0;
  bool pending = false;
};

// Recursive: freeing a buffer inside the lock passes through the free interposer below.
std::recursive_mutex g_mutex;
std::unordered_map<ggml_backend_buffer_type_t, DeviceQueue> g_queues;
std::atomic<bool> g_pending{false};
std::atomic<bool> g_installed{false};
std::atomic<bool> g_queueing{false};
std::atomic<uint64_t> g_count{0};
std::atomic<uint64_t> g_graphs{0}, g_graph_ns{0}, g_writes{0}, g_write_ns{0};  // StepWork

uint64_t now_ns() { return step_trace_now(); }

// Input reuse (datapath/input_reuse.h): the slots of the head's current session, in device memory.
struct Slot {
  ggml_backend_buffer_t buffer = nullptr;
  ggml_backend_buffer_type_t type = nullptr;
  uint64_t bytes = 0;  // what the last keep put there
};
std::array<Slot, kReuseSlots> g_slots;  // under g_mutex
std::atomic<uint64_t> g_session{0};
std::atomic<uint64_t> g_reuse_copies{0};
std::atomic<uint64_t> g_runs_expanded{0};

void flush_locked() {
  for (auto& entry : g_queues) {
    DeviceQueue& q = entry.second;
    if (!q.pending) continue;
    ggml_backend_synchronize(q.stream.backend);
    q.pending = false;
    q.used = 0;
  }
  g_pending.store(false, std::memory_order_release);
}

DeviceQueue open_queue(ggml_backend_buffer_type_t buft) {
  return DeviceQueue{open_device_stream(buft, kArenaBytes, /*with_event=*/false)};
}

// A device-to-device copy, queued behind the queued writes on that device's stream when there is
// one; otherwise after them, waiting.
void copy_bytes(ggml_tensor* src, ggml_tensor* dst) {
  DeviceQueue* q = nullptr;
  if (g_queueing.load(std::memory_order_relaxed)) {
    ggml_backend_buffer_type_t buft = ggml_backend_buffer_get_type(dst->buffer);
    auto it = g_queues.find(buft);
    if (it == g_queues.end()) it = g_queues.emplace(buft, open_queue(buft)).first;
    if (it->second.stream.backend != nullptr) q = &it->second;
  }
  if (q == nullptr) {
    if (g_pending.load(std::memory_order_relaxed)) flush_locked();
    ggml_backend_tensor_copy(src, dst);
    return;
  }
  ggml_backend_tensor_copy_async(q->stream.backend, q->stream.backend, src, dst);
  q->pending = true;
  g_pending.store(true, std::memory_order_relaxed);
}

void free_slot(Slot& s) {
  if (s.buffer != nullptr) {
    if (g_pending.load(std::memory_order_relaxed)) flush_locked();  // a queued copy may still read it
    ggml_backend_buffer_free(s.buffer);
  }
  s = Slot{};
}

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

void apply_marker(ggml_tensor* tensor, size_t offset, const ReuseMarker& m) {
  ggml_backend_buffer_t buf = tensor->view_src != nullptr ? tensor->view_src->buffer : tensor->buffer;
  if (buf == nullptr || offset + m.bytes > ggml_nbytes(tensor)) {
    reuse_failed(std::string("a marker for ") + format_bytes(m.bytes) + " at offset " + std::to_string(offset) +
                 " of tensor '" + tensor->name + "' (" + format_bytes(ggml_nbytes(tensor)) + ")");
  }
  std::lock_guard<std::recursive_mutex> lock(g_mutex);
  if (m.session != g_session.load()) {
    if (m.op == ReuseOp::copy) reuse_failed("a copy from slot " + std::to_string(m.slot) + " of another session");
    for (Slot& s : g_slots) free_slot(s);
    g_session.store(m.session);
  }
  ggml_tensor region = raw_bytes(buf, static_cast<uint8_t*>(tensor->data) + offset, m.bytes);
  Slot& slot = g_slots[m.slot];
  if (m.op == ReuseOp::copy) {
    if (slot.buffer == nullptr || slot.bytes != m.bytes) {
      reuse_failed("slot " + std::to_string(m.slot) + " holds " + format_bytes(slot.bytes) + ", the head asked for " +
                   format_bytes(m.bytes));
    }
    ggml_tensor kept = raw_bytes(slot.buffer, ggml_backend_buffer_get_base(slot.buffer), m.bytes);
    copy_bytes(&kept, &region);
    g_reuse_copies.fetch_add(1, std::memory_order_relaxed);
    return;
  }
  for (uint32_t i = 0; i < kReuseSlots; ++i) {
    if ((m.drop >> i & 1u) != 0 && i != m.slot) free_slot(g_slots[i]);
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

bool place_write(ggml_tensor* tensor, const void* data, size_t offset, size_t size);

// An input the head sent as runs (link/protocol.h): expanded here, then written as if it had
// come whole. Runs that would write past the tensor stop the process, as a bad marker does.
void expand_runs(ggml_tensor* tensor, const void* data, size_t offset, size_t size, uint64_t expanded) {
  if (offset + expanded > ggml_nbytes(tensor)) {
    reuse_failed(std::string("runs expanding to ") + format_bytes(expanded) + " at offset " + std::to_string(offset) +
                 " of tensor '" + tensor->name + "' (" + format_bytes(ggml_nbytes(tensor)) + ")");
  }
  thread_local std::vector<uint8_t> bytes;  // kept: a fresh buffer a chunk would fault in every page
  bytes.resize(expanded);
  if (!decode_word_runs(data, size, bytes.data(), expanded)) reuse_failed("runs that do not decode");
  g_runs_expanded.fetch_add(1, std::memory_order_relaxed);
  if (place_write(tensor, bytes.data(), offset, expanded)) return;
  real_tensor_set()(tensor, bytes.data(), offset, expanded);  // place_write waited for the queue
}

bool place_write(ggml_tensor* tensor, const void* data, size_t offset, size_t size) {
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
  if (!g_queueing.load(std::memory_order_relaxed)) return false;
  const bool candidate = size <= kMaxWrite && ggml_backend_buffer_get_usage(buf) != GGML_BACKEND_BUFFER_USAGE_WEIGHTS &&
                         !ggml_backend_buffer_is_host(buf);
  std::lock_guard<std::recursive_mutex> lock(g_mutex);
  DeviceQueue* q = nullptr;
  if (candidate) {
    ggml_backend_buffer_type_t buft = ggml_backend_buffer_get_type(buf);
    auto it = g_queues.find(buft);
    if (it == g_queues.end()) it = g_queues.emplace(buft, open_queue(buft)).first;
    if (it->second.stream.backend != nullptr) q = &it->second;
  }
  if (q == nullptr) {
    // ggml writes this one itself, on another stream: what was queued goes first.
    if (g_pending.load(std::memory_order_relaxed)) flush_locked();
    return false;
  }
  if (q->used + size > kArenaBytes) flush_locked();
  uint8_t* staged = q->stream.base + q->used;
  std::memcpy(staged, data, size);
  ggml_backend_tensor_set_async(q->stream.backend, tensor, staged, offset, size);
  q->used += (size + kAlign - 1) / kAlign * kAlign;
  q->pending = true;
  g_pending.store(true, std::memory_order_relaxed);
  g_count.fetch_add(1, std::memory_order_relaxed);
  return true;
}

bool queue_write(ggml_tensor* tensor, const void* data, size_t offset, size_t size) {
  const uint64_t t0 = now_ns();
  if (!place_write(tensor, data, offset, size)) return false;
  g_writes.fetch_add(1, std::memory_order_relaxed);
  g_write_ns.fetch_add(now_ns() - t0, std::memory_order_relaxed);
  return true;
}

// The fence's graph: what was queued lands first, and the graph's time is counted.
enum ggml_status run_graph(ggml_backend_t backend, ggml_cgraph* cgraph, LaunchFn fn) {
  const uint64_t t0 = now_ns();
  flush_input_writes();
  const uint64_t t_run = now_ns();
  const enum ggml_status st = fn(backend, cgraph);
  const uint64_t t1 = now_ns();
  g_graphs.fetch_add(1, std::memory_order_relaxed);
  g_graph_ns.fetch_add(t1 - t0, std::memory_order_relaxed);
  step_trace("inputs", t0, t_run);
  step_trace("graph", t_run, t1);
  return st;
}

// ggml's calls that read, run on or release device memory wait for the queued writes first; with
// nothing queued the wait is one atomic load.
constexpr DeviceFenceHooks kFence{&flush_input_writes, &run_graph};

}  // namespace

void flush_input_writes() {
  if (!g_pending.load(std::memory_order_acquire)) return;
  std::lock_guard<std::recursive_mutex> lock(g_mutex);
  flush_locked();
}

Status install_input_writes(bool queue) {
  TANDEM_RETURN_IF_ERROR(check_interposition());
  g_queueing.store(queue);
  if (!g_installed.exchange(true)) {
    set_device_fence_hooks(&kFence);
    add_tensor_set_hook(&queue_write);
  }
  return Status::ok();
}

uint64_t queued_input_writes() { return g_count.load(); }

uint64_t input_reuse_session() { return g_session.load(); }

void release_input_reuse(uint64_t session) {
  std::lock_guard<std::recursive_mutex> lock(g_mutex);
  if (session == 0 || g_session.load() != session) return;
  for (Slot& s : g_slots) free_slot(s);
}

uint64_t input_reuse_copies() { return g_reuse_copies.load(); }

StepWork take_step_work() {
  StepWork w;
  w.graphs = g_graphs.exchange(0);
  w.graph_s = g_graph_ns.exchange(0) / 1e9;
  w.writes = g_writes.exchange(0);
  w.write_s = g_write_ns.exchange(0) / 1e9;
  w.runs = g_runs_expanded.exchange(0);
  return w;
}

}  // namespace tandem::datapath
