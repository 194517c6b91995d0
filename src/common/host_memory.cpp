#include "common/host_memory.h"

#include <cstdio>

namespace tandem {

uint64_t available_host_memory() {
  std::FILE* f = std::fopen("/proc/meminfo", "r");
  if (f == nullptr) return UINT64_MAX;
  char line[256];
  unsigned long long kib = 0;
  bool found = false;
  while (!found && std::fgets(line, sizeof line, f) != nullptr)
    found = std::sscanf(line, "MemAvailable: %llu kB", &kib) == 1;
  std::fclose(f);
  return found ? static_cast<uint64_t>(kib) * 1024 : UINT64_MAX;
}

}  // namespace tandem
