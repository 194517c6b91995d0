#include <cstdio>

#include "cli/commands.h"
#include "plan/model_info.h"

namespace tandem::cli {

namespace {

void register_inspect(CLI::App& app) {
  auto* cmd =
      app.add_subcommand("inspect", "Describe a GGUF model from its header: shape, parameters, bytes read per token");
  static std::string path;
  static bool json = false;
  cmd->add_option("MODEL", path, "GGUF file (the first split of a split model)")->required();
  cmd->add_flag("--json", json, "Print JSON (arch, n_layer, n_params, bytes, active_bytes_per_token, ...)");
  cmd->callback([] {
    auto info = plan::read_model_info(path);
    if (!info.is_ok()) fail(info.status().message());
    if (json) {
      std::printf("%s\n", plan::model_info_to_json(info.value()).c_str());
    } else {
      std::fputs(plan::format_model_info(info.value()).c_str(), stdout);
    }
  });
}

}  // namespace

TANDEM_COMMAND(30, register_inspect);

}  // namespace tandem::cli
