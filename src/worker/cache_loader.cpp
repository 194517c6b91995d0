#include "worker/cache_loader.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <map>
#include <mutex>
#include <thread>
#include <vector>

#include "common/cpu_cores.h"
#include "common/log.h"
#include "common/units.h"
#include "datapath/interpose.h"
#include "ggml-backend.h"
#include "ggml.h"
#include "link/protocol.h"

namespace tandem::worker {

using link::CachedMarker;
using link::kCachedMarkerSize;
using link::parse_cached_marker;
namespace {

struct Fd {
  int fd = -1;
  ~Fd() {
    if (fd >= 0) ::close(fd);
  }
};

// Reads exactly n bytes at `offset`; "" or why not.
std::string read_exact(int fd, uint8_t* dst, size_t n, uint64_t offset) {
  while (n > 0) {
    const ssize_t r = ::pread(fd, dst, n, static_cast<off_t>(offset));
    if (r < 0 && errno == EINTR) continue;
    if (r < 0) return std::strerror(errno);
    if (r == 0) return "the file ended early";
    dst += r, offset += static_cast<uint64_t>(r), n -= static_cast<size_t>(r);
  }
  return "";
}

}  // namespace

struct CacheLoader::Impl {
  struct Staging {
    ggml_backend_buffer_t buffer = nullptr;  // page-locked, from the device's host buffer type
    std::unique_ptr<uint8_t[]> heap;         // when the device has none (or it is out of memory)
    uint8_t* data = nullptr;
  };

  CacheLoaderOptions o;
  unsigned readers = 2;
  std::mutex mutex;                                                    // one load at a time; release() waits for it
  std::map<ggml_backend_buffer_type_t, std::vector<Staging>> staging;  // by host buffer type
  CacheLoaderStats stats;

  std::vector<Staging>& staging_for(ggml_backend_buffer_type_t host) {
    auto& v = staging[host];
    if (!v.empty()) return v;
    for (unsigned i = 0; i < readers; ++i) {
      Staging s;
      if (host != nullptr) s.buffer = ggml_backend_buft_alloc_buffer(host, o.chunk_bytes);
      if (s.buffer != nullptr) {
        s.data = static_cast<uint8_t*>(ggml_backend_buffer_get_base(s.buffer));
      } else {
        s.heap.reset(new uint8_t[o.chunk_bytes]);
        s.data = s.heap.get();
      }
      v.push_back(std::move(s));
    }
    return v;
  }

