// Each subcommand lives in its own cmd_*.cpp, registers its flags and a callback that calls one
// library function, and adds itself to the binary with TANDEM_COMMAND.
#pragma once

#include <CLI/CLI.hpp>
#include <string>

namespace tandem::cli {

// Thrown by a command callback to end the program with `code` after printing nothing more.
struct Exit {
  int code;
};

// Prints "tandem: error: <message>" to stderr and throws Exit{code}.
[[noreturn]] void fail(const std::string& message, int code = 1);

using Registrar = void (*)(CLI::App&);

// Adds a subcommand to `tandem`; `order` sets its place in --help.
struct CommandRegistration {
  CommandRegistration(int order, Registrar registrar);
};

// Adds `--log-format text|json` to a long-running command (docs/cli.md): it sets the process-wide
// log format (common/log.h) before the command's callback runs.
void add_log_format_option(CLI::App* cmd);

// Registers every subcommand in order (called once by main).
void register_all(CLI::App& app);

}  // namespace tandem::cli

#define TANDEM_COMMAND(order, fn) static const ::tandem::cli::CommandRegistration tandem_command_##fn(order, fn)
