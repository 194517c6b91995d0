// Command-line flags bound to keys of tandem.toml: each flag names its key in --help, and its
// value replaces the file's only when the flag is given. One table per command, so that a flag
// and its key can never drift apart.
#pragma once

#include <CLI/CLI.hpp>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include "common/status.h"
#include "config/config.h"

namespace tandem::cli {

class ConfigFlags {
 public:
  explicit ConfigFlags(CLI::App* cmd) : cmd_(cmd) {}

  // A flag whose value replaces `field(config)`. `key` ("[model] context") ends the help text.
  template <typename Field>
  CLI::Option* value(const std::string& flag, const std::string& key, Field field, const std::string& help) {
    using T = std::remove_reference_t<decltype(field(std::declval<config::Config&>()))>;
    auto storage = std::make_shared<T>();
    CLI::Option* opt = cmd_->add_option(flag, *storage, help + " (" + key + ")");
    appliers_.push_back([opt, storage, field](config::Config& c) -> Status {
      if (opt->count() > 0) field(c) = *storage;
      return Status::ok();
    });
    return opt;
  }

  // A switch that sets the boolean `field(config)` to `to` when given.
  template <typename Field>
  CLI::Option* toggle(const std::string& flag, const std::string& key, Field field, bool to, const std::string& help) {
    const std::string text = help + " (" + key + " = " + (to ? "true" : "false") + ")";
    CLI::Option* opt = cmd_->add_flag(flag, text);
    appliers_.push_back([opt, field, to](config::Config& c) -> Status {
      if (opt->count() > 0) field(c) = to;
      return Status::ok();
    });
    return opt;
  }

  // A flag whose text `parse` turns into the key's value; its error becomes a usage error.
  CLI::Option* parsed(const std::string& flag, const std::string& key, const std::string& help,
                      std::function<Status(const std::string& text, config::Config& c)> parse);

  // A size with a unit ("64GiB") into the byte count `field(config)`; with `zero_off`, a bare "0"
  // is accepted too (the key's way of turning something off).
  CLI::Option* size(const std::string& flag, const std::string& key, const std::string& help,
                    std::function<uint64_t&(config::Config&)> field, bool zero_off = false);

  // The file at `path` ("" = none: the defaults), with the flags given applied over it. Errors
  // name the file or the flag.
  Result<config::Config> resolve(const std::string& path) const;

 private:
  CLI::App* const cmd_;
  std::vector<std::function<Status(config::Config&)>> appliers_;
};

// The flags every command that plans takes alike: the model and its shape ([model] path, context,
// parallel, kv_type, layers) and the planner's margins and reserves ([plan]).
void add_model_flags(ConfigFlags& f);
void add_plan_flags(ConfigFlags& f);

// `text` as a size with a unit ("110GiB"); a bare number is refused rather than read as bytes.
Status size_into(const std::string& text, std::optional<uint64_t>* out);

}  // namespace tandem::cli