  void free_staging() {
    for (auto& [buft, v] : staging) {
      for (auto& s : v) {
        if (s.buffer != nullptr) ggml_backend_buffer_free(s.buffer);
      }
    }
    staging.clear();
  }
};

CacheLoader::CacheLoader(CacheLoaderOptions options) : impl_(std::make_unique<Impl>()) {
  impl_->o = std::move(options);
  if (impl_->o.chunk_bytes == 0) impl_->o.chunk_bytes = 16ull << 20;
  impl_->readers = impl_->o.threads > 0 ? static_cast<unsigned>(impl_->o.threads)
                                        : static_cast<unsigned>(std::clamp(physical_cores() / 2, 2, 8));
}

CacheLoader::~CacheLoader() { impl_->free_staging(); }

Status CacheLoader::load(ggml_tensor* tensor, const CachedMarker& marker) {
  const std::string name = hash_name(marker.hash);
  const std::string path = impl_->o.cache_dir + "/" + name;
  const uint64_t bytes = ggml_nbytes(tensor);
  if (marker.bytes != bytes) {
    return Status::invalid_argument("cached weight " + name + " is " + format_bytes(marker.bytes) + " but tensor " +
                                    tensor->name + " holds " + format_bytes(bytes));
  }
  if (tensor->buffer == nullptr)
    return Status::invalid_argument("tensor " + std::string(tensor->name) + " has no buffer");
  Fd f;
  f.fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  struct stat st {};
  if (f.fd < 0 || ::fstat(f.fd, &st) != 0) return Status::not_found(path + ": " + std::strerror(errno));
  if (static_cast<uint64_t>(st.st_size) != bytes) {
    return Status::invalid_argument(path + " has " + format_bytes(static_cast<uint64_t>(st.st_size)) + ", the weight " +
                                    format_bytes(bytes));
  }
  ::posix_fadvise(f.fd, 0, 0, POSIX_FADV_WILLNEED);

  std::lock_guard<std::mutex> lock(impl_->mutex);
  const auto t0 = std::chrono::steady_clock::now();
  const bool direct = ggml_backend_buffer_is_host(tensor->buffer) && !impl_->o.stage_host_buffers;
  std::vector<Impl::Staging>* stage = nullptr;
  if (!direct) {
    ggml_backend_dev_t dev = ggml_backend_buft_get_device(ggml_backend_buffer_get_type(tensor->buffer));
    stage = &impl_->staging_for(dev != nullptr ? ggml_backend_dev_host_buffer_type(dev) : nullptr);
  }
  const size_t chunk = impl_->o.chunk_bytes;
  const uint64_t chunks = (bytes + chunk - 1) / chunk;
  std::atomic<uint64_t> next{0};
  std::atomic<bool> failed{false};
  std::string error;
  std::mutex error_mutex;
  auto reader = [&](unsigned slot) {
    for (;;) {
      const uint64_t i = next.fetch_add(1);
      if (i >= chunks || failed) return;
      const uint64_t off = i * chunk;
      const size_t len = static_cast<size_t>(std::min<uint64_t>(chunk, bytes - off));
      uint8_t* dst = direct ? static_cast<uint8_t*>(tensor->data) + off : (*stage)[slot].data;
      std::string why = read_exact(f.fd, dst, len, off);
      if (!why.empty()) {
        std::lock_guard<std::mutex> l(error_mutex);
        if (error.empty()) error = path + ": " + why;
        failed = true;
        return;
      }
      if (!direct) datapath::real_tensor_set()(tensor, dst, off, len);
    }
  };
  const unsigned n = static_cast<unsigned>(std::min<uint64_t>(impl_->readers, chunks));
  std::vector<std::thread> pool;
  for (unsigned s = 1; s < n; ++s) pool.emplace_back(reader, s);
  reader(0);
  for (auto& t : pool) t.join();
  if (!error.empty()) return Status::unavailable(error);
  // Every chunk is on the device: ggml_backend_tensor_set returns once its bytes are.
  if (impl_->o.drop_page_cache) ::posix_fadvise(f.fd, 0, 0, POSIX_FADV_DONTNEED);
  ++impl_->stats.weights;
  impl_->stats.bytes += bytes;
  impl_->stats.seconds += std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  return Status::ok();
}

void CacheLoader::release() {
  std::lock_guard<std::mutex> lock(impl_->mutex);
  impl_->free_staging();
}

CacheLoaderStats CacheLoader::take_stats() {
  std::lock_guard<std::mutex> lock(impl_->mutex);
  return std::exchange(impl_->stats, {});
}

namespace {

std::unique_ptr<CacheLoader> g_loader;  // set once, before the hook is installed

bool load_marker(ggml_tensor* tensor, const void* data, size_t offset, size_t size) {
  if (size != kCachedMarkerSize || offset != 0 || ggml_nbytes(tensor) <= kCachedMarkerSize) return false;
  const auto marker = parse_cached_marker(static_cast<const uint8_t*>(data), size);
  if (!marker) return false;
  const Status s = g_loader->load(tensor, *marker);
  if (s.is_ok()) return true;
  log::error("rpc-server",
             "cannot load cached weight " + std::string(tensor->name) + ": " + s.message() +
                 "; the RPC server stops so that the head's load fails rather than compute with an unfilled "
                 "weight (the worker restarts it)");
  std::fflush(nullptr);
  // With JSON logs a thread of this process relays stderr through a pipe (worker/rpc_server.cpp):
  // give it the moment it needs to pass the reason on.
  std::this_thread::sleep_for(std::chrono::milliseconds(200));
  ::_exit(kCacheLoadFailedExit);
}

}  // namespace

Status install_cache_loader(CacheLoaderOptions options) {
  if (!datapath::tensor_set_interposed()) {
    return Status::internal(
        "this tandem binary does not interpose ggml_backend_tensor_set, so it cannot load cached "
        "weights (a build problem)");
  }
  g_loader = std::make_unique<CacheLoader>(std::move(options));
  datapath::add_tensor_set_hook(&load_marker);
  return Status::ok();
}

void release_cache_loader() {
  if (g_loader) g_loader->release();
}

CacheLoaderStats take_cache_loader_stats() { return g_loader ? g_loader->take_stats() : CacheLoaderStats{}; }

}  // namespace tandem::worker
