#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <vector>

#include "cli/commands.h"
#include "common/paths.h"

namespace tandem::cli {
namespace {

// `tandem engine ...` runs the tandem-engine program installed beside tandem, with the same
// arguments, replacing this process.
void register_engine_exec(CLI::App& app) {
  auto* cmd =
      app.add_subcommand("engine", "Run the inference engine (tandem-engine); `tandem engine --help` for its flags");
  cmd->prefix_command();
  cmd->set_help_flag();
  cmd->callback([cmd] {
    const std::string exe = sibling_program("tandem-engine");
    std::vector<std::string> args = {exe, "engine"};
    for (const std::string& a : cmd->remaining()) args.push_back(a);
    std::vector<char*> argv;
    for (auto& a : args) argv.push_back(a.data());
    argv.push_back(nullptr);
    ::execv(exe.c_str(), argv.data());
    fail("cannot run " + exe + ": " + std::strerror(errno) + " (is tandem-engine installed beside tandem?)");
  });
}

}  // namespace

TANDEM_COMMAND(50, register_engine_exec);

}  // namespace tandem::cli
