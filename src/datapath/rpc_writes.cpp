#include "datapath/rpc_writes.h"

#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <mutex>
#include <random>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include "datapath/device_stream.h"
#include "datapath/ggml_devices.h"
#include "datapath/input_reuse.h"
#include "datapath/interpose.h"
#include "ggml-backend.h"
#include "ggml.h"
#include "link/protocol.h"

namespace tandem::datapath {

using link::encode_reuse_marker;
using link::encode_word_runs;
// One per RPC device, opened on first use. ggml's RPC backends share one connection (and its
// queue) per endpoint, so a backend handle opened here queues behind whatever the scheduler's own
// handle queued before. It is opened only while a buffer of that device exists, so the connection
// is always the one already open, never a new one.
struct RpcWrites::Connection {
  ggml_backend_t backend = nullptr;
  std::unique_ptr<ReuseTable> reuse;  // a tandem worker's: repeated inputs go as markers
  bool runs = false;                  // a tandem worker's: inputs that are mostly runs go as runs
  // Input slots (redirect_input): allocated at the first use, kept while the connection is.
  ggml_backend_buffer_t slots = nullptr;
  bool slots_failed = false;
  uint64_t slots_epoch = 0;  // the run whose layout `slot_of` holds
  size_t slots_used = 0;
  std::unordered_map<CopyKey, size_t, CopyKeyHash> slot_of;
  std::unordered_set<const ggml_tensor*> redirected;  // this run's
};

namespace {

uint64_t new_session() {
  std::random_device rd;
  const uint64_t t = static_cast<uint64_t>(std::chrono::steady_clock::now().time_since_epoch().count());
  return (static_cast<uint64_t>(rd()) << 32 | rd()) ^ t ^ static_cast<uint64_t>(::getpid()) << 48;
}

}  // namespace

// Queues a write of a step input to `c`'s server: as runs when it is mostly runs and the server
// takes them, as it is otherwise. Under mutex_.
void RpcWrites::send_input(Connection& c, ggml_tensor* tensor, const void* data, size_t offset, size_t size) {
  if (c.runs) {
    if (auto runs = encode_word_runs(data, size)) {
      ggml_backend_tensor_set_async(c.backend, tensor, runs->data(), offset, runs->size());  // copied out at once
      run_inputs_.fetch_add(1, std::memory_order_relaxed);
      run_bytes_not_sent_.fetch_add(size - runs->size(), std::memory_order_relaxed);
      return;
    }
  }
  ggml_backend_tensor_set_async(c.backend, tensor, data, offset, size);
}

// The connection of `buf`'s RPC device, opened on first use; nullptr for another device or when it
// cannot be opened. Under mutex_.
RpcWrites::Connection* RpcWrites::connection_of(ggml_backend_buffer_t buf) {
  ggml_backend_dev_t dev = ggml_backend_buft_get_device(ggml_backend_buffer_get_type(buf));
  if (!is_rpc_device(dev)) return nullptr;
  auto it = connections_.find(dev);
  if (it == connections_.end()) {
    auto c = std::make_unique<Connection>();
    c->backend = ggml_backend_dev_init(dev, nullptr);
    const std::string endpoint = rpc_endpoint(ggml_backend_buft_name(ggml_backend_buffer_get_type(buf)));
    if (reuse_endpoints_.count(endpoint) > 0) c->reuse = std::make_unique<ReuseTable>(new_session());
    c->runs = runs_endpoints_.count(endpoint) > 0;
    it = connections_.emplace(dev, std::move(c)).first;
  }
  return it->second->backend != nullptr ? it->second.get() : nullptr;
}

bool RpcWrites::write(ggml_tensor* tensor, const void* data, size_t offset, size_t size,
                      const ReuseTable::Identity* id) {
  ggml_backend_buffer_t buf = tensor->view_src != nullptr ? tensor->view_src->buffer : tensor->buffer;
  // Weights keep ggml's path: it is where the client asks the server's cache first.
  if (buf == nullptr || ggml_backend_buffer_get_usage(buf) == GGML_BACKEND_BUFFER_USAGE_WEIGHTS) return false;
  if (!is_rpc_device(ggml_backend_buft_get_device(ggml_backend_buffer_get_type(buf)))) return false;
  std::lock_guard<std::mutex> lock(mutex_);
  Connection* found = connection_of(buf);
  if (found == nullptr) return false;
  Connection& c = *found;
  writes_.fetch_add(1, std::memory_order_relaxed);
  if (c.reuse != nullptr) {
    if (id != nullptr && id->data != data) id = nullptr;
    if (auto r = c.reuse->route(data, size, id)) {
      if (r->identified) identified_.fetch_add(1, std::memory_order_relaxed);
      if (r->send_data) send_input(c, tensor, data, offset, size);
      const auto marker = encode_reuse_marker(r->marker);
      ggml_backend_tensor_set_async(c.backend, tensor, marker.data(), offset, marker.size());
      if (!r->send_data) {
        copies_.fetch_add(1, std::memory_order_relaxed);
        bytes_not_sent_.fetch_add(size, std::memory_order_relaxed);
      }
      return true;
    }
  }
  send_input(c, tensor, data, offset, size);
  return true;
}

RpcWrites::RpcWrites(std::set<std::string> reuse_endpoints, uint64_t slot_bytes, std::set<std::string> runs_endpoints)
    : reuse_endpoints_(std::move(reuse_endpoints)),
      runs_endpoints_(std::move(runs_endpoints)),
      slot_bytes_(slot_bytes) {}

RpcWrites::~RpcWrites() {
  std::lock_guard<std::mutex> lock(mutex_);
  for (auto& [dev, c] : connections_) {
    if (c->backend == nullptr) continue;
    // What was queued reaches the server before the handle lets go of the connection.
    ggml_backend_synchronize(c->backend);
    if (c->slots != nullptr) ggml_backend_buffer_free(c->slots);
    ggml_backend_free(c->backend);
  }
}

RpcWriteStats RpcWrites::stats() const {
  RpcWriteStats s;
  s.writes = writes_.load();
  s.reused_writes = copies_.load();
  s.identified_writes = identified_.load();
  s.bytes_not_sent = bytes_not_sent_.load();
  s.slotted_inputs = slotted_.load();
  s.slot_bytes_not_sent = slot_bytes_not_sent_.load();
  s.relayed_results = relayed_.load();
  s.relayed_bytes_not_read = relayed_bytes_not_read_.load();
  s.run_inputs = run_inputs_.load();
  s.run_bytes_not_sent = run_bytes_not_sent_.load();
  return s;
}

bool RpcWrites::relay_result(const ggml_tensor* src, ggml_tensor* dst, uint64_t epoch) {
  ggml_backend_buffer_t from = src->view_src != nullptr ? src->view_src->buffer : src->buffer;
  ggml_backend_buffer_t to = dst->view_src != nullptr ? dst->view_src->buffer : dst->buffer;
  if (epoch == 0 || from == nullptr || to == nullptr) return false;
  ggml_backend_dev_t from_dev = ggml_backend_buft_get_device(ggml_backend_buffer_get_type(from));
  ggml_backend_dev_t to_dev = ggml_backend_buft_get_device(ggml_backend_buffer_get_type(to));
  // Within one server ggml asks the server to copy; nothing crosses the link.
  if (from_dev == to_dev || !is_rpc_device(from_dev) || !is_rpc_device(to_dev)) return false;
  if (relay_epoch_ != epoch) {
    relayed_copies_.clear();
    relay_epoch_ = epoch;
  }
  const size_t n = ggml_nbytes(src);
  std::unique_ptr<std::vector<uint8_t>>& bytes = relayed_copies_[CopyKey{from, 0, src->data, n}];
  if (bytes == nullptr) {
    bytes = std::make_unique<std::vector<uint8_t>>(n);
    ggml_backend_tensor_get(src, bytes->data(), 0, n);
  } else {
    relayed_.fetch_add(1, std::memory_order_relaxed);
    relayed_bytes_not_read_.fetch_add(n, std::memory_order_relaxed);
  }
  // From here on it is a step input like one in host memory: a slot on the server it goes to, or
  // a write (a repeat of it goes as a marker to a tandem worker, found by comparing).
  ggml_tensor host = *src;
  host.buffer = nullptr;
  host.view_src = nullptr;
  host.view_offs = 0;
  host.data = bytes->data();
  const ReuseTable::Identity id{bytes.get(), 0, bytes->data(), epoch};
  if (!redirect_input(&host, dst, &id)) ggml_backend_tensor_set(dst, bytes->data(), 0, n);
  return true;
}

bool RpcWrites::redirect_input(const ggml_tensor* src, ggml_tensor* dst, const ReuseTable::Identity* id) {
  // An empty input stays ggml's: in a full buffer its slot would start at the end, which the server
  // refuses as out of bounds.
  if (slot_bytes_ == 0 || id == nullptr || dst->view_src != nullptr || dst->buffer == nullptr ||
      ggml_backend_buffer_get_usage(dst->buffer) == GGML_BACKEND_BUFFER_USAGE_WEIGHTS || ggml_nbytes(src) == 0) {
    return false;
  }
  std::lock_guard<std::mutex> lock(mutex_);
  Connection* c = connection_of(dst->buffer);
  if (c == nullptr || c->slots_failed) return false;
  if (c->slots == nullptr) {
    c->slots = ggml_backend_buft_alloc_buffer(ggml_backend_buffer_get_type(dst->buffer), slot_bytes_);
    if (c->slots == nullptr) {
      c->slots_failed = true;
      return false;
    }
  }
  if (c->slots_epoch != id->epoch) {
    c->slots_epoch = id->epoch;
    c->slots_used = 0;
    c->slot_of.clear();
    c->redirected.clear();
  }
  const size_t n = ggml_nbytes(src);
  const CopyKey key{id->tensor, id->offset, id->data, n};
  auto* base = static_cast<uint8_t*>(ggml_backend_buffer_get_base(c->slots));
  auto it = c->slot_of.find(key);
  if (it == c->slot_of.end()) {
    const size_t align = ggml_backend_buffer_get_alignment(c->slots);
    const size_t need = (n + align - 1) / align * align;
    if (c->slots_used + need > ggml_backend_buffer_get_size(c->slots)) return false;  // the same in every run
    it = c->slot_of.emplace(key, c->slots_used).first;
    c->slots_used += need;
    ggml_tensor slot = raw_bytes(c->slots, base + it->second, n);
    send_input(*c, &slot, src->data, 0, n);
    writes_.fetch_add(1, std::memory_order_relaxed);
  } else {
    slot_bytes_not_sent_.fetch_add(n, std::memory_order_relaxed);
  }
  dst->buffer = c->slots;
  dst->data = base + it->second;
  c->redirected.insert(dst);
  slotted_.fetch_add(1, std::memory_order_relaxed);
  return true;
}

void RpcWrites::check_launch(ggml_backend_t backend, ggml_cgraph* graph) {
  if (slot_bytes_ == 0) return;
  std::lock_guard<std::mutex> lock(mutex_);
  auto it = connections_.find(ggml_backend_get_device(backend));
  if (it == connections_.end() || it->second->redirected.empty()) return;
  for (int i = 0; i < ggml_graph_n_nodes(graph); ++i) {
    const ggml_tensor* t = ggml_graph_node(graph, i);
    if (t->view_src == nullptr || it->second->redirected.count(t->view_src) == 0) continue;
    std::fprintf(stderr,
                 "tandem-engine: the worker input slots cannot serve this model: node '%s' of a worker's "
                 "graph is a view of the step input '%s'; run the engine with --no-worker-input-slots (`tandem serve "
                 "--engine-flag=--no-worker-input-slots`)\n",
                 t->name, t->view_src->name);
    std::abort();
  }
}

}  // namespace tandem::datapath
