// tandem: serve one large language model across the machines you own.
#include <cstdio>
#include <iostream>

#include "cli/commands.h"

namespace tandem::cli {

void fail(const std::string& message, int code) {
  std::fprintf(stderr, "tandem: error: %s\n", message.c_str());
  throw Exit{code};
}

}  // namespace tandem::cli

int main(int argc, char** argv) {
  CLI::App app{"tandem: serve one large language model across the machines you own.\n"
               "Design: docs/architecture.md. Every subcommand has --help."};
  app.require_subcommand(1);
  app.fallthrough(false);
  app.set_version_flag("--version", [] { return std::string("tandem (run `tandem version` for details)"); });
  tandem::cli::register_version(app);
  tandem::cli::register_devices(app);
  tandem::cli::register_inspect(app);
  tandem::cli::register_synth(app);
  tandem::cli::register_engine(app);
  try {
    app.parse(argc, argv);
  } catch (const CLI::CallForHelp& e) {
    return app.exit(e);
  } catch (const CLI::CallForAllHelp& e) {
    return app.exit(e);
  } catch (const CLI::CallForVersion& e) {
    return app.exit(e);
  } catch (const CLI::ParseError& e) {
    app.exit(e);
    return 2;  // usage errors: 2, like most Unix tools
  } catch (const tandem::cli::Exit& e) {
    return e.code;
  }
  return 0;
}
