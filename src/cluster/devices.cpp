#include "cluster/devices.h"

#include <dirent.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <sstream>

#include "common/units.h"
#include "ggml-backend.h"

namespace tandem::cluster {
namespace {

std::string read_whole(const std::string& path) {
  std::ifstream in(path);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

}  // namespace

HostMemory parse_meminfo(const std::string& text) {
  HostMemory m;
  bool total = false, available = false;
  std::istringstream in(text);
  for (std::string line; std::getline(in, line);) {
    unsigned long long kib = 0;
    if (std::sscanf(line.c_str(), "MemTotal: %llu kB", &kib) == 1) {
      m.total = static_cast<uint64_t>(kib) * 1024;
      total = true;
    } else if (std::sscanf(line.c_str(), "MemAvailable: %llu kB", &kib) == 1) {
      m.available = static_cast<uint64_t>(kib) * 1024;
      available = true;
    }
  }
  m.known = total && available;
  return m;
}

HostMemory read_host_memory() { return parse_meminfo(read_whole("/proc/meminfo")); }

std::vector<DeviceInfo> normalise_devices(std::vector<DeviceInfo> raw, const HostMemory& host) {
  for (DeviceInfo& d : raw) {
    d.shares_host_memory = d.type == "cpu" || d.type == "igpu";
    if (!d.shares_host_memory || !host.known) continue;
    if (d.type == "cpu") {
      // ggml's CPU device reports its total as free ("free system memory is ill-defined").
      d.free_bytes = host.available;
      d.total_bytes = host.total;
    } else if (d.free_bytes > 0) {
      d.free_bytes = std::min(d.free_bytes, host.available);
    }
  }
  return raw;
}

std::vector<DeviceInfo> local_devices() {
  std::vector<DeviceInfo> out;
  for (size_t i = 0; i < ggml_backend_dev_count(); ++i) {
    ggml_backend_dev_t dev = ggml_backend_dev_get(i);
    ggml_backend_reg_t reg = ggml_backend_dev_backend_reg(dev);
    if (reg != nullptr && std::strcmp(ggml_backend_reg_name(reg), "RPC") == 0) continue;
    DeviceInfo d;
    d.name = ggml_backend_dev_name(dev);
    d.description = ggml_backend_dev_description(dev);
    switch (ggml_backend_dev_type(dev)) {
      case GGML_BACKEND_DEVICE_TYPE_CPU:
        d.type = "cpu";
        break;
      case GGML_BACKEND_DEVICE_TYPE_GPU:
        d.type = "gpu";
        break;
      case GGML_BACKEND_DEVICE_TYPE_IGPU:
        d.type = "igpu";
        break;
      default:
        d.type = "accel";
        break;
    }
    size_t free = 0, total = 0;
    ggml_backend_dev_memory(dev, &free, &total);
    d.free_bytes = free;
    d.total_bytes = total;
    out.push_back(std::move(d));
  }
  return normalise_devices(std::move(out), read_host_memory());
}

std::string format_devices(const std::vector<DeviceInfo>& devices) {
  // The device that shows the system memory: the CPU when listed, else the first that shares it
  // and reported some.
  const DeviceInfo* pool = nullptr;
  for (const DeviceInfo& d : devices) {
    if (!d.shares_host_memory || d.free_bytes == 0) continue;
    if (pool == nullptr || (d.type == "cpu" && pool->type != "cpu")) pool = &d;
  }
  std::string sharers;
  for (const DeviceInfo& d : devices) {
    if (d.shares_host_memory && &d != pool && d.free_bytes > 0) sharers += (sharers.empty() ? "" : ", ") + d.name;
  }
  std::string out;
  char line[512];
  std::snprintf(line, sizeof line, "%-8s %-6s %12s %12s  %s\n", "DEVICE", "TYPE", "FREE", "TOTAL", "DESCRIPTION");
  out += line;
  for (const DeviceInfo& d : devices) {
    std::string free = format_bytes(d.free_bytes), total = format_bytes(d.total_bytes), note;
    if (&d == pool && !sharers.empty()) {
      note = " [system memory, shared with " + sharers + "]";
    } else if (d.shares_host_memory && d.free_bytes > 0 && pool != nullptr && &d != pool) {
      free = total = "shared";
      note = " [uses the system memory shown for " + pool->name + "]";
    } else if (d.free_bytes == 0) {
      note =
          " [reported no free memory: the driver could not be asked (ggml gives 0/0 when cudaMemGetInfo "
          "fails); tandem will not plan on it]";
    }
    std::snprintf(line, sizeof line, "%-8s %-6s %12s %12s  %s%s\n", d.name.c_str(), d.type.c_str(), free.c_str(),
                  total.c_str(), d.description.c_str(), note.c_str());
    out += line;
  }
  return out;
}

std::vector<MemoryHolder> memory_holders(size_t count, const std::string& proc_root) {
  std::vector<MemoryHolder> all;
  DIR* dir = ::opendir(proc_root.c_str());
  if (dir == nullptr) return all;
  while (const dirent* e = ::readdir(dir)) {
    const char* n = e->d_name;
    if (*n == '\0' || std::strspn(n, "0123456789") != std::strlen(n)) continue;
    const std::string base = proc_root + "/" + n;
    MemoryHolder h;
    h.pid = std::atoi(n);
    std::istringstream status(read_whole(base + "/status"));
    for (std::string line; std::getline(status, line);) {
      unsigned long long kib = 0;
      if (std::sscanf(line.c_str(), "VmRSS: %llu kB", &kib) == 1) h.bytes = static_cast<uint64_t>(kib) * 1024;
    }
    if (h.bytes == 0) continue;  // kernel threads, or gone meanwhile
    h.name = read_whole(base + "/comm");
    while (!h.name.empty() && (h.name.back() == '\n' || h.name.back() == ' ')) h.name.pop_back();
    if (h.name.empty()) h.name = "?";
    all.push_back(std::move(h));
  }
  ::closedir(dir);
  std::sort(all.begin(), all.end(), [](const MemoryHolder& a, const MemoryHolder& b) {
    return a.bytes != b.bytes ? a.bytes > b.bytes : a.pid < b.pid;
  });
  if (all.size() > count) all.resize(count);
  return all;
}

std::string format_holders(const std::vector<MemoryHolder>& holders) {
  std::string out;
  for (const MemoryHolder& h : holders) {
    out += (out.empty() ? "" : ", ") + h.name + " (pid " + std::to_string(h.pid) + ") " + format_bytes(h.bytes);
  }
  return out;
}

}  // namespace tandem::cluster
