#include "engine/cached_upload.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstring>
#include <memory>
#include <mutex>
#include <optional>
#include <thread>

#include "common/cached_tensor.h"
#include "common/log.h"
#include "datapath/interpose.h"
#include "engine/hash_memo.h"
#include "engine/model_loader.h"
#include "ggml-backend.h"
#include "ggml.h"
#include "link/protocol.h"
#include "plan/model_info.h"

namespace tandem::engine {

using link::encode_cached_marker;
namespace {

struct Mapping {
  const uint8_t* base = nullptr;
  size_t size = 0;
  ~Mapping() {
    if (base != nullptr) ::munmap(const_cast<uint8_t*>(base), size);
  }
};

struct Job {
  const uint8_t* data = nullptr;  // in our own mapping of the file
  uint64_t bytes = 0;
  size_t file = 0;                      // index in the model's files
  uint64_t offset = 0;                  // in that file
  std::optional<MemoEntry> remembered;  // from the hash memo, used once its fingerprint matches
  std::optional<uint64_t> hash;         // set by the pool
  uint64_t fingerprint = 0;             // set by the pool with `hash`
};

// The state of one load. Jobs are fixed before the pool starts; `hash` fields are written under
// `mutex`.
struct Uploads {
  CachedUploadPlan plan;
  std::vector<std::unique_ptr<Mapping>> maps;
  std::vector<std::string> order;  // job names in the loader's order
  std::unordered_map<std::string, Job> jobs;
  std::mutex mutex;
  std::condition_variable hashed;
  std::atomic<size_t> next{0};
  std::atomic<bool> stopping{false};
  std::vector<std::thread> pool;
  std::chrono::steady_clock::time_point t0, t1;
  CachedUploadStats stats;              // under mutex
  std::vector<std::string> memo_files;  // per model file; "" where there is no memo

  void work() {
    for (;;) {
      const size_t i = next.fetch_add(1);
      if (i >= order.size() || stopping) break;
      Job& j = jobs.at(order[i]);
      const uint64_t fp = weight_fingerprint(j.data, j.bytes);
      const bool known = j.remembered && j.remembered->fingerprint == fp;
      const uint64_t h = known ? j.remembered->hash : fnv1a(j.data, j.bytes);
      std::lock_guard<std::mutex> lock(mutex);
      j.hash = h;
      j.fingerprint = fp;
      stats.remembered += known ? 1 : 0;
      t1 = std::chrono::steady_clock::now();
      hashed.notify_all();
    }
  }

