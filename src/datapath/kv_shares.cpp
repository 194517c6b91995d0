#include "datapath/kv_shares.h"

#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <random>

#include "common/units.h"
#include "datapath/ggml_devices.h"
#include "ggml-backend.h"
#include "ggml.h"
#include "link/protocol.h"

namespace tandem::datapath {

using link::KvShareMarker;
using link::KvShareOp;

namespace {

// Names this object's shares on the workers: a worker drops what an earlier head left.
uint64_t new_session() {
  std::random_device rd;
  const uint64_t t = static_cast<uint64_t>(std::chrono::steady_clock::now().time_since_epoch().count());
  return ((static_cast<uint64_t>(rd()) << 32 | rd()) ^ t ^ static_cast<uint64_t>(::getpid()) << 40) | 1;
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

KvShares::KvShares(std::set<std::string> endpoints) : endpoints_(std::move(endpoints)), session_(new_session()) {
  // Refused only where an RPC child's session holds them (not in an engine): the states then move
  // whole, as without shares.
  installed_ = set_first_hooks(this);
}

KvShares::~KvShares() {
  if (installed_) set_first_hooks(nullptr);
}

KvShares::Op* KvShares::op_for(const void* data, size_t size) const {
  if (op_thread_.load(std::memory_order_acquire) != std::this_thread::get_id()) return nullptr;
  return inside(op_->base, op_->size, data, size) ? op_ : nullptr;
}

std::string KvShares::worker_of(const ggml_tensor* tensor) const {
  ggml_backend_buffer_t buf = tensor->buffer;
  if (buf == nullptr || ggml_nbytes(tensor) < link::kKvShareMarkerSize) return "";
  ggml_backend_buffer_type_t buft = ggml_backend_buffer_get_type(buf);
  if (!is_rpc_device(ggml_backend_buft_get_device(buft))) return "";
  std::string endpoint = rpc_endpoint(ggml_backend_buft_name(buft));
  return endpoints_.count(endpoint) > 0 ? endpoint : "";
}

// The marker goes as the data of a SET_TENSOR into `tensor`, at the region's offset where it
// fits: ggml's client checks that a write lies inside the tensor.
void KvShares::send(const ggml_tensor* tensor, KvShareMarker m) {
  m.session = session_;
  const auto bytes = link::encode_kv_share_marker(m);
  const size_t at = std::min<size_t>(m.offset, ggml_nbytes(tensor) - bytes.size());
  real_tensor_set()(const_cast<ggml_tensor*>(tensor), bytes.data(), at, bytes.size());
  markers_.fetch_add(1, std::memory_order_relaxed);
}

Result<link::KvShareAnswer> KvShares::query(uint64_t key, const WorkerShare& share) {
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
Status KvShares::held_whole(uint64_t key, const WorkerShare& share, const std::string& what) {
  auto a = query(key, share);
  if (!a.is_ok()) return a.status();
  if (a->held && a->bytes == share.bytes && a->faults == 0) return Status::ok();
  return Status::unavailable("worker " + share.endpoint + ": " + what + " " + format_bytes(a->held ? a->bytes : 0) +
                             " of " + format_bytes(share.bytes) + " of a prompt-cache state" +
                             (a->faults != 0 ? " (" + std::to_string(a->faults) + " regions refused)" : "") +
                             "; it is short of memory, or restarted");
}

bool KvShares::get(const ggml_tensor* tensor, void* data, size_t offset, size_t size) {
  Op* s = op_for(data, size);
  if (s == nullptr || !s->save) return false;
  const std::string endpoint = worker_of(tensor);
  if (endpoint.empty()) return false;
  uint64_t& at = stream_of(s->streams, tensor->data);
  send(tensor, KvShareMarker{KvShareOp::save, s->key, 0, at, offset, size});
  at += size;
  auto share =
      std::find_if(s->shares.begin(), s->shares.end(), [&](const WorkerShare& w) { return w.endpoint == endpoint; });
  if (share == s->shares.end()) share = s->shares.insert(s->shares.end(), WorkerShare{endpoint, 0, tensor});
  share->bytes += size;
  const uint64_t hole_at = static_cast<uint64_t>(static_cast<const uint8_t*>(data) - s->base);
  if (!s->holes.empty() && s->holes.back().at + s->holes.back().bytes == hole_at) {
    s->holes.back().bytes += size;
  } else {
    s->holes.push_back({hole_at, size});
  }
  kept_.fetch_add(size, std::memory_order_relaxed);
  return true;
}

bool KvShares::set(ggml_tensor* tensor, const void* data, size_t offset, size_t size) {
  Op* r = op_for(data, size);
  if (r == nullptr || r->save) return false;
  const std::string endpoint = worker_of(tensor);
  if (endpoint.empty()) return false;
  size_t i = 0;
  while (i < r->shares.size() && r->shares[i].endpoint != endpoint) ++i;
  // A region of a worker that kept nothing of this state: its bytes are not here either. The
  // count stays short of the share's, and the restore fails.
  if (i == r->shares.size()) return true;
  uint64_t& at = stream_of(r->streams, tensor->data);
  send(tensor, KvShareMarker{KvShareOp::restore, r->key, 0, at, offset, size});
  at += size;
  r->restored[i] += size;
  restored_.fetch_add(size, std::memory_order_relaxed);
  return true;
}

Status KvShares::save(uint64_t key, const uint8_t* base, size_t size, const std::function<void()>& write, Saved* out) {
  std::lock_guard<std::mutex> lock(ops_);
  Op op;
  op.save = true;
  op.key = key;
  op.base = base;
  op.size = size;
  op_ = &op;
  op_thread_.store(std::this_thread::get_id(), std::memory_order_release);
  write();
  op_thread_.store(std::thread::id(), std::memory_order_release);
  op_ = nullptr;
  out->holes = std::move(op.holes);
  out->shares = std::move(op.shares);
  if (out->shares.empty()) return Status::ok();
  saves_.fetch_add(1, std::memory_order_relaxed);
  for (const WorkerShare& w : out->shares) TANDEM_RETURN_IF_ERROR(held_whole(key, w, "kept"));
  return Status::ok();
}

Status KvShares::restore(uint64_t key, const std::vector<WorkerShare>& shares, const uint8_t* base, size_t size,
                         const std::function<void()>& read) {
  std::lock_guard<std::mutex> lock(ops_);
  for (const WorkerShare& w : shares) TANDEM_RETURN_IF_ERROR(held_whole(key, w, "holds"));
  Op op;
  op.key = key;
  op.base = base;
  op.size = size;
  op.shares = shares;
  op.restored.assign(shares.size(), 0);
  op_ = &op;
  op_thread_.store(std::this_thread::get_id(), std::memory_order_release);
  read();
  op_thread_.store(std::thread::id(), std::memory_order_release);
  op_ = nullptr;
  if (shares.empty()) return Status::ok();
  restores_.fetch_add(1, std::memory_order_relaxed);
  for (size_t i = 0; i < shares.size(); ++i) {
    const WorkerShare& w = shares[i];
    if (op.restored[i] != w.bytes) {
      return Status::internal("worker " + w.endpoint + ": a restore asked for " + format_bytes(op.restored[i]) +
                              " of its " + format_bytes(w.bytes) + " share");
    }
    auto a = query(key, w);
    if (!a.is_ok()) return a.status();
    if (a->faults != 0) {
      return Status::internal("worker " + w.endpoint + ": could not restore " + std::to_string(a->faults) +
                              " regions of a prompt-cache state");
    }
  }
  return Status::ok();
}

void KvShares::send_to_each(KvShareOp op, uint64_t key, const std::vector<WorkerShare>& shares) {
  for (const WorkerShare& w : shares) {
    if (worker_of(w.anchor).empty()) continue;  // not a share of this object's workers
    KvShareMarker m;
    m.op = op;
    m.key = key;
    send(w.anchor, m);
  }
}

void KvShares::drop(uint64_t key, const std::vector<WorkerShare>& shares) {
  send_to_each(KvShareOp::drop, key, shares);
  if (!shares.empty()) drops_.fetch_add(1, std::memory_order_relaxed);
}

void KvShares::spill(uint64_t key, const std::vector<WorkerShare>& shares) {
  send_to_each(KvShareOp::spill, key, shares);
}

KvShareStats KvShares::stats() const {
  return {saves_.load(), restores_.load(), drops_.load(), markers_.load(), kept_.load(), restored_.load()};
}

}  // namespace tandem::datapath
