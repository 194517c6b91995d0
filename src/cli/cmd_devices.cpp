#include <cstdio>
#include <nlohmann/json.hpp>

#include "cli/commands.h"
#include "cluster/devices.h"
#include "common/units.h"

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
                       {"total_bytes", d.total_bytes}});
      }
      std::printf("%s\n", out.dump(2).c_str());
      return;
    }
    std::printf("%-8s %-6s %12s %12s  %s\n", "DEVICE", "TYPE", "FREE", "TOTAL", "DESCRIPTION");
    for (const auto& d : devices) {
      std::printf("%-8s %-6s %12s %12s  %s\n", d.name.c_str(), d.type.c_str(), format_bytes(d.free_bytes).c_str(),
                  format_bytes(d.total_bytes).c_str(), d.description.c_str());
    }
  });
}

}  // namespace

TANDEM_COMMAND(20, register_devices);

}  // namespace tandem::cli
