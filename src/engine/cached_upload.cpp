#include "engine/cached_upload.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <thread>

#include "common/cached_tensor.h"
#include "common/log.h"
#include "datapath/file_reads.h"
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

constexpr uint64_t kPage = 4096;
// How far ahead of libllama's reads of the head's own weights prefetch() asks for the file.
constexpr uint64_t kPrefetch = 32ull << 20;

struct Mapping {
  const uint8_t* base = nullptr;
  size_t size = 0;
  int fd = -1;    // kept open: page-cache hints
  dev_t dev = 0;  // the file's identity, to know libllama's stream of it
  ino_t inode = 0;
  ~Mapping() {
    if (base != nullptr) ::munmap(const_cast<uint8_t*>(base), size);
    if (fd >= 0) ::close(fd);
  }
};

// madvise over the pages that hold [offset, offset + bytes) of `m`.
void advise(const Mapping& m, uint64_t offset, uint64_t bytes, int advice) {
  const uint64_t start = offset & ~(kPage - 1);
  ::madvise(const_cast<uint8_t*>(m.base + start), offset + bytes - start, advice);
}

struct Job {
  const uint8_t* data = nullptr;  // in our own mapping of the file
  uint64_t bytes = 0;
  size_t file = 0;      // index in the model's files
  uint64_t offset = 0;  // in that file
  // libllama reads it, without mmap, into a buffer it then hands to the tensor set (the token
  // embedding it reads into the head's own table, moved to the worker later: never skipped).
  bool skippable = true;
  std::optional<MemoEntry> remembered;  // from the hash memo, used once its fingerprint matches
  std::optional<uint64_t> hash;         // set by the pool
  uint64_t fingerprint = 0;             // set by the pool with `hash`
};

// A read of `job` that libllama asked for into `buffer` and that was skipped: the tensor set of
// that buffer sends the marker, or the bytes are read then.
struct Skipped {
  const uint8_t* buffer = nullptr;
  Job* job = nullptr;
};

// The state of one load. Jobs are fixed before the pool starts; `hash` fields are written under
// `mutex`.
struct Uploads {
  CachedUploadPlan plan;
  std::vector<std::unique_ptr<Mapping>> maps;
  std::vector<std::string> order;  // job names in the loader's order
  std::unordered_map<std::string, Job> jobs;
  std::map<std::pair<size_t, uint64_t>, Job*> at;  // (file, offset) -> its job
  std::vector<Skipped> skipped;                    // skipped reads no tensor set took yet; under g_mutex
  // Per file: where its tensor data starts, and the [offset, end) of each weight that a read may
  // skip, sorted.
  std::vector<uint64_t> data_start;
  std::vector<std::vector<std::pair<uint64_t, uint64_t>>> skippable_ranges;
  // Per file: the [end of the last read, end of what prefetch() asked for after it); under g_mutex.
  std::vector<std::pair<uint64_t, uint64_t>> prefetched;
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
      const Mapping& m = *maps.at(j.file);
      const uint64_t fp = weight_fingerprint(j.data, j.bytes);
      const bool known = j.remembered && j.remembered->fingerprint == fp;
      if (!known && j.remembered) {  // advised for its fingerprint alone: read it in as a whole
        advise(m, j.offset, j.bytes, MADV_NORMAL);
        advise(m, j.offset, j.bytes, MADV_WILLNEED);
      }
      const uint64_t h = known ? j.remembered->hash : fnv1a(j.data, j.bytes);
      if (!known && plan.file_read) {
        // Read for its hash alone: out of the page cache, which an integrated GPU shares with
        // the weights it holds (our mapping's pages first, or the cache keeps them).
        advise(m, j.offset, j.bytes, MADV_DONTNEED);
        ::posix_fadvise(m.fd, static_cast<off_t>(j.offset), static_cast<off_t>(j.bytes), POSIX_FADV_DONTNEED);
      }
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

