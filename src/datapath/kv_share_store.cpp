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
#include "ggml-backend.h"
#include "ggml.h"
#include "link/protocol.h"

namespace tandem::datapath {

using link::KvShareMarker;
using link::KvShareOp;

namespace {

// The marker's region lies inside the tensor (its fields come from the network: no overflow).
bool within(const ggml_tensor* tensor, const KvShareMarker& m) {
  const uint64_t n = ggml_nbytes(tensor);
  return m.bytes <= n && m.offset <= n - m.bytes;
}

}  // namespace

std::string ShareStore::spill_path(uint64_t key) const {
  return spill_dir_ + "/" + std::to_string(session_.load()) + "-" + std::to_string(key) + ".kv";
}

void ShareStore::free_share(uint64_t key, Share& s) {
  if (s.spilled) {
    disk_bytes_ -= s.bytes;
    std::remove(spill_path(key).c_str());
  } else {
    bytes_ -= s.bytes;
  }
  s.streams.clear();
  s.bytes = 0;
  s.spilled = false;
}

void ShareStore::drop_all_locked() {
  for (auto& [key, s] : shares_) free_share(key, s);
  shares_.clear();
  answer_.reset();
}

// Marks the share as not whole and frees what it held: the head's next query says so.
void ShareStore::refuse(uint64_t key, Share& s) {
  free_share(key, s);
  s.refused = true;
  ++totals_.refused;
}

// The share's streams into its spill file (records: tensor address u64, size u64, bytes), out of
// memory. False, with nothing changed, when the file cannot be written.
bool ShareStore::write_spill(uint64_t key, Share& s) {
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
  bytes_ -= s.bytes;
  disk_bytes_ += s.bytes;
  s.streams.clear();
  s.spilled = true;
  return true;
}

// The spill file back into memory; false when it is gone or short.
bool ShareStore::read_spill(uint64_t key, Share& s) {
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
  disk_bytes_ -= s.bytes;
  bytes_ += s.bytes;
  return true;
}

void ShareStore::save(uint64_t key, const ggml_tensor* tensor, const KvShareMarker& m) {
  Share& s = shares_[key];
  if (s.refused) return;
  std::vector<uint8_t>& stream = s.streams[tensor->data];
  if (s.spilled || stream.size() != m.stream || !within(tensor, m)) {
    ++s.faults;
    ++totals_.faults;
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
  writes_.flush();  // the rows a queued write still changes
  real_tensor_get()(tensor, stream.data() + m.stream, m.offset, m.bytes);
  s.bytes += m.bytes;
  bytes_ += m.bytes;
  totals_.saved_bytes += m.bytes;
}

void ShareStore::restore(uint64_t key, ggml_tensor* tensor, const KvShareMarker& m) {
  auto it = shares_.find(key);
  const std::vector<uint8_t>* stream = nullptr;
  if (it != shares_.end() && !it->second.refused && (!it->second.spilled || read_spill(key, it->second))) {
    auto st = it->second.streams.find(tensor->data);
    if (st != it->second.streams.end()) stream = &st->second;
  }
  if (stream == nullptr || m.bytes > stream->size() || m.stream > stream->size() - m.bytes || !within(tensor, m)) {
    if (it != shares_.end()) ++it->second.faults;
    ++totals_.faults;
    return;
  }
  writes_.flush();
  real_tensor_set()(tensor, stream->data() + m.stream, m.offset, m.bytes);
  totals_.restored_bytes += m.bytes;
}

void ShareStore::spill(uint64_t key) {
  auto it = shares_.find(key);
  if (it == shares_.end() || it->second.refused || it->second.spilled) return;
  if (!spill_dir_.empty() && write_spill(key, it->second)) {
    ++totals_.spills;
    return;
  }
  if (!told_no_spill_) {
    log::warn("rpc-server",
              spill_dir_.empty()
                  ? "prompt cache: the head spills states to disk, but this worker has no --cache-dir: its "
                    "parts of them are dropped (the head evaluates those prompts again)"
                  : "prompt cache: could not write a state to " + spill_dir_ +
                        ": its part is dropped (the head evaluates that prompt again)");
    told_no_spill_ = true;
  }
  refuse(key, it->second);
}

bool ShareStore::on_set(ggml_tensor* tensor, const void* data, size_t, size_t size) {
  if (size != link::kKvShareMarkerSize) return false;
  const auto m = link::parse_kv_share_marker(data, size);
  if (!m) return false;
  std::lock_guard<std::mutex> lock(mutex_);
  if (m->session != session_.load()) {
    if (!shares_.empty()) {
      log::info("rpc-server", "prompt cache: a new head session; dropped " + std::to_string(shares_.size()) +
                                  " shares (" + format_bytes(bytes_ + disk_bytes_) + ") of the last one");
    }
    drop_all_locked();
    session_.store(m->session);
  }
  switch (m->op) {
    case KvShareOp::save:
      save(m->key, tensor, *m);
      break;
    case KvShareOp::restore:
      restore(m->key, tensor, *m);
      break;
    case KvShareOp::drop:
      if (auto it = shares_.find(m->key); it != shares_.end()) {
        free_share(m->key, it->second);
        shares_.erase(it);
      }
      break;
    case KvShareOp::spill:
      spill(m->key);
      break;
    case KvShareOp::query: {
      auto it = shares_.find(m->key);
      link::KvShareAnswer a;
      if (it != shares_.end()) {
        a.held = !it->second.refused;
        a.faults = it->second.faults;
        a.bytes = it->second.bytes;
      }
      answer_ = a;
      break;
    }
  }
  return true;
}

bool ShareStore::on_get(const ggml_tensor*, void* data, size_t, size_t size) {
  if (size != link::kKvShareAnswerSize) return false;
  std::lock_guard<std::mutex> lock(mutex_);
  if (!answer_) return false;
  const auto bytes = link::encode_kv_share_answer(*answer_);
  std::memcpy(data, bytes.data(), bytes.size());
  answer_.reset();
  return true;
}

Result<std::unique_ptr<ShareStore>> ShareStore::open(const std::string& spill_dir, InputWrites& writes) {
  if (!spill_dir.empty()) {
    std::error_code ec;
    std::filesystem::create_directories(spill_dir, ec);
    if (ec) return Status::invalid_argument("prompt-cache spill folder " + spill_dir + ": " + ec.message());
    // What a process before this one spilled belongs to a head session that has ended.
    for (const auto& e : std::filesystem::directory_iterator(spill_dir, ec)) {
      if (e.path().extension() == ".kv") std::filesystem::remove(e.path(), ec);
    }
  }
  return std::unique_ptr<ShareStore>(new ShareStore(spill_dir, writes));
}

ShareStore::~ShareStore() {
  std::lock_guard<std::mutex> lock(mutex_);
  drop_all_locked();
}

KvShareStoreStats ShareStore::stats() {
  std::lock_guard<std::mutex> lock(mutex_);
  KvShareStoreStats s = totals_;
  s.shares = shares_.size();
  s.bytes = bytes_;
  s.disk_bytes = disk_bytes_;
  return s;
}

KvShareStoreStats ShareStore::release(uint64_t session) {
  std::lock_guard<std::mutex> lock(mutex_);
  KvShareStoreStats freed;
  if (session == 0 || session_.load() != session) return freed;
  freed.shares = shares_.size();
  freed.bytes = bytes_;
  freed.disk_bytes = disk_bytes_;
  drop_all_locked();
  return freed;
}

}  // namespace tandem::datapath
