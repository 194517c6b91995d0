// What a worker's weight cache is keyed by.
//
// ggml's RPC client names a weight by the 64-bit FNV-1a hash of its bytes and, for tensors above
// 10 MiB, asks the server for `<cache>/<hash>` before sending data (RPC_CMD_SET_TENSOR_HASH). It
// hashes on the head, in one thread, while the load waits: ~1 GB/s, the largest part of a seeded
// load. tandem's engine instead hashes the worker's share of the model file ahead of time in
// parallel and, for each weight the worker lists in its cache, sends a plain SET_TENSOR whose data
// is a 32-byte marker (link/protocol.h), which needs no answer, so the head never waits. The worker's splice
// (worker/rpc_splice.h) checks that its cache holds the weight; its RPC child, handed the marker
// as the weight's data, loads the weight from the cache (worker/cache_loader.h). The marker means
// nothing to a stock RPC server: only a tandem worker may receive one.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <unordered_map>

#include "common/status.h"

namespace tandem {

// ggml's threshold: tensors strictly larger than this are looked up by hash.
// pinned llama.cpp: value ggml/src/ggml-rpc/ggml-rpc.cpp HASH_THRESHOLD
constexpr uint64_t kHashThreshold = 10ull * 1024 * 1024;
// tandem's: weights strictly larger than this are seeded (`tandem worker seed`) and loaded by
// marker when the worker lists them. Lower than ggml's because MiniMax-M3's shared-expert
// matrices (6144 x 3072 in IQ4_XS: 9.6 MiB) and attention K/V fall under 10 MiB: 1.1 GB of the
// m3-proxy's half would travel whole at every load otherwise. Below 1 MiB a marker's round trip
// through the cache costs more than sending the bytes.
constexpr uint64_t kSeedThreshold = 1ull * 1024 * 1024;

// FNV-1a, 64 bit, as ggml's RPC computes it. `seed` chains calls over consecutive chunks.
// pinned llama.cpp: text ggml/src/ggml-rpc/ggml-rpc.cpp static uint64_t fnv_hash(const uint8_t * data, size_t len, uint64_t hash = 0xcbf29ce484222325ULL) {
// pinned llama.cpp: text ggml/src/ggml-rpc/ggml-rpc.cpp const uint64_t fnv_prime = 0x100000001b3ULL; for (size_t i = 0; i < len; ++i) { hash ^= data[i]; hash *= fnv_prime;
uint64_t fnv1a(const void* data, size_t n, uint64_t seed = 0xcbf29ce484222325ULL);
std::string hash_name(uint64_t hash);                              // 16 lowercase hex digits, the cache file's name
std::optional<uint64_t> parse_hash_name(const std::string& name);  // inverse; nullopt if not one

// A worker's cache as it lists it: hash -> bytes.
using CacheListing = std::unordered_map<uint64_t, uint64_t>;
// A listing file, as `tandem serve` passes it to the engine: one "HASHNAME BYTES" line per entry.
Result<CacheListing> read_cache_listing(const std::string& path);
Status write_cache_listing(const std::string& path, const CacheListing& listing);

}  // namespace tandem