  // `j`'s hash once the pool has it; nullopt when the pool stopped first.
  std::optional<uint64_t> hash_of(Job& j) {
    std::unique_lock<std::mutex> lock(mutex);
    hashed.wait(lock, [&] { return j.hash.has_value() || stopping; });
    return j.hash;
  }

  bool listed_anywhere(uint64_t hash, uint64_t bytes) const {
    for (const auto& [endpoint, listing] : plan.listings) {
      auto e = listing.find(hash);
      if (e != listing.end() && e->second == bytes) return true;
    }
    return false;
  }

  // Reads the bytes a skipped read left out, as libllama would have. Under g_mutex.
  void complete(const Skipped& s) {
    const Job& j = *s.job;
    read_exact(j.file, j.offset, const_cast<uint8_t*>(s.buffer), j.bytes);
    std::lock_guard<std::mutex> lock(mutex);
    ++stats.reads_completed;
    stats.bytes_not_read -= j.bytes;
  }

  // Reads [offset, offset + n) of `file` into `dst`, and nothing else: the pages missing from the
  // page cache are asked for as they are (no read-ahead marks), then copied through our mapping,
  // whose random advice keeps the read-ahead marks other reads left there from carrying on.
  void read_exact(size_t file, uint64_t offset, uint8_t* dst, uint64_t n) {
    const Mapping& m = *maps.at(file);
    advise(m, offset, n, MADV_RANDOM);
    will_need(m, offset, offset + n);
    std::memcpy(dst, m.base + offset, n);
  }

  // Asks for what follows a read at `end`, up to kPrefetch bytes, but not into the next weight a
  // read may skip: tandem's own read-ahead, which unlike the kernel's leaves no marks behind.
  void prefetch(size_t file, uint64_t end) {
    const Mapping& m = *maps.at(file);
    const auto& skips = skippable_ranges[file];
    auto next = std::lower_bound(skips.begin(), skips.end(), std::make_pair(end, uint64_t{0}));
    uint64_t limit = std::min<uint64_t>(end + kPrefetch, m.size);
    if (next != skips.end()) limit = std::min(limit, next->first);
    auto& [from, to] = prefetched[file];
    const uint64_t start = end >= from && end <= to ? to : end;  // asked for already, by the last read
    if (start < limit) will_need(m, start, limit & ~(kPage - 1));
    from = end;
    to = std::max(start, limit & ~(kPage - 1));
  }

  // posix_fadvise(WILLNEED) over [begin, end), in pieces no device's read-ahead limit cuts short
  // (the kernel reads at most one read-ahead window per call).
  static void will_need(const Mapping& m, uint64_t begin, uint64_t end) {
    constexpr uint64_t kPiece = 128 * 1024;
    for (uint64_t o = begin & ~(kPage - 1); o < end; o += kPiece) {
      ::posix_fadvise(m.fd, static_cast<off_t>(o), static_cast<off_t>(std::min(kPiece, end - o)), POSIX_FADV_WILLNEED);
    }
  }

  // Completes every skipped read still owed. Under g_mutex.
  void complete_all() {
    for (const Skipped& s : skipped) complete(s);
    skipped.clear();
  }
};

CachedUploadStats g_last_stats;  // under g_mutex

std::mutex g_mutex;  // guards g_uploads' lifetime and its skipped reads
std::unique_ptr<Uploads> g_uploads;

// The cache listing of the worker whose RPC server holds `t`'s weight buffer; nullptr for any
// other buffer.
const CacheListing* listing_of(const Uploads& u, const ggml_tensor* t) {
  if (t->buffer == nullptr || ggml_backend_buffer_get_usage(t->buffer) != GGML_BACKEND_BUFFER_USAGE_WEIGHTS)
    return nullptr;
  const std::string endpoint = datapath::rpc_endpoint(ggml_backend_buft_name(ggml_backend_buffer_get_type(t->buffer)));
  if (endpoint.empty()) return nullptr;
  auto it = u.plan.listings.find(endpoint);
  return it == u.plan.listings.end() ? nullptr : &it->second;
}

