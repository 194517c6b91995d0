// Each subcommand registers its flags and a callback that calls one library function.
#pragma once

#include <CLI/CLI.hpp>

namespace tandem::cli {

// Thrown by a command callback to end the program with `code` after printing nothing more.
struct Exit {
  int code;
};

void register_version(CLI::App& app);
void register_devices(CLI::App& app);
void register_inspect(CLI::App& app);
void register_synth(CLI::App& app);
void register_engine(CLI::App& app);

// Prints "tandem: error: <message>" to stderr and throws Exit{code}.
[[noreturn]] void fail(const std::string& message, int code = 1);

}  // namespace tandem::cli
