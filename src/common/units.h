// Human-readable quantities: formatting byte counts and rates, parsing sizes given by users.
#pragma once

#include <cstdint>
#include <string>

#include "common/status.h"

namespace tandem {

// "512 B", "1.5 KiB", "3.25 GiB": binary units, three significant digits.
std::string format_bytes(uint64_t bytes);

// "428.3 B" style count with a decimal suffix (K, M, B, T): for parameter counts.
std::string format_count(double count);

// Parses "128GiB", "96 GB", "512MiB", "1.5T", "4096" (bytes). Decimal suffixes (KB, MB, GB, TB)
// are powers of 1000, binary ones (KiB, MiB, GiB, TiB) and bare K/M/G/T are powers of 1024.
// With `require_unit`, a bare number is an error: "128" for a memory almost always means 128GiB,
// not 128 bytes.
Result<uint64_t> parse_bytes(const std::string& text, bool require_unit = false);

}  // namespace tandem
