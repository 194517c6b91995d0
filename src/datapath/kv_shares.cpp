#include "datapath/kv_shares.h"

#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <mutex>
#include <random>

#include "common/units.h"
#include "datapath/ggml_devices.h"
#include "datapath/interpose.h"
#include "ggml-backend.h"
#include "ggml.h"
#include "link/protocol.h"

namespace tandem::datapath {

using link::KvShareMarker;
using link::KvShareOp;

namespace {

std::mutex g_mutex;
bool g_live = false;
std::set<std::string> g_endpoints;  // under g_mutex, while live
uint64_t g_session = 0;
thread_local ShareSave* t_save = nullptr;
thread_local ShareRestore* t_restore = nullptr;
std::atomic<uint64_t> g_saves{0}, g_restores{0}, g_drops{0}, g_markers{0}, g_kept{0}, g_restored{0};

// The endpoint of the tandem worker whose memory holds `tensor`; "" for anything else.
std::string worker_of(const ggml_tensor* tensor) {
  ggml_backend_buffer_t buf = tensor->buffer;
  if (buf == nullptr || ggml_nbytes(tensor) < link::kKvShareMarkerSize) return "";
  ggml_backend_buffer_type_t buft = ggml_backend_buffer_get_type(buf);
  if (!is_rpc_device(ggml_backend_buft_get_device(buft))) return "";
  std::string endpoint = rpc_endpoint(ggml_backend_buft_name(buft));
  std::lock_guard<std::mutex> lock(g_mutex);
  return g_live && g_endpoints.count(endpoint) > 0 ? endpoint : "";
}

// The marker goes as the data of a SET_TENSOR into `tensor`, at the region's offset where it
// fits: ggml's client checks that a write lies inside the tensor.
void send(const ggml_tensor* tensor, KvShareMarker m) {
  m.session = g_session;
  const auto bytes = link::encode_kv_share_marker(m);
  const size_t at = std::min<size_t>(m.offset, ggml_nbytes(tensor) - bytes.size());
  real_tensor_set()(const_cast<ggml_tensor*>(tensor), bytes.data(), at, bytes.size());
  g_markers.fetch_add(1, std::memory_order_relaxed);
}

Result<link::KvShareAnswer> query(uint64_t key, const WorkerShare& share) {
  KvShareMarker m;
  m.op = KvShareOp::query;
  m.key = key;
  send(share.anchor, m);
  uint8_t answer[link::kKvShareAnswerSize];
  real_tensor_get()(share.anchor, answer, 0, sizeof answer);
  auto a = link::parse_kv_share_answer(answer, sizeof answer);
  if (!a) {
    return Status::internal("worker " + share.endpoint +
                            ": answered a prompt-cache query with tensor data; is it a tandem worker of this build?");
  }
  return *a;
}

// Ok when the worker holds the whole of its share of `key`; else what it holds, in `what` terms.
Status held_whole(uint64_t key, const WorkerShare& share, const std::string& what) {
  auto a = query(key, share);
  if (!a.is_ok()) return a.status();
  if (a->held && a->bytes == share.bytes && a->faults == 0) return Status::ok();
  return Status::unavailable("worker " + share.endpoint + ": " + what + " " + format_bytes(a->held ? a->bytes : 0) +
                             " of " + format_bytes(share.bytes) + " of a prompt-cache state" +
                             (a->faults != 0 ? " (" + std::to_string(a->faults) + " regions refused)" : "") +
                             "; it is short of memory, or restarted");
}

uint64_t& stream_of(std::vector<std::pair<const void*, uint64_t>>& streams, const void* data) {
  for (auto& s : streams) {
    if (s.first == data) return s.second;
  }
  return streams.emplace_back(data, 0).second;
}

bool inside(const uint8_t* base, size_t size, const void* p, size_t n) {
  const auto* q = static_cast<const uint8_t*>(p);
  return n > 0 && q >= base && q <= base + size && n <= static_cast<size_t>(base + size - q);
}

}  // namespace

// The first hooks (datapath/interpose.h): reads and writes of a worker's KV inside a scope.
struct ShareHooks final : FirstHooks {
  bool get(const ggml_tensor* tensor, void* data, size_t offset, size_t size) {
    ShareSave* s = t_save;
    if (s == nullptr || !inside(s->base_, s->size_, data, size)) return false;
    const std::string endpoint = worker_of(tensor);
    if (endpoint.empty()) return false;
    uint64_t& at = stream_of(s->streams_, tensor->data);
    send(tensor, KvShareMarker{KvShareOp::save, s->key_, 0, at, offset, size});
    at += size;
    auto share = std::find_if(s->shares_.begin(), s->shares_.end(),
                              [&](const WorkerShare& w) { return w.endpoint == endpoint; });
    if (share == s->shares_.end()) share = s->shares_.insert(s->shares_.end(), WorkerShare{endpoint, 0, tensor});
    share->bytes += size;
    const uint64_t hole_at = static_cast<uint64_t>(static_cast<const uint8_t*>(data) - s->base_);
    if (!s->holes_.empty() && s->holes_.back().at + s->holes_.back().bytes == hole_at) {
      s->holes_.back().bytes += size;
    } else {
      s->holes_.push_back({hole_at, size});
    }
    g_kept.fetch_add(size, std::memory_order_relaxed);
    return true;
  }

