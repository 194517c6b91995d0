// The worker's weight cache: the folder ggml's RPC server keeps tensor data in, one file per
// tensor named by the 64-bit FNV-1a hash of its bytes (16 hex digits).
//
// What llama.cpp v0.5.0 hashes (ggml/src/ggml-rpc/ggml-rpc.cpp and src/llama-model-loader.cpp):
// the loader uploads each weight tensor whole (one ggml_backend_tensor_set of ggml_nbytes; the
// chunked async path needs a device with host buffers, which RPC devices are not), and the RPC
// client, for a weight buffer and a size strictly above 10 MiB, first sends only the hash
// (RPC_CMD_SET_TENSOR_HASH); the server answers from `<cache>/<hash>` when that file exists, and
// otherwise receives the data and saves it there. Tensors of 10 MiB or less always travel that way.
// Seeding writes those files from the worker's own copy of the model, for every weight above
// kSeedThreshold (1 MiB), so a load from the head sends hashes, or tandem's markers
// (link/protocol.h, which also go below ggml's threshold, and which the RPC child loads
// itself: worker/cache_loader.h), instead of weights.
#pragma once

#include <cstdint>
#include <ctime>
#include <string>
#include <vector>

#include "common/cached_tensor.h"
#include "common/status.h"

namespace tandem::worker {

using tandem::fnv1a;
using tandem::hash_name;
using tandem::kHashThreshold;
using tandem::kSeedThreshold;

struct CacheEntry {
  std::string name;  // file name (the hash)
  uint64_t bytes = 0;
  std::time_t last_used = 0;  // latest of access and modification time
};

struct CacheStats {
  uint64_t entries = 0;
  uint64_t bytes = 0;
};

// Entries of `dir`, least recently used first. Files whose names are not 16 hex digits are ignored.
Result<std::vector<CacheEntry>> list_cache(const std::string& dir);
CacheStats cache_stats(const std::string& dir);  // zeros when the folder is missing

// Removes least recently used entries until the folder holds at most `max_bytes`. Returns the
// bytes removed. Last use is the file's access time where the file system records it (under
// `relatime`, reads update it at most once a day) or its modification time.
Result<uint64_t> enforce_cache_limit(const std::string& dir, uint64_t max_bytes);

struct SeedOptions {
  std::string model;  // GGUF, first split of a split model
  std::string cache_dir;
  int first_layer = -1;  // with last_layer: only blk.A..B (other tensors always); -1: all
  int last_layer = -1;
};

struct SeedResult {
  uint64_t tensors_written = 0, bytes_written = 0;
  uint64_t tensors_present = 0;                 // already in the cache
  uint64_t tensors_small = 0, bytes_small = 0;  // at or below the threshold: they will travel
};

// Writes every eligible tensor's data into the cache (each file written beside, then renamed).
// Errors name the model or the cache file.
Result<SeedResult> seed_cache(const SeedOptions& options);

// Hash names of every tensor of `model` above the threshold (reads the whole model).
Result<std::vector<std::string>> model_cache_names(const std::string& model);

// Removes every entry that belongs to none of `models`. Returns {entries, bytes} removed.
Result<CacheStats> prune_cache(const std::string& dir, const std::vector<std::string>& models);

}  // namespace tandem::worker
