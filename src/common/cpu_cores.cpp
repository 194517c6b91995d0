#include "common/cpu_cores.h"

#include <sched.h>

#include <algorithm>
#include <fstream>
#include <set>
#include <string>
#include <thread>
#include <utility>

namespace tandem {
namespace {

bool read_int(const std::string& path, int* out) {
  std::ifstream in(path);
  return static_cast<bool>(in >> *out);
}

}  // namespace

int physical_cores() {
  cpu_set_t mask;
  CPU_ZERO(&mask);
  if (::sched_getaffinity(0, sizeof mask, &mask) != 0)
    return static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  std::set<std::pair<int, int>> cores;
  int cpus = 0;
  for (int c = 0; c < CPU_SETSIZE; ++c) {
    if (!CPU_ISSET(c, &mask)) continue;
    ++cpus;
    const std::string topo = "/sys/devices/system/cpu/cpu" + std::to_string(c) + "/topology/";
    int package = 0, core = 0;
    if (!read_int(topo + "physical_package_id", &package) || !read_int(topo + "core_id", &core))
      return std::max(cpus, 1);
    cores.emplace(package, core);
  }
  // A mask that names CPUs without topology (some containers) counts CPUs.
  return cores.empty() ? std::max(cpus, 1) : static_cast<int>(cores.size());
}

}  // namespace tandem