// Sends the whole of `t`, which holds `j`'s weight, as a marker when its worker listed j's hash.
// True when sent.
bool send_marker(Uploads* u, ggml_tensor* t, Job& j) {
  const CacheListing* listing = listing_of(*u, t);
  if (listing == nullptr || ggml_nbytes(t) != j.bytes) return false;
  const std::optional<uint64_t> hash = u->hash_of(j);
  if (!hash) return false;
  auto cached = listing->find(*hash);
  if (cached == listing->end() || cached->second != j.bytes) return false;
  const auto marker = encode_cached_marker({*hash, j.bytes});
  datapath::real_tensor_set()(t, marker.data(), 0, marker.size());
  std::lock_guard<std::mutex> lock(u->mutex);
  ++u->stats.markers;
  u->stats.marker_bytes += j.bytes;
  return true;
}

// libllama's reads of tensor data this small go through without a look (norms). Its stream is in
// random mode by then, which reads them exactly.
constexpr uint64_t kLookedAtRead = 64 * 1024;
// The fread hook while a load runs (datapath/file_reads.h), on libllama's reads of the model's
// tensor data, which it makes without mmap. It skips the read of a whole weight that a worker
// listed: libllama reads it into a buffer of its own and hands that buffer to the tensor set next:
// pinned llama.cpp: text src/llama-model-loader.cpp std::vector<no_init<uint8_t>> read_buf(n_size); file->seek(weight->offs, SEEK_SET); file->read_raw(read_buf.data(), n_size); ggml_backend_tensor_set(cur, read_buf.data(), 0, n_size);
// The kernel's read-ahead would still read much of what it skips: whole attention matrices lie
// between the norms of a worker's layer, and the head's last layer ends where the worker's first
// begins. Its marks carry it on whenever a read meets one, random mode or not, and a GPU head reads
// its own weights in 1 MiB pieces (libllama's staging buffers), which it ramps up on: measured on
// an H100, 10.6 % of the worker's share read that way. So libllama's stream stays in random mode,
// which reads exactly what is asked, and the reads it makes of weights are made here, exactly,
// with a read-ahead of our own (prefetch()) that stops where a weight to skip begins.
bool on_model_read(void* ptr, size_t size, size_t n, FILE* stream, size_t* items) {
  if (size == 0 || n == 0 || n > SIZE_MAX / size) return false;
  const uint64_t bytes = static_cast<uint64_t>(size) * n;
  std::lock_guard<std::mutex> life(g_mutex);
  Uploads* u = g_uploads.get();
  if (u == nullptr) return false;
  struct stat st {};
  const int fd = ::fileno(stream);
  if (fd < 0 || ::fstat(fd, &st) != 0) return false;
  size_t file = u->maps.size();
  for (size_t f = 0; f < u->maps.size(); ++f) {
    if (u->maps[f]->dev == st.st_dev && u->maps[f]->inode == st.st_ino) file = f;
  }
  if (file == u->maps.size()) return false;
  const off_t at_pos = ::ftello(stream);
  // The header (gguf's own reads, before libllama's) keeps the kernel's read-ahead.
  if (at_pos < 0 || static_cast<uint64_t>(at_pos) < u->data_start[file]) return false;
  const uint64_t pos = static_cast<uint64_t>(at_pos);
  // From the first read of tensor data on, small ones included: libllama loads one backend's
  // tensors after another, in an order of its own, so the first may be a worker layer's norm, and a
  // read in normal mode there would start the read-ahead into the weights it skips next.
  ::posix_fadvise(fd, 0, 0, POSIX_FADV_RANDOM);
  if (bytes < kLookedAtRead) return false;
  auto at = u->at.find({file, pos});
  Job* j = at != u->at.end() && at->second->skippable && at->second->bytes == bytes ? at->second : nullptr;
  if (j != nullptr) {
    u->complete_all();  // an earlier one no tensor set took (a weight read into host memory)
    // A weight no worker listed is sent whole: libllama reads it.
    const std::optional<uint64_t> hash = u->hash_of(*j);
    if (!hash || !u->listed_anywhere(*hash, bytes)) j = nullptr;
  }
  // Where the read would have left the stream.
  if (j != nullptr && ::fseeko(stream, at_pos + static_cast<off_t>(bytes), SEEK_SET) == 0) {
    u->skipped.push_back({static_cast<const uint8_t*>(ptr), j});
    std::lock_guard<std::mutex> lock(u->mutex);
    ++u->stats.reads_skipped;
    u->stats.bytes_not_read += bytes;
    *items = n;
    return true;
  }
  // The read libllama asked for, then the stream moved on past it (a small read at the new place,
  // in random mode: exact).
  const Mapping& m = *u->maps[file];
  if (pos + bytes > m.size) return false;
  advise(m, pos, bytes, MADV_RANDOM);
  Uploads::will_need(m, pos, pos + bytes);
  u->prefetch(file, pos + bytes);  // asked for after what is needed now
  std::memcpy(ptr, m.base + pos, bytes);
  if (::fseeko(stream, at_pos + static_cast<off_t>(bytes), SEEK_SET) != 0) return false;
  *items = n;
  return true;
}

