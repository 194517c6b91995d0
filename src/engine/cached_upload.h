// Loading a worker's share of the weights from its own cache, without hashing on the load's path.
//
// ggml's RPC client hashes every weight above 10 MiB in the loading thread before asking the
// server for it (~1 GB/s: most of a seeded load's time). While a load runs with `start`ed
// uploads, tandem-engine hooks `ggml_backend_tensor_set` (datapath/interpose.h; the call
// libllama makes to place a weight in an RPC buffer): the weights bound for RPC servers are
// hashed ahead, in parallel, from the model file, and each one whose hash the server's worker
// listed in its cache is sent as a 32-byte marker (link/protocol.h) that the worker loads
// from its cache (worker/cache_loader.h). Anything else (weights the worker lacks, local devices,
// data that differs from the file) takes ggml's own path.
// See docs/worker.md, "The weight cache".
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <unordered_map>
#include <vector>

#include "common/cached_tensor.h"
#include "common/status.h"

namespace tandem::engine {

struct CachedUploadPlan {
  std::string model;                             // first file of the GGUF (splits follow)
  int first_layer = 0, end_layer = INT32_MAX;    // layers [first, end) live on RPC servers
  bool output_remote = false;                    // the output head too
  bool embedding_remote = false;                 // the token embedding too (datapath/worker_embedding.h)
  std::map<std::string, CacheListing> listings;  // RPC endpoint ("host:port") -> its cache
  int threads = 0;                               // hashing threads; 0 = half the cores, at most 16
  // Where hashes are remembered between loads (hash_memo.h); "" = hash every time.
  std::string hash_memo_dir;
};

struct CachedUploadStats {
  uint64_t markers = 0, marker_bytes = 0;  // weights sent as markers
  uint64_t fallbacks = 0;                  // candidates that took ggml's path (not cached, or data differed)
  uint64_t remembered = 0;                 // hashes taken from the memo instead of computed
  double hash_s = 0;                       // wall time the hashing pool ran
};

// Starts hashing and activates the interposer until `finish_cached_uploads`. One load at a time.
Status start_cached_uploads(const CachedUploadPlan& plan);
// Deactivates the interposer, stops the pool, remembers the hashes it computed, and says what
// happened.
CachedUploadStats finish_cached_uploads();
// What the last finished load said (tests and diagnostics).
CachedUploadStats last_cached_upload_stats();

}  // namespace tandem::engine
