// Fuzz target: what a worker's RPC child reads from a step's SET_TENSOR data before acting on it:
// an input-reuse marker (datapath/input_reuse.h) and an input sent as runs (link/protocol.h).
// Whatever the bytes, parsing must not crash, a size it accepts must decode into exactly that many
// bytes, and encoding what it decoded must give it back.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <vector>

#include "datapath/input_reuse.h"
#include "link/protocol.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  (void)tandem::link::parse_reuse_marker(data, size);
  const auto expanded = tandem::link::word_runs_size(data, size);
  if (!expanded || *expanded > (64u << 20)) return 0;  // a real input is at most the slots' size
  std::vector<uint8_t> out(*expanded);
  if (!tandem::link::decode_word_runs(data, size, out.data(), out.size())) std::abort();  // accepted, then refused
  if (auto again = tandem::link::encode_word_runs(out.data(), out.size())) {
    std::vector<uint8_t> back(out.size());
    if (!tandem::link::decode_word_runs(again->data(), again->size(), back.data(), back.size()) || back != out)
      std::abort();
  }
  return 0;
}
