// The compute devices of this machine, as ggml sees them, with host memory counted once.
//
// ggml's CPU device reports the machine's whole memory as free, and an integrated GPU (NVIDIA
// GB10, whose GPU shares the system's LPDDR5X with the CPU) reports MemAvailable as its free
// memory: listed side by side they show one pool twice, and the CPU's figure is not free at all.
// normalise_devices() gives every device that uses system memory the kernel's MemAvailable-style
// figure and marks it as sharing host memory, so that reports show the pool once and the planner
// knows which boxes are unified-memory ones. An integrated GPU whose driver could not be asked
// (ggml's 0/0 when cudaMemGetInfo fails) keeps its 0: the planner refuses it by name rather than
// guessing.
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
  // Its memory is the machine's system memory: the CPU, and an integrated GPU (ggml's type IGPU).
  bool shares_host_memory = false;
};

// The machine's memory as /proc/meminfo accounts it.
struct HostMemory {
  bool known = false;      // /proc/meminfo was read and had both lines
  uint64_t total = 0;      // MemTotal
  uint64_t available = 0;  // MemAvailable: what can be allocated without swapping, page cache included
};

// Parses /proc/meminfo's text (MemTotal and MemAvailable, in kB).
HostMemory parse_meminfo(const std::string& text);
// This machine's /proc/meminfo; known = false without one.
HostMemory read_host_memory();

// Marks the devices that use system memory (type "cpu" or "igpu") and gives them `host`'s figures:
// the CPU free = MemAvailable and total = MemTotal; an integrated GPU free = the smaller of what it
// reported and MemAvailable. A device that reported 0 bytes free keeps 0. Without `host.known`,
// only the marks change.
std::vector<DeviceInfo> normalise_devices(std::vector<DeviceInfo> raw, const HostMemory& host);

// Every device of every backend compiled in, RPC clients excluded, normalised against this
// machine's /proc/meminfo.
std::vector<DeviceInfo> local_devices();

// `tandem devices`' table: one row per device; a device that shares host memory with a device
// listed above it shows "shared" instead of the same pool again, and a device that reported no
// memory says so.
std::string format_devices(const std::vector<DeviceInfo>& devices);

// One process holding memory on this machine (for messages that say what holds it).
struct MemoryHolder {
  int pid = 0;
  std::string name;    // its command name (/proc/PID/comm)
  uint64_t bytes = 0;  // resident memory (VmRSS)
};

// The `count` processes with the most resident memory under `proc_root` ("/proc"), largest first.
std::vector<MemoryHolder> memory_holders(size_t count, const std::string& proc_root = "/proc");
// "python3 (pid 812) 60.2 GiB, tandem-engine (pid 90) 1.10 GiB"; "" for none.
std::string format_holders(const std::vector<MemoryHolder>& holders);

}  // namespace tandem::cluster
