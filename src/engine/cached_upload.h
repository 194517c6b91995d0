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
//
// Without mmap (an integrated GPU on the head, or `--no-mmap`) libllama reads each weight bound
// for a worker into a buffer of its own before that tensor set. While the uploads run, tandem-engine
// also hooks libc's `fread` (datapath/file_reads.h): a read of exactly a weight whose hash a worker
// listed is skipped, and the tensor set of that buffer sends the marker. The head then reads a
// worker's cached weights not at all (with their hashes remembered, hash_memo.h: 12 KiB of each),
// where it would read the worker's whole share from disk at every start. A skipped read whose
// buffer does not go out as a marker is read after all, from the same file, before anything uses it.
// So that the kernel's read-ahead does not read what is skipped, the hook also makes libllama's
// other reads of weights itself, exactly, with a read-ahead of its own that stops where a weight it
// may skip begins.
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
  // libllama reads the file rather than mapping it: weights hashed here leave the page cache once
  // hashed, and those remembered are read no further than their fingerprints (a hint for the page
  // cache only; reads are skipped whenever libllama makes them).
  bool file_read = false;
};

struct CachedUploadStats {
  uint64_t markers = 0, marker_bytes = 0;  // weights sent as markers
  uint64_t fallbacks = 0;                  // candidates that took ggml's path (not cached, or data differed)
  uint64_t remembered = 0;                 // hashes taken from the memo instead of computed
  double hash_s = 0;                       // wall time the hashing pool ran
  // Without mmap: libllama's reads of weights sent as markers that were skipped, and their bytes;
  // skipped reads that were read after all (the buffer did not go out as a marker).
  uint64_t reads_skipped = 0, bytes_not_read = 0;
  uint64_t reads_completed = 0;
};

// Starts hashing and activates the interposer until `finish_cached_uploads`. One load at a time.
Status start_cached_uploads(const CachedUploadPlan& plan);
// After libllama's load returned a model: reads what a skipped read still owes (a weight read into
// memory that did not go out as a marker; none in libllama's own order of reads and tensor sets).
void complete_skipped_reads();
// Deactivates the interposers, stops the pool, remembers the hashes it computed, and says what
// happened. A skipped read still owed then is dropped (the load failed).
CachedUploadStats finish_cached_uploads();
// What the last finished load said (tests and diagnostics).
CachedUploadStats last_cached_upload_stats();

}  // namespace tandem::engine
