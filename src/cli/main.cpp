// tandem: serve one large language model across the machines you own.
#include <algorithm>
#include <cstdio>
#include <vector>

#include "cli/commands.h"
#include "common/log.h"

namespace tandem::cli {
namespace {

std::vector<std::pair<int, Registrar>>& registry() {
  static std::vector<std::pair<int, Registrar>> r;
  return r;
}

}  // namespace

CommandRegistration::CommandRegistration(int order, Registrar registrar) { registry().emplace_back(order, registrar); }

void register_all(CLI::App& app) {
  auto& r = registry();
  std::stable_sort(r.begin(), r.end(), [](const auto& a, const auto& b) { return a.first < b.first; });
  for (const auto& [order, registrar] : r) registrar(app);
}

void add_log_format_option(CLI::App* cmd) {
  cmd->add_option_function<std::string>(
         "--log-format",
         [](const std::string& name) {
           auto f = log::parse_format(name);
           if (!f.is_ok()) throw CLI::ValidationError("--log-format", f.status().message());
           log::set_format(f.value());
         },
         "Log lines as readable text (default) or one JSON object per line")
      ->check(CLI::IsMember({"text", "json"}));
}

void fail(const std::string& message, int code) {
  std::fprintf(stderr, "tandem: error: %s\n", message.c_str());
  throw Exit{code};
}

}  // namespace tandem::cli

int main(int argc, char** argv) {
  CLI::App app{
      "tandem: serve one large language model across the machines you own.\n"
      "Docs: docs/cli.md. Every subcommand has --help."};
  app.require_subcommand(1);
  tandem::cli::register_all(app);
  try {
    app.parse(argc, argv);
  } catch (const CLI::CallForHelp& e) {
    return app.exit(e);
  } catch (const CLI::CallForAllHelp& e) {
    return app.exit(e);
  } catch (const CLI::ParseError& e) {
    app.exit(e);
    return 2;  // usage errors: 2, like most Unix tools
  } catch (const tandem::cli::Exit& e) {
    return e.code;
  }
  return 0;
}
