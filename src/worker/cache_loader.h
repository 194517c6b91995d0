// The RPC child's loader of cached weights: when the head sends a 32-byte marker
// (link/protocol.h) in place of a weight, ggml's RPC server hands it to
// `ggml_backend_tensor_set` as if it were the weight's data; the child's hook (datapath/
// interpose.h) recognises it and fills the weight from `<cache>/<hash>` instead.
//
// Why not ggml's own SET_TENSOR_HASH: its server reads each cache file into a fresh std::vector
// (zeroed first) and copies it to the device from pageable memory, one weight after another in
// one thread: ~1 GB/s, the largest part of a seeded load. The loader reads chunks of a weight in
// parallel threads, straight into host buffers (CPU devices) or into page-locked staging buffers
// that each thread copies to the device on its own stream.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>

#include "common/cached_tensor.h"
#include "common/status.h"
#include "link/protocol.h"

struct ggml_tensor;

namespace tandem::worker {

struct CacheLoaderOptions {
  std::string cache_dir;
  int threads = 0;                   // parallel readers; 0: half the cores, 2 to 8
  size_t chunk_bytes = 16ull << 20;  // what one reader reads and copies at a time
  bool stage_host_buffers = false;   // copy through staging buffers even into host memory (tests)
  // Once a weight's bytes are on the device, drop its file from the page cache: the device holds
  // them, and on a box whose GPU shares system memory (GB10) the cached copy would take the same
  // memory a second time. A later load reads the file from disk again.
  bool drop_page_cache = true;
};

struct CacheLoaderStats {
  uint64_t weights = 0, bytes = 0;
  double seconds = 0;  // time spent inside loads
};

class CacheLoader {
 public:
  explicit CacheLoader(CacheLoaderOptions options);
  ~CacheLoader();
  CacheLoader(const CacheLoader&) = delete;
  CacheLoader& operator=(const CacheLoader&) = delete;

  // Fills `tensor` (whole: the marker's size must be ggml_nbytes(tensor)) from the cache file the
  // marker names, then drops the file from the page cache (`drop_page_cache`; pages not yet written
  // back stay). Errors: no such file, a size that differs, a read that fails or ends early.
  Status load(ggml_tensor* tensor, const link::CachedMarker& marker);

  // Frees the staging buffers (they are allocated again by the next load).
  void release();

  // What was loaded since the last call.
  CacheLoaderStats take_stats();

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

// In the RPC child: routes markers that ggml's server passes to `ggml_backend_tensor_set` to a
// process-wide loader. A marker the loader cannot serve ends the process with the reason logged
// (ggml's server cannot fail a SET_TENSOR): the worker restarts its RPC server, and the head's
// load fails instead of computing with a weight that was never filled. Errors: this executable
// does not interpose `ggml_backend_tensor_set`.
Status install_cache_loader(CacheLoaderOptions options);

// The process-wide loader's `release` and `take_stats`; no-ops without one.
void release_cache_loader();
CacheLoaderStats take_cache_loader_stats();

// The exit status of an RPC child whose cache load failed.
inline constexpr int kCacheLoadFailedExit = 3;

}  // namespace tandem::worker