// The tensor-set hook while a load runs: true when the weight went as a marker (or, for a skipped
// read, was placed from the file).
bool try_marker(ggml_tensor* t, const void* data, size_t offset, size_t size) {
  std::lock_guard<std::mutex> life(g_mutex);
  Uploads* u = g_uploads.get();
  if (u == nullptr) return false;
  if (!u->skipped.empty()) {
    const auto d = reinterpret_cast<uintptr_t>(data);
    auto s = std::find_if(u->skipped.begin(), u->skipped.end(), [&](const Skipped& k) {
      const auto b = reinterpret_cast<uintptr_t>(k.buffer);
      return d >= b && d - b < k.job->bytes;
    });
    if (s == u->skipped.end()) {
      u->complete_all();
    } else {
      const Skipped mine = *s;
      u->skipped.erase(s);
      u->complete_all();
      if (data == mine.buffer && offset == 0 && size == mine.job->bytes && send_marker(u, t, *mine.job)) return true;
      u->complete(mine);  // the bytes it stands for, read now: ggml's path takes them
      std::lock_guard<std::mutex> lock(u->mutex);
      ++u->stats.fallbacks;
      return false;
    }
  }
  if (offset != 0 || size <= kSeedThreshold || size != ggml_nbytes(t) || listing_of(*u, t) == nullptr) return false;
  auto job = u->jobs.find(t->name);
  if (job == u->jobs.end() || job->second.bytes != size) return false;
  Job& j = job->second;
  // The hash is of the file; libllama's bytes come from its own mapping or read of the same file.
  // A cheap check that they are the same bytes (a file replaced during the load would differ).
  const size_t probe = std::min<size_t>(size, 4096);
  const auto* d = static_cast<const uint8_t*>(data);
  const bool same =
      std::memcmp(d, j.data, probe) == 0 && std::memcmp(d + size - probe, j.data + size - probe, probe) == 0;
  if (same && send_marker(u, t, j)) return true;
  std::lock_guard<std::mutex> lock(u->mutex);
  ++u->stats.fallbacks;
  return false;
}

}  // namespace

