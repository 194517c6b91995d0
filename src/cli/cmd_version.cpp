#include <cstdio>

#include "cli/commands.h"
#include "worker/build_info.h"

namespace tandem::cli {

namespace {

void register_version(CLI::App& app) {
  auto* cmd = app.add_subcommand(
      "version", "Print tandem's version, the llama.cpp it is built on, and the ggml backends compiled in");
  cmd->callback([] {
    const worker::BuildInfo b = worker::build_info();
    std::printf("tandem    %s\n", b.tandem_version.c_str());
    std::printf("llama.cpp %s (commit %s)\n", b.llama_tag.c_str(), b.llama_commit.c_str());
    std::string backends;
    for (const auto& name : b.backends) backends += (backends.empty() ? "" : ", ") + name;
    std::printf("backends  %s\n", backends.c_str());
    std::printf("cpu       %s\n", b.cpu_features.c_str());
  });
}

}  // namespace

TANDEM_COMMAND(10, register_version);

}  // namespace tandem::cli
