// The compute devices of this machine, as ggml sees them.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace tandem::cluster {

struct DeviceInfo {
  std::string name;         // ggml's device name, e.g. "CUDA0", "CPU"
  std::string description;  // e.g. "NVIDIA H200", the CPU model
  std::string type;         // "cpu", "gpu", "igpu", "accel"
  uint64_t free_bytes = 0;
  uint64_t total_bytes = 0;
};

// Every device of every backend compiled in, RPC clients excluded.
std::vector<DeviceInfo> local_devices();

}  // namespace tandem::cluster