Status start_cached_uploads(const CachedUploadPlan& plan) {
  auto info = plan::read_model_info(plan.model);
  if (!info.is_ok()) return info.status();
  auto u = std::make_unique<Uploads>();
  u->plan = plan;
  for (const std::string& f : info->files) {
    auto m = std::make_unique<Mapping>();
    m->fd = ::open(f.c_str(), O_RDONLY | O_CLOEXEC);
    struct stat st {};
    if (m->fd < 0 || ::fstat(m->fd, &st) != 0) return Status::not_found(f + ": " + std::strerror(errno));
    m->size = static_cast<size_t>(st.st_size);
    m->dev = st.st_dev;
    m->inode = st.st_ino;
    void* p = m->size > 0 ? ::mmap(nullptr, m->size, PROT_READ, MAP_SHARED, m->fd, 0) : MAP_FAILED;
    if (p == MAP_FAILED) return Status::unavailable(f + ": cannot map: " + std::strerror(errno));
    m->base = static_cast<const uint8_t*>(p);
    u->maps.push_back(std::move(m));
  }
  u->data_start.assign(info->files.size(), UINT64_MAX);
  u->skippable_ranges.resize(info->files.size());
  u->prefetched.resize(info->files.size());
  for (const auto& t : info->tensors) {
    uint64_t& start = u->data_start.at(static_cast<size_t>(t.split));
    start = std::min(start, t.file_offset);
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
  // Hashing in libllama's order keeps the pool ahead of the loader: layer by layer through a
  // mapping; without one, the weights bound for other devices' buffers biggest first.
  // pinned llama.cpp: text src/llama-model-loader.cpp load them biggest-first so the largest staging buffer is allocated while the fewest weights are resident
  std::stable_sort(picked.begin(), picked.end(), [&](const auto* a, const auto* b) {
    if (plan.file_read) return a->bytes > b->bytes;
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
    Job j;
    j.data = m.base + t->file_offset;
    j.bytes = t->bytes;
    j.file = f;
    j.offset = t->file_offset;
    j.skippable = t->name != "token_embd.weight";
    if (auto e = memos[f].find({t->file_offset, t->bytes}); e != memos[f].end()) j.remembered = e->second;
    // A remembered hash needs the fingerprint's pages alone: no read-around of the rest. Any
    // other weight is hashed whole: read ahead.
    advise(m, j.offset, j.bytes, j.remembered ? MADV_RANDOM : MADV_WILLNEED);
    Job& placed = u->jobs[t->name] = j;
    u->at[{f, t->file_offset}] = &placed;
    if (j.skippable) u->skippable_ranges[f].emplace_back(j.offset, j.offset + j.bytes);
    u->order.push_back(t->name);
  }
  for (auto& r : u->skippable_ranges) std::sort(r.begin(), r.end());
  if (!datapath::tensor_set_interposed())
    return Status::internal("this tandem-engine does not interpose ggml_backend_tensor_set (a build problem)");
  if (plan.file_read && !datapath::file_read_interposed()) {
    log::warn("engine",
              "this tandem-engine does not interpose fread (a build problem): loading without mmap, the head reads "
              "the weights it sends the workers as markers");
  }
  unsigned n = plan.threads > 0 ? static_cast<unsigned>(plan.threads)
                                : std::clamp(std::thread::hardware_concurrency() / 2, 1u, 16u);
  n = std::min<unsigned>(n, static_cast<unsigned>(std::max<size_t>(u->order.size(), 1)));
  u->t0 = u->t1 = std::chrono::steady_clock::now();
  Uploads* raw = u.get();
  for (unsigned i = 0; i < n; ++i) u->pool.emplace_back([raw] { raw->work(); });
  std::lock_guard<std::mutex> life(g_mutex);
  g_uploads = std::move(u);
  datapath::add_tensor_set_hook(&try_marker);
  datapath::set_file_read_hook(&on_model_read);
  return Status::ok();
}

void complete_skipped_reads() {
  std::lock_guard<std::mutex> life(g_mutex);
  if (Uploads* u = g_uploads.get()) u->complete_all();
}

CachedUploadStats finish_cached_uploads() {
  datapath::set_file_read_hook(nullptr);
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
