// This machine's memory as the kernel accounts it, for what grows after a model has loaded (the
// prompt cache's states on the head and the workers).
#pragma once

#include <cstdint>

namespace tandem {

// MemAvailable of /proc/meminfo in bytes: what can be allocated without swapping. UINT64_MAX when
// unknown (no /proc), so that a caller never refuses work for want of a reading.
uint64_t available_host_memory();

// What a cache that grows on its own leaves to the rest of the system: it stops before available
// memory would fall below this.
inline constexpr uint64_t kHostMemoryReserve = uint64_t{1} << 30;

}  // namespace tandem