  bool set(ggml_tensor* tensor, const void* data, size_t offset, size_t size) {
    ShareRestore* r = t_restore;
    if (r == nullptr || !inside(r->base_, r->size_, data, size)) return false;
    const std::string endpoint = worker_of(tensor);
    if (endpoint.empty()) return false;
    size_t i = 0;
    while (i < r->shares_.size() && r->shares_[i].endpoint != endpoint) ++i;
    // A region of a worker that kept nothing of this state: its bytes are not here either. The
    // count stays short of the share's, and finish() fails the restore.
    if (i == r->shares_.size()) return true;
    uint64_t& at = stream_of(r->streams_, tensor->data);
    send(tensor, KvShareMarker{KvShareOp::restore, r->key_, 0, at, offset, size});
    at += size;
    r->restored_[i] += size;
    g_restored.fetch_add(size, std::memory_order_relaxed);
    return true;
  }
};

namespace {
ShareHooks g_hooks;
}

KvShares::KvShares(std::set<std::string> endpoints) {
  std::lock_guard<std::mutex> lock(g_mutex);
  if (g_live) return;
  live_ = true;
  std::random_device rd;
  const uint64_t t = static_cast<uint64_t>(std::chrono::steady_clock::now().time_since_epoch().count());
  g_session = ((static_cast<uint64_t>(rd()) << 32 | rd()) ^ t ^ static_cast<uint64_t>(::getpid()) << 40) | 1;
  g_endpoints = std::move(endpoints);
  g_live = true;
  // Refused only where an RPC child's session holds them (not in an engine): the states then move
  // whole, as without shares.
  installed_ = set_first_hooks(&g_hooks);
}

KvShares::~KvShares() {
  if (!live_) return;
  if (installed_) set_first_hooks(nullptr);
  std::lock_guard<std::mutex> lock(g_mutex);
  g_endpoints.clear();
  g_live = false;
}

ShareSave::ShareSave(uint64_t key, const uint8_t* base, size_t size) : key_(key), base_(base), size_(size) {
  t_save = this;
}

ShareSave::~ShareSave() {
  if (t_save == this) t_save = nullptr;
}

Status ShareSave::finish() {
  t_save = nullptr;
  if (shares_.empty()) return Status::ok();
  g_saves.fetch_add(1, std::memory_order_relaxed);
  for (const WorkerShare& w : shares_) TANDEM_RETURN_IF_ERROR(held_whole(key_, w, "kept"));
  return Status::ok();
}

ShareRestore::ShareRestore(uint64_t key, const std::vector<WorkerShare>& shares, const uint8_t* base, size_t size)
    : key_(key), shares_(shares), restored_(shares.size(), 0), base_(base), size_(size) {}

ShareRestore::~ShareRestore() {
  if (t_restore == this) t_restore = nullptr;
}

Status ShareRestore::check() {
  for (const WorkerShare& w : shares_) TANDEM_RETURN_IF_ERROR(held_whole(key_, w, "holds"));
  t_restore = this;
  return Status::ok();
}

Status ShareRestore::finish() {
  t_restore = nullptr;
  if (shares_.empty()) return Status::ok();
  g_restores.fetch_add(1, std::memory_order_relaxed);
  for (size_t i = 0; i < shares_.size(); ++i) {
    const WorkerShare& w = shares_[i];
    if (restored_[i] != w.bytes) {
      return Status::internal("worker " + w.endpoint + ": a restore asked for " + format_bytes(restored_[i]) +
                              " of its " + format_bytes(w.bytes) + " share");
    }
    auto a = query(key_, w);
    if (!a.is_ok()) return a.status();
    if (a->faults != 0) {
      return Status::internal("worker " + w.endpoint + ": could not restore " + std::to_string(a->faults) +
                              " regions of a prompt-cache state");
    }
  }
  return Status::ok();
}

namespace {

void send_to_each(KvShareOp op, uint64_t key, const std::vector<WorkerShare>& shares) {
  for (const WorkerShare& w : shares) {
    if (worker_of(w.anchor).empty()) continue;  // shares of a session that ended
    KvShareMarker m;
    m.op = op;
    m.key = key;
    send(w.anchor, m);
  }
}

}  // namespace

void drop_shares(uint64_t key, const std::vector<WorkerShare>& shares) {
  send_to_each(KvShareOp::drop, key, shares);
  if (!shares.empty()) g_drops.fetch_add(1, std::memory_order_relaxed);
}

void spill_shares(uint64_t key, const std::vector<WorkerShare>& shares) { send_to_each(KvShareOp::spill, key, shares); }

KvShareStats kv_share_stats() {
  return {g_saves.load(), g_restores.load(), g_drops.load(), g_markers.load(), g_kept.load(), g_restored.load()};
}

}  // namespace tandem::datapath
