#include <cstdio>
#include <filesystem>

#include "cli/commands.h"
#include "config/config.h"
#include "ops/systemd_units.h"

namespace tandem::cli {
namespace {

void register_systemd(CLI::App& app) {
  auto* cmd =
      app.add_subcommand("systemd", "Print the systemd unit of the head or of a worker, generated from tandem.toml");
  static std::string role, config_path;
  static ops::UnitOptions o;
  cmd->add_option("--role", role, "head (tandem serve) or worker (tandem worker)")
      ->required()
      ->check(CLI::IsMember({"head", "worker"}));
  cmd->add_option("-c,--config", config_path, "tandem.toml, as the unit will find it on that machine")->required();
  cmd->add_option("--name", o.worker_name, "--role worker: which [[worker]] (default: the only one)");
  cmd->add_option("--binary", o.binary, "Where tandem is installed")->capture_default_str();
  cmd->add_option("--user", o.user, "The dedicated user (and group) the service runs as")->capture_default_str();
  cmd->add_option("--watchdog", o.watchdog_s, "WatchdogSec: seconds without a ping before systemd restarts it")
      ->capture_default_str()
      ->check(CLI::Range(2, 3600));
  cmd->callback([] {
    auto c = config::load_config(config_path);
    if (!c.is_ok()) fail(c.status().message(), 2);
    o.role = role == "head" ? ops::UnitRole::head : ops::UnitRole::worker;
    o.config_path = std::filesystem::absolute(config_path).lexically_normal().string();
    auto unit = ops::make_unit(c.value(), o);
    if (!unit.is_ok()) fail(unit.status().message(), 2);
    std::fputs(unit->c_str(), stdout);
  });
}

}  // namespace

TANDEM_COMMAND(85, register_systemd);

}  // namespace tandem::cli
