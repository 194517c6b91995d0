#include "datapath/kv_share_store.h"

#include <unistd.h>

#include <atomic>
#include <cstdio>
#include <cstring>
#include <filesystem>
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
  uint64_t bytes = 0;                                             // what the saves put in, in memory or not
  uint32_t faults = 0;
  bool refused = false;  // a save it could not hold, or a spill it could not write: not whole
  bool spilled = false;  // the streams are in the spill file, not in memory
};

std::mutex g_mutex;
std::unordered_map<uint64_t, Share> g_shares;
std::atomic<uint64_t> g_session{0};
uint64_t g_bytes = 0, g_disk_bytes = 0;       // the shares' bytes in memory, and in spill files
std::string g_spill_dir;                      // "" = none
std::optional<link::KvShareAnswer> g_answer;  // for the next 32-byte read
KvShareStoreStats g_totals;                   // the since-start counts

// The marker's region lies inside the tensor (its fields come from the network: no overflow).
bool within(const ggml_tensor* tensor, const KvShareMarker& m) {
  const uint64_t n = ggml_nbytes(tensor);
  return m.bytes <= n && m.offset <= n - m.bytes;
}

std::string spill_path(uint64_t key) {
  return g_spill_dir + "/" + std::to_string(g_session.load()) + "-" + std::to_string(key) + ".kv";
}

void free_share(uint64_t key, Share& s) {
  if (s.spilled) {
    g_disk_bytes -= s.bytes;
    std::remove(spill_path(key).c_str());
  } else {
    g_bytes -= s.bytes;
  }
  s.streams.clear();
  s.bytes = 0;
  s.spilled = false;
}

void drop_all_locked() {
  for (auto& [key, s] : g_shares) free_share(key, s);
  g_shares.clear();
  g_answer.reset();
}

// Marks the share as not whole and frees what it held: the head's next query says so.
void refuse(uint64_t key, Share& s) {
  free_share(key, s);
  s.refused = true;
  ++g_totals.refused;
}

// The share's streams into its spill file (records: tensor address u64, size u64, bytes), out of
// memory. False, with nothing changed, when the file cannot be written.
bool write_spill(uint64_t key, Share& s) {
  const std::string path = spill_path(key);
  std::FILE* f = std::fopen(path.c_str(), "wb");
  bool ok = f != nullptr;
  for (const auto& [tensor, bytes] : s.streams) {
    const uint64_t head[2] = {reinterpret_cast<uintptr_t>(tensor), bytes.size()};
    ok = ok && std::fwrite(head, sizeof head, 1, f) == 1 &&
         (bytes.empty() || std::fwrite(bytes.data(), bytes.size(), 1, f) == 1);
  }
  ok = f != nullptr && std::fclose(f) == 0 && ok;
  if (!ok) {
    std::remove(path.c_str());
    return false;
  }
  g_bytes -= s.bytes;
  g_disk_bytes += s.bytes;
  s.streams.clear();
  s.spilled = true;
  return true;
}

// The spill file back into memory; false when it is gone or short.
bool read_spill(uint64_t key, Share& s) {
  const std::string path = spill_path(key);
  std::FILE* f = std::fopen(path.c_str(), "rb");
  if (f == nullptr) return false;
  std::unordered_map<const void*, std::vector<uint8_t>> streams;
  uint64_t total = 0, head[2];
  bool ok = true;
  while (ok && std::fread(head, sizeof head, 1, f) == 1) {
    if (head[1] > s.bytes - total) {
      ok = false;
      break;
    }
    std::vector<uint8_t>& bytes = streams[reinterpret_cast<const void*>(static_cast<uintptr_t>(head[0]))];
    bytes.resize(head[1]);
    ok = head[1] == 0 || std::fread(bytes.data(), head[1], 1, f) == 1;
    total += head[1];
  }
  std::fclose(f);
  if (!ok || total != s.bytes) return false;
  std::remove(path.c_str());
  s.streams = std::move(streams);
  s.spilled = false;
  g_disk_bytes -= s.bytes;
  g_bytes += s.bytes;
  return true;
}

