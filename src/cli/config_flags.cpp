#include "cli/config_flags.h"

namespace tandem::cli {

CLI::Option* ConfigFlags::parsed(const std::string& flag, const std::string& key, const std::string& help,
                                 std::function<Status(const std::string&, config::Config&)> parse) {
  auto storage = std::make_shared<std::string>();
  CLI::Option* opt = cmd_->add_option(flag, *storage, help + " (" + key + ")");
  const std::string name = opt->get_name();
  appliers_.push_back([opt, storage, parse, name](config::Config& c) -> Status {
    if (opt->count() == 0) return Status::ok();
    Status s = parse(*storage, c);
    return s.is_ok() ? s : Status::invalid_argument(name + ": " + s.message());
  });
  return opt;
}

Result<config::Config> ConfigFlags::resolve(const std::string& path) const {
  config::Config c;
  if (!path.empty()) {
    auto loaded = config::load_config(path);
    if (!loaded.is_ok()) return loaded.status();
    c = loaded.value();
  }
  for (const auto& apply : appliers_) TANDEM_RETURN_IF_ERROR(apply(c));
  return c;
}

}  // namespace tandem::cli
