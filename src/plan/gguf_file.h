// A thin owner of a gguf_context that turns ggml's logged errors into Status messages.
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "common/status.h"

struct gguf_context;

namespace tandem::plan {

struct GgufDeleter {
  void operator()(gguf_context* ctx) const;
};
using GgufPtr = std::unique_ptr<gguf_context, GgufDeleter>;

// Opens the header and tensor table of `path` (no tensor data). The error says what ggml's
// reader found wrong, prefixed with the path.
Result<GgufPtr> open_gguf_header(const std::string& path);

// Typed getters that never abort: a missing key gives `fallback`, a key of another numeric
// type is converted, a non-numeric one is an error naming the key.
Result<uint64_t> gguf_get_uint(const gguf_context* ctx, const std::string& key, uint64_t fallback);
Result<double> gguf_get_float(const gguf_context* ctx, const std::string& key, double fallback);
std::string gguf_get_string(const gguf_context* ctx, const std::string& key);  // "" if absent or not a string
bool gguf_get_flag(const gguf_context* ctx, const std::string& key);           // false if absent or not bool

}  // namespace tandem::plan
