#include "datapath/kv_share_store.h"

#include <atomic>
#include <cstring>
#include <mutex>
#include <new>
#include <optional>
#include <unordered_map>
#include <vector>

#include "common/host_memory.h"
#include "common/log.h"
#include "common/units.h"
#include "datapath/input_writes.h"
#include "datapath/interpose.h"
#include "datapath/self_check.h"
#include "ggml-backend.h"
#include "ggml.h"
#include "link/protocol.h"

namespace tandem::datapath {

using link::KvShareMarker;
using link::KvShareOp;

namespace {

struct Share {
  std::unordered_map<const void*, std::vector<uint8_t>> streams;  // by the KV tensor's device address
  uint64_t bytes = 0;
  uint32_t faults = 0;
  bool refused = false;  // a save it could not hold: the share is not whole
};

std::mutex g_mutex;
std::unordered_map<uint64_t, Share> g_shares;
std::atomic<uint64_t> g_session{0};
uint64_t g_bytes = 0;
std::optional<link::KvShareAnswer> g_answer;  // for the next 32-byte read
KvShareStoreStats g_totals;                    // the since-start counts

// The marker's region lies inside the tensor (its fields come from the network: no overflow).
bool within(const ggml_tensor* tensor, const KvShareMarker& m) {
  const uint64_t n = ggml_nbytes(tensor);
  return m.bytes <= n && m.offset <= n - m.bytes;
}

void free_share(Share& s) {
  g_bytes -= s.bytes;
  s.streams.clear();
  s.bytes = 0;
}

void drop_all_locked() {
  g_shares.clear();
  g_bytes = 0;
  g_answer.reset();
}

void save(const ggml_tensor* tensor, const KvShareMarker& m) {
  Share& s = g_shares[m.key];
  if (s.refused) return;
  std::vector<uint8_t>& stream = s.streams[tensor->data];
  if (stream.size() != m.stream || !within(tensor, m)) {
    ++s.faults;
    ++g_totals.faults;
    return;
  }
  if (m.bytes + kHostMemoryReserve > available_host_memory()) {
    s.refused = true;
    ++g_totals.refused;
    free_share(s);
    log::warn("rpc-server", "prompt cache: refused to keep " + format_bytes(m.bytes) +
                                " more of a state: too little memory left (the head evaluates that prompt again)");
    return;
  }
  try {
    stream.resize(m.stream + m.bytes);
  } catch (const std::bad_alloc&) {
    s.refused = true;
    ++g_totals.refused;
    free_share(s);
    return;
  }
  flush_input_writes();  // the rows a queued write still changes
  real_tensor_get()(tensor, stream.data() + m.stream, m.offset, m.bytes);
  s.bytes += m.bytes;
  g_bytes += m.bytes;
  g_totals.saved_bytes += m.bytes;
}

void restore(ggml_tensor* tensor, const KvShareMarker& m) {
  auto it = g_shares.find(m.key);
  const std::vector<uint8_t>* stream = nullptr;
  if (it != g_shares.end() && !it->second.refused) {
    auto st = it->second.streams.find(tensor->data);
    if (st != it->second.streams.end()) stream = &st->second;
  }
  if (stream == nullptr || m.bytes > stream->size() || m.stream > stream->size() - m.bytes || !within(tensor, m)) {
    if (it != g_shares.end()) ++it->second.faults;
    ++g_totals.faults;
    return;
  }
  flush_input_writes();
  real_tensor_set()(tensor, stream->data() + m.stream, m.offset, m.bytes);
  g_totals.restored_bytes += m.bytes;
}

bool on_set(ggml_tensor* tensor, const void* data, size_t, size_t size) {
  if (size != link::kKvShareMarkerSize) return false;
  const auto m = link::parse_kv_share_marker(data, size);
  if (!m) return false;
  std::lock_guard<std::mutex> lock(g_mutex);
  if (m->session != g_session.load()) {
    if (!g_shares.empty()) {
      log::info("rpc-server", "prompt cache: a new head session; dropped " + std::to_string(g_shares.size()) +
                                  " shares (" + format_bytes(g_bytes) + ") of the last one");
    }
    drop_all_locked();
    g_session.store(m->session);
  }
  switch (m->op) {
    case KvShareOp::save:
      save(tensor, *m);
      break;
    case KvShareOp::restore:
      restore(tensor, *m);
      break;
    case KvShareOp::drop:
      if (auto it = g_shares.find(m->key); it != g_shares.end()) {
        free_share(it->second);
        g_shares.erase(it);
      }
      break;
    case KvShareOp::query: {
      auto it = g_shares.find(m->key);
      link::KvShareAnswer a;
      if (it != g_shares.end()) {
        a.held = !it->second.refused;
        a.faults = it->second.faults;
        a.bytes = it->second.bytes;
      }
      g_answer = a;
      break;
    }
  }
  return true;
}

bool on_get(const ggml_tensor*, void* data, size_t, size_t size) {
  if (size != link::kKvShareAnswerSize) return false;
  std::lock_guard<std::mutex> lock(g_mutex);
  if (!g_answer) return false;
  const auto bytes = link::encode_kv_share_answer(*g_answer);
  std::memcpy(data, bytes.data(), bytes.size());
  g_answer.reset();
  return true;
}

constexpr FirstHooks kHooks{&on_set, &on_get};

}  // namespace

Status install_kv_share_store() {
  TANDEM_RETURN_IF_ERROR(check_interposition());
  set_first_hooks(&kHooks);
  return Status::ok();
}

KvShareStoreStats kv_share_store_stats() {
  std::lock_guard<std::mutex> lock(g_mutex);
  KvShareStoreStats s = g_totals;
  s.shares = g_shares.size();
  s.bytes = g_bytes;
  return s;
}

uint64_t kv_share_session() { return g_session.load(); }

KvShareStoreStats release_kv_shares(uint64_t session) {
  std::lock_guard<std::mutex> lock(g_mutex);
  KvShareStoreStats freed;
  if (session == 0 || g_session.load() != session) return freed;
  freed.shares = g_shares.size();
  freed.bytes = g_bytes;
  drop_all_locked();
  return freed;
}

}  // namespace tandem::datapath
