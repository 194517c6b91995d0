// Step inputs sent to a tandem worker as runs of equal 32-bit words instead of their bytes.
//
// A prompt chunk's masks are mostly long runs of one value: each row of the attention mask is 0
// up to the token's position and -inf after it, and MiniMax-M3's position mask the same. They grow
// with the positions in the cache (512 × positions × 2 or 4 bytes per 512-token chunk: 12 MB a
// chunk at 4096 positions, 100 MB at 32k), and on a real link that is the prompt's largest cost
// after the hidden state. The head (engine/rpc_writes.h) sends such an input to a tandem worker of
// this build as this encoding, as the data of an ordinary SET_TENSOR to the same place; the
// worker's RPC child (worker/input_writes.h) expands it there. Never sent to a stock RPC server.
//
// Format: "tandem-runs-v1\n\0" (16 bytes), the expanded size as a little-endian u64, the number of
// runs as a u32, 4 bytes of zeros, then per run its length in words (u32, at least 1) and the word
// (4 bytes as they were). The runs cover exactly the expanded size, a multiple of 4.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <vector>

namespace tandem {

constexpr size_t kWordRunsHeader = 32;
// Inputs smaller than this go as they are: little to gain, and a scan on the step's path.
constexpr size_t kWordRunsMinBytes = 64 * 1024;

// `n` bytes at `data` as runs, when that takes at most `n / 8` bytes; nullopt otherwise (a size
// that is not a multiple of 4, too small, or not repetitive enough: the scan stops as soon as the
// runs pass that limit, so incompressible data costs a fraction of a pass).
std::optional<std::vector<uint8_t>> encode_word_runs(const void* data, size_t n);

// The expanded size of the encoding in `data` (`n` bytes), or nullopt when `data` is not one: no
// magic, a header that does not match the runs that follow. Checks the whole encoding, so that a
// successful `decode_word_runs` of it into that many bytes cannot fail.
std::optional<uint64_t> word_runs_size(const void* data, size_t n);

// Expands the encoding into `out`, which holds word_runs_size(data, n) bytes; false when it is not
// a valid encoding of that size.
bool decode_word_runs(const void* data, size_t n, void* out, size_t out_n);

}  // namespace tandem