void save(uint64_t key, const ggml_tensor* tensor, const KvShareMarker& m) {
  Share& s = g_shares[key];
  if (s.refused) return;
  std::vector<uint8_t>& stream = s.streams[tensor->data];
  if (s.spilled || stream.size() != m.stream || !within(tensor, m)) {
    ++s.faults;
    ++g_totals.faults;
    return;
  }
  if (m.bytes + kHostMemoryReserve > available_host_memory()) {
    refuse(key, s);
    log::warn("rpc-server", "prompt cache: refused to keep " + format_bytes(m.bytes) +
                                " more of a state: too little memory left (the head evaluates that prompt again)");
    return;
  }
  try {
    stream.resize(m.stream + m.bytes);
  } catch (const std::bad_alloc&) {
    refuse(key, s);
    return;
  }
  flush_input_writes();  // the rows a queued write still changes
  real_tensor_get()(tensor, stream.data() + m.stream, m.offset, m.bytes);
  s.bytes += m.bytes;
  g_bytes += m.bytes;
  g_totals.saved_bytes += m.bytes;
}

void restore(uint64_t key, ggml_tensor* tensor, const KvShareMarker& m) {
  auto it = g_shares.find(key);
  const std::vector<uint8_t>* stream = nullptr;
  if (it != g_shares.end() && !it->second.refused && (!it->second.spilled || read_spill(key, it->second))) {
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

void spill(uint64_t key) {
  auto it = g_shares.find(key);
  if (it == g_shares.end() || it->second.refused || it->second.spilled) return;
  if (!g_spill_dir.empty() && write_spill(key, it->second)) {
    ++g_totals.spills;
    return;
  }
  static bool told = false;
  if (!told) {
    log::warn("rpc-server",
              g_spill_dir.empty()
                  ? "prompt cache: the head spills states to disk, but this worker has no --cache-dir: its "
                    "parts of them are dropped (the head evaluates those prompts again)"
                  : "prompt cache: could not write a state to " + g_spill_dir +
                        ": its part is dropped (the head evaluates that prompt again)");
    told = true;
  }
  refuse(key, it->second);
}

bool on_set(ggml_tensor* tensor, const void* data, size_t, size_t size) {
  if (size != link::kKvShareMarkerSize) return false;
  const auto m = link::parse_kv_share_marker(data, size);
  if (!m) return false;
  std::lock_guard<std::mutex> lock(g_mutex);
  if (m->session != g_session.load()) {
    if (!g_shares.empty()) {
      log::info("rpc-server", "prompt cache: a new head session; dropped " + std::to_string(g_shares.size()) +
                                  " shares (" + format_bytes(g_bytes + g_disk_bytes) + ") of the last one");
    }
    drop_all_locked();
    g_session.store(m->session);
  }
  switch (m->op) {
    case KvShareOp::save:
      save(m->key, tensor, *m);
      break;
    case KvShareOp::restore:
      restore(m->key, tensor, *m);
      break;
    case KvShareOp::drop:
      if (auto it = g_shares.find(m->key); it != g_shares.end()) {
        free_share(m->key, it->second);
        g_shares.erase(it);
      }
      break;
    case KvShareOp::spill:
      spill(m->key);
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

Status install_kv_share_store(const std::string& spill_dir) {
  TANDEM_RETURN_IF_ERROR(check_interposition());
  if (!spill_dir.empty()) {
    std::error_code ec;
    std::filesystem::create_directories(spill_dir, ec);
    if (ec) return Status::invalid_argument("prompt-cache spill folder " + spill_dir + ": " + ec.message());
    // What a process before this one spilled belongs to a head session that has ended.
    for (const auto& e : std::filesystem::directory_iterator(spill_dir, ec)) {
      if (e.path().extension() == ".kv") std::filesystem::remove(e.path(), ec);
    }
  }
  {
    std::lock_guard<std::mutex> lock(g_mutex);
    g_spill_dir = spill_dir;
  }
  set_first_hooks(&kHooks);
  return Status::ok();
}

KvShareStoreStats kv_share_store_stats() {
  std::lock_guard<std::mutex> lock(g_mutex);
  KvShareStoreStats s = g_totals;
  s.shares = g_shares.size();
  s.bytes = g_bytes;
  s.disk_bytes = g_disk_bytes;
  return s;
}

uint64_t kv_share_session() { return g_session.load(); }

KvShareStoreStats release_kv_shares(uint64_t session) {
  std::lock_guard<std::mutex> lock(g_mutex);
  KvShareStoreStats freed;
  if (session == 0 || g_session.load() != session) return freed;
  freed.shares = g_shares.size();
  freed.bytes = g_bytes;
  freed.disk_bytes = g_disk_bytes;
  drop_all_locked();
  return freed;
}

}  // namespace tandem::datapath
