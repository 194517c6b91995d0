#include <cstdio>
#include <nlohmann/json.hpp>

#include "cli/commands.h"
#include "cluster/devices.h"

namespace tandem::cli {

namespace {

void register_devices(CLI::App& app) {
  auto* cmd = app.add_subcommand("devices", "List this machine's compute devices with free and total memory");
  static bool json = false;
  cmd->add_flag("--json", json, "Print JSON instead of a table");
  cmd->callback([] {
    const auto devices = cluster::local_devices();
    if (json) {
      nlohmann::json out = nlohmann::json::array();
      for (const auto& d : devices) {
        out.push_back({{"name", d.name},
                       {"description", d.description},
                       {"type", d.type},
                       {"free_bytes", d.free_bytes},
                       {"total_bytes", d.total_bytes},
                       {"shares_host_memory", d.shares_host_memory}});
      }
      std::printf("%s\n", out.dump(2).c_str());
      return;
    }
    // The system memory once, however many devices use it (an integrated GPU shares the CPU's).
    std::fputs(cluster::format_devices(devices).c_str(), stdout);
  });
}

}  // namespace

TANDEM_COMMAND(20, register_devices);

}  // namespace tandem::cli