  // Writes each file's memo again when this load hashed something it did not remember.
  void remember() {
    for (size_t f = 0; f < memo_files.size(); ++f) {
      if (memo_files[f].empty()) continue;
      HashMemo memo = read_hash_memo(memo_files[f]);
      bool changed = false;
      for (const auto& [name, j] : jobs) {
        if (j.file != f || !j.hash) continue;
        MemoEntry& e = memo[{j.offset, j.bytes}];
        changed |= e.hash != *j.hash || e.fingerprint != j.fingerprint;
        e = MemoEntry{*j.hash, j.fingerprint};
      }
      if (!changed) continue;
      if (Status st = write_hash_memo(memo_files[f], memo); !st.is_ok()) {
        log::warn("engine", "weight hashes not remembered (the next load hashes again): " + st.message());
      }
    }
  }
};

CachedUploadStats g_last_stats;  // under g_mutex

std::mutex g_mutex;  // guards g_uploads' lifetime
std::unique_ptr<Uploads> g_uploads;

// The tensor-set hook while a load runs: true when the weight went as a marker.
bool try_marker(ggml_tensor* t, const void* data, size_t offset, size_t size) {
  if (offset != 0 || size <= kSeedThreshold || size != ggml_nbytes(t) || t->buffer == nullptr) return false;
  if (ggml_backend_buffer_get_usage(t->buffer) != GGML_BACKEND_BUFFER_USAGE_WEIGHTS) return false;
  const std::string endpoint = datapath::rpc_endpoint(ggml_backend_buft_name(ggml_backend_buffer_get_type(t->buffer)));
  if (endpoint.empty()) return false;
  std::lock_guard<std::mutex> life(g_mutex);
  Uploads* u = g_uploads.get();
  if (u == nullptr) return false;
  auto listing = u->plan.listings.find(endpoint);
  auto job = u->jobs.find(t->name);
  if (listing == u->plan.listings.end() || job == u->jobs.end() || job->second.bytes != size) return false;
  Job& j = job->second;
  // The hash is of the file; libllama's bytes come from its own mapping of the same file. A cheap
  // check that they are the same bytes (a file replaced during the load would differ).
  const size_t probe = std::min<size_t>(size, 4096);
  const auto* d = static_cast<const uint8_t*>(data);
  bool ok = std::memcmp(d, j.data, probe) == 0 && std::memcmp(d + size - probe, j.data + size - probe, probe) == 0;
  uint64_t hash = 0;
  if (ok) {
    std::unique_lock<std::mutex> lock(u->mutex);
    u->hashed.wait(lock, [&] { return j.hash.has_value() || u->stopping; });
    ok = j.hash.has_value();
    if (ok) hash = *j.hash;
  }
  auto cached = ok ? listing->second.find(hash) : listing->second.end();
  if (cached == listing->second.end() || cached->second != size) {
    std::lock_guard<std::mutex> lock(u->mutex);
    ++u->stats.fallbacks;
    return false;
  }
  const auto marker = encode_cached_marker({hash, size});
  datapath::real_tensor_set()(t, marker.data(), 0, marker.size());
  std::lock_guard<std::mutex> lock(u->mutex);
  ++u->stats.markers;
  u->stats.marker_bytes += size;
  return true;
}

}  // namespace

Status start_cached_uploads(const CachedUploadPlan& plan) {
  auto info = plan::read_model_info(plan.model);
  if (!info.is_ok()) return info.status();
  auto u = std::make_unique<Uploads>();
  u->plan = plan;
  for (const std::string& f : info->files) {
    const int fd = ::open(f.c_str(), O_RDONLY | O_CLOEXEC);
    struct stat st {};
    if (fd < 0 || ::fstat(fd, &st) != 0) {
      if (fd >= 0) ::close(fd);
      return Status::not_found(f + ": " + std::strerror(errno));
    }
    auto m = std::make_unique<Mapping>();
    m->size = static_cast<size_t>(st.st_size);
    void* p = m->size > 0 ? ::mmap(nullptr, m->size, PROT_READ, MAP_SHARED, fd, 0) : MAP_FAILED;
    ::close(fd);
    if (p == MAP_FAILED) return Status::unavailable(f + ": cannot map: " + std::strerror(errno));
    m->base = static_cast<const uint8_t*>(p);
    u->maps.push_back(std::move(m));
  }
  std::vector<const plan::TensorInfo*> picked;
  for (const auto& t : info->tensors) {
    const bool remote = (t.layer >= plan.first_layer && t.layer < plan.end_layer) ||
                        (t.layer < 0 && plan.output_remote && t.name.rfind("output", 0) == 0) ||
                        (plan.embedding_remote && t.name == "token_embd.weight");
    if (!remote || t.bytes <= kSeedThreshold) continue;
    const Mapping& m = *u->maps.at(static_cast<size_t>(t.split));
    if (t.file_offset + t.bytes > m.size)
      return Status::invalid_argument(info->files[t.split] + ": tensor " + t.name + " runs past the end");
    picked.push_back(&t);
  }
  // libllama loads layer by layer; hashing in that order keeps the pool ahead of the loader.
  std::stable_sort(picked.begin(), picked.end(), [](const auto* a, const auto* b) {
    return (a->layer < 0 ? INT32_MAX : a->layer) < (b->layer < 0 ? INT32_MAX : b->layer);
  });
  std::vector<HashMemo> memos(info->files.size());
  u->memo_files.assign(info->files.size(), "");
  if (!plan.hash_memo_dir.empty()) {
    for (size_t f = 0; f < info->files.size(); ++f) {
      auto path = hash_memo_path(plan.hash_memo_dir, info->files[f]);
      if (!path.is_ok()) continue;
      u->memo_files[f] = path.value();
      memos[f] = read_hash_memo(path.value());
    }
  }
  for (const auto* t : picked) {
    const size_t f = static_cast<size_t>(t->split);
    const Mapping& m = *u->maps.at(f);
    ::madvise(const_cast<uint8_t*>(m.base + (t->file_offset & ~uint64_t{4095})), t->bytes, MADV_WILLNEED);
    Job j;
    j.data = m.base + t->file_offset;
    j.bytes = t->bytes;
    j.file = f;
    j.offset = t->file_offset;
    if (auto e = memos[f].find({t->file_offset, t->bytes}); e != memos[f].end()) j.remembered = e->second;
    u->jobs[t->name] = j;
    u->order.push_back(t->name);
  }
  if (!datapath::tensor_set_interposed())
    return Status::internal("this tandem-engine does not interpose ggml_backend_tensor_set (a build problem)");
  unsigned n = plan.threads > 0 ? static_cast<unsigned>(plan.threads)
                                : std::clamp(std::thread::hardware_concurrency() / 2, 1u, 16u);
  n = std::min<unsigned>(n, static_cast<unsigned>(std::max<size_t>(u->order.size(), 1)));
  u->t0 = u->t1 = std::chrono::steady_clock::now();
  Uploads* raw = u.get();
  for (unsigned i = 0; i < n; ++i) u->pool.emplace_back([raw] { raw->work(); });
  std::lock_guard<std::mutex> life(g_mutex);
  g_uploads = std::move(u);
  datapath::add_tensor_set_hook(&try_marker);
  return Status::ok();
}

CachedUploadStats finish_cached_uploads() {
  datapath::remove_tensor_set_hook(&try_marker);
  std::unique_ptr<Uploads> u;
  {
    std::lock_guard<std::mutex> life(g_mutex);
    u = std::move(g_uploads);
  }
  if (!u) return {};
  u->stopping = true;
  u->hashed.notify_all();
  for (auto& t : u->pool) t.join();
  u->remember();
  CachedUploadStats stats;
  {
    std::lock_guard<std::mutex> lock(u->mutex);
    u->stats.hash_s = std::chrono::duration<double>(u->t1 - u->t0).count();
    stats = u->stats;
  }
  std::lock_guard<std::mutex> life(g_mutex);
  g_last_stats = stats;
  return stats;
}

CachedUploadStats last_cached_upload_stats() {
  std::lock_guard<std::mutex> life(g_mutex);
  return g_last_stats;
}

}  // namespace tandem::engine
