// Remembered hashes of a model file's weights. A load that sends a worker markers for its cached
// weights (cached_upload.h) must know each weight's hash, and hashing the worker's share on the
// head is a seeded load's longest step (3.4 s of 6 s for the 16 GB share of the H200 benchmark;
// ~95 GB to read for MiniMax-M3's). The hashes of a file are kept in a small text file named after
// the file's identity (device, inode, size, modification time), so that a changed model file gets
// a new one; each entry also holds a fingerprint of a few KiB of the weight, checked before the
// hash is used.
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <string>
#include <utility>

#include "common/status.h"

namespace tandem::engine {

struct MemoEntry {
  uint64_t hash = 0;         // the weight's FNV-1a (common/cached_tensor.h)
  uint64_t fingerprint = 0;  // weight_fingerprint of the same bytes
};
// (offset in the file, bytes) -> entry
using HashMemo = std::map<std::pair<uint64_t, uint64_t>, MemoEntry>;

// $XDG_CACHE_HOME/tandem/weight-hashes, else $HOME/.cache/tandem/weight-hashes; "" without either.
std::string default_hash_memo_dir();

// The memo file in `dir` for `path` as the file is now. Errors: `path` cannot be examined.
Result<std::string> hash_memo_path(const std::string& dir, const std::string& path);

// What `memo_file` holds; empty when it is missing. Lines that do not parse are left out.
HashMemo read_hash_memo(const std::string& memo_file);

// Memo files kept in a folder; writing one removes the least recently written beyond these.
inline constexpr size_t kKeptHashMemos = 32;

// Replaces `memo_file` (written beside it, then renamed), creating its folder, and prunes the
// folder to kKeptHashMemos files.
Status write_hash_memo(const std::string& memo_file, const HashMemo& memo);

// FNV-1a over up to 4 KiB at the start, the middle and the end of `data`.
uint64_t weight_fingerprint(const uint8_t* data, uint64_t bytes);

}  // namespace tandem::engine
