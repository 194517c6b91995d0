#include <cstdio>

#include "cli/commands.h"
#include "common/units.h"
#include "config/config.h"
#include "ops/doctor.h"

namespace tandem::cli {
namespace {

void register_doctor(CLI::App& app) {
  auto* cmd = app.add_subcommand(
      "doctor",
      "Check the cluster of tandem.toml from the head: workers, secret, versions, memory, link, cache, exposure");
  static std::string config_path, probe_bytes = "64MiB";
  static ops::DoctorOptions o;
  static std::vector<uint16_t> rpc_ports;
  static int timeout_ms = 5000;
  cmd->add_option("-c,--config", config_path, "tandem.toml (docs/config.md)")->required();
  cmd->add_option("--pings", o.pings, "Round trips measured per worker")
      ->capture_default_str()
      ->check(CLI::Range(1, 100000));
  cmd->add_option("--probe-bytes", probe_bytes, "Bytes sent each way to measure throughput (0: skip)")
      ->capture_default_str();
  cmd->add_option("--rpc-port", rpc_ports,
                  "Ports tried on each worker's address for an exposed ggml RPC server (default 50052; repeat)");
  cmd->add_option("--timeout-ms", timeout_ms, "Deadline of each connect and handshake step")
      ->capture_default_str()
      ->check(CLI::Range(100, 600000));
  cmd->callback([] {
    auto c = config::load_config(config_path);
    if (!c.is_ok()) fail(c.status().message(), 2);
    auto bytes = parse_bytes(probe_bytes);
    if (!bytes.is_ok()) fail("--probe-bytes: " + bytes.status().message(), 2);
    o.config = c.value();
    o.probe_bytes = bytes.value();
    if (!rpc_ports.empty()) o.rpc_ports = rpc_ports;
    o.timeout = std::chrono::milliseconds(timeout_ms);
    const auto checks = ops::run_doctor(o, [](const ops::Check& check) {
      std::printf("%s\n", ops::format_check(check).c_str());
      std::fflush(stdout);
    });
    size_t failed = 0, warned = 0;
    for (const auto& check : checks) {
      failed += check.verdict == ops::Verdict::fail;
      warned += check.verdict == ops::Verdict::warn;
    }
    std::printf("%zu checks: %zu failed, %zu warning%s\n", checks.size(), failed, warned, warned == 1 ? "" : "s");
    if (failed > 0) throw Exit{1};
  });
}

}  // namespace

TANDEM_COMMAND(86, register_doctor);

}  // namespace tandem::cli
