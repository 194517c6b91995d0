#include <cstdio>

#include "cli/commands.h"
#include "link/secret.h"

namespace tandem::cli {

namespace {

void register_secret(CLI::App& app) {
  auto* cmd = app.add_subcommand("secret", "Manage the cluster secret shared by the head and its workers");
  cmd->require_subcommand(1);
  auto* create = cmd->add_subcommand("new", "Write a new random cluster secret (32 bytes, hex) with mode 0600");
  static std::string out;
  create->add_option("-o,--output", out, "File to create (refuses to overwrite)")->required();
  create->callback([] {
    if (Status s = link::write_new_secret(out); !s.is_ok()) fail(s.message());
    std::printf("wrote a new cluster secret to %s (mode 0600); copy it to every node of the cluster\n", out.c_str());
  });
}

}  // namespace

TANDEM_COMMAND(60, register_secret);

}  // namespace tandem::cli
