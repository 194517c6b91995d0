#include "engine/rpc_writes.h"

#include <unistd.h>

#include <atomic>
#include <chrono>
#include <memory>
#include <mutex>
#include <random>
#include <unordered_map>

#include "common/input_reuse.h"
#include "common/tensor_set_hook.h"
#include "engine/model_loader.h"
#include "engine/sched_hooks.h"
#include "ggml-backend.h"
#include "ggml.h"

namespace tandem::engine {
namespace {

std::mutex g_mutex;
bool g_live = false;
std::set<std::string> g_reuse_endpoints;  // while live

// One per RPC device, opened on first use. ggml's RPC backends share one connection (and its
// queue) per endpoint, so a backend handle opened here queues behind whatever the scheduler's own
// handle queued before. It is opened only while a buffer of that device exists, so the connection
// is always the one already open, never a new one.
struct Connection {
  ggml_backend_t backend = nullptr;
  std::unique_ptr<ReuseTable> reuse;  // a tandem worker's: repeated inputs go as markers
};
std::unordered_map<ggml_backend_dev_t, Connection> g_connections;
std::atomic<unsigned long long> g_writes{0}, g_copies{0}, g_identified{0}, g_bytes_not_sent{0};

uint64_t new_session() {
  std::random_device rd;
  const uint64_t t = static_cast<uint64_t>(std::chrono::steady_clock::now().time_since_epoch().count());
  return (static_cast<uint64_t>(rd()) << 32 | rd()) ^ t ^ static_cast<uint64_t>(::getpid()) << 48;
}

Connection open_connection(ggml_backend_dev_t dev, ggml_backend_buffer_t buf) {
  Connection c;
  c.backend = ggml_backend_dev_init(dev, nullptr);
  if (g_reuse_endpoints.count(rpc_endpoint(ggml_backend_buft_name(ggml_backend_buffer_get_type(buf)))) > 0) {
    c.reuse = std::make_unique<ReuseTable>(new_session());
  }
  return c;
}

bool write_async(ggml_tensor* tensor, const void* data, size_t offset, size_t size) {
  ggml_backend_buffer_t buf = tensor->view_src != nullptr ? tensor->view_src->buffer : tensor->buffer;
  // Weights keep ggml's path: it is where the client asks the server's cache first.
  if (buf == nullptr || ggml_backend_buffer_get_usage(buf) == GGML_BACKEND_BUFFER_USAGE_WEIGHTS) return false;
  ggml_backend_dev_t dev = ggml_backend_buft_get_device(ggml_backend_buffer_get_type(buf));
  if (!is_rpc_device(dev)) return false;
  std::lock_guard<std::mutex> lock(g_mutex);
  auto it = g_connections.find(dev);
  if (it == g_connections.end()) it = g_connections.emplace(dev, open_connection(dev, buf)).first;
  Connection& c = it->second;
  if (c.backend == nullptr) return false;
  g_writes.fetch_add(1, std::memory_order_relaxed);
  if (c.reuse != nullptr) {
    const ReuseTable::Identity* id = scheduler_copy_identity();
    if (id != nullptr && id->data != data) id = nullptr;
    if (auto r = c.reuse->route(data, size, id)) {
      if (r->identified) g_identified.fetch_add(1, std::memory_order_relaxed);
      if (r->send_data) ggml_backend_tensor_set_async(c.backend, tensor, data, offset, size);
      const auto marker = encode_reuse_marker(r->marker);
      ggml_backend_tensor_set_async(c.backend, tensor, marker.data(), offset, marker.size());
      if (!r->send_data) {
        g_copies.fetch_add(1, std::memory_order_relaxed);
        g_bytes_not_sent.fetch_add(size, std::memory_order_relaxed);
      }
      return true;
    }
  }
  ggml_backend_tensor_set_async(c.backend, tensor, data, offset, size);
  return true;
}

}  // namespace

AsyncRpcWrites::AsyncRpcWrites(std::set<std::string> reuse_endpoints) {
  std::lock_guard<std::mutex> lock(g_mutex);
  if (g_live || !tensor_set_interposed()) return;
  g_live = active_ = true;
  g_reuse_endpoints = std::move(reuse_endpoints);
  add_tensor_set_hook(&write_async);
}

AsyncRpcWrites::~AsyncRpcWrites() {
  if (!active_) return;
  remove_tensor_set_hook(&write_async);
  std::lock_guard<std::mutex> lock(g_mutex);
  for (auto& [dev, c] : g_connections) {
    if (c.backend == nullptr) continue;
    // What was queued reaches the server before the handle lets go of the connection.
    ggml_backend_synchronize(c.backend);
    ggml_backend_free(c.backend);
  }
  g_connections.clear();
  g_reuse_endpoints.clear();
  g_live = false;
}

unsigned long long AsyncRpcWrites::writes() { return g_writes.load(); }
unsigned long long AsyncRpcWrites::reused_writes() { return g_copies.load(); }
unsigned long long AsyncRpcWrites::identified_writes() { return g_identified.load(); }
unsigned long long AsyncRpcWrites::bytes_not_sent() { return g_bytes_not_sent.load(); }

}  // namespace tandem::engine
