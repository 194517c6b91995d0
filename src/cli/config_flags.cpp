#include "cli/config_flags.h"

#include "common/units.h"

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

CLI::Option* ConfigFlags::size(const std::string& flag, const std::string& key, const std::string& help,
                               std::function<uint64_t&(config::Config&)> field, bool zero_off) {
  return parsed(flag, key, help,
                [field, zero_off](const std::string& t, config::Config& c) {
                  std::optional<uint64_t> v{0};
                  if (!zero_off || t != "0") TANDEM_RETURN_IF_ERROR(size_into(t, &v));
                  field(c) = *v;
                  return Status::ok();
                })
      ->type_name("SIZE");
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

Status size_into(const std::string& text, std::optional<uint64_t>* out) {
  auto b = parse_bytes(text, /*require_unit=*/true);
  if (!b.is_ok()) return b.status();
  *out = b.value();
  return Status::ok();
}

void add_model_flags(ConfigFlags& f) {
  using config::Config;
  f.value(
      "-m,--model", "[model] path", [](Config & c) -> auto& { return c.model.path; },
      "GGUF model file (the first split of a split model)");
  f.value(
       "--context", "[model] context", [](Config & c) -> auto& { return c.model.context; },
       "Context tokens per sequence (default 4096)")
      ->check(CLI::Range(1, 16777216));
  f.value(
       "--parallel", "[model] parallel", [](Config & c) -> auto& { return c.model.parallel; },
       "Sequences served at once (default 1)")
      ->check(CLI::Range(1, 256));
  f.value(
      "--kv-type", "[model] kv_type", [](Config & c) -> auto& { return c.model.kv_type; },
      "KV cache type: f16 (default), q8_0, q4_0, ...");
  f.parsed("--layers", "[model] layers",
           "A split by hand, one share per node, head first: counts (1,2,1) or the ranges `tandem plan` prints "
           "(-,0-1,2-3); "
           "the planner sizes it and refuses one that does not fit",
           [](const std::string& t, Config& c) {
             auto l = config::parse_layers(t);
             if (!l.is_ok()) return l.status();
             c.model.layers = l.value();
             return Status::ok();
           })
      ->type_name("SHARES");
  f.value(
       "--parallelism", "[model] parallelism", [](Config & c) -> auto& { return c.model.parallelism; },
       "How the nodes share the model: layer (each runs its layers in turn; default) or ffn-tensor (every node "
       "runs every layer with the FFNs split across them; docs/parallelism.md)")
      ->check(CLI::IsMember({"layer", "ffn-tensor"}));
  f.value(
       "--speculative", "[model] speculative", [](Config & c) -> auto& { return c.model.speculative; },
       "Speculative decoding: off (default), ngram (drafts from the request's own tokens) or draft (drafts from "
       "--draft-model, run on the head; docs/serve.md)")
      ->check(CLI::IsMember({"off", "ngram", "draft"}));
  f.value(
      "--draft-model", "[model] draft_model", [](Config & c) -> auto& { return c.model.draft_model; },
      "The draft's GGUF for --speculative draft: a small model of the same vocabulary, or an EAGLE3 draft for "
      "this model");
  f.value(
       "--draft-max", "[model] draft_max", [](Config & c) -> auto& { return c.model.draft_max; },
       "Tokens drafted per step at most (default 8)")
      ->check(CLI::Range(1, 32));
  f.value(
       "--spec-synth-len", "[model] spec_synth_len", [](Config & c) -> auto& { return c.model.spec_synth_len; },
       "Benchmarks only: keep drafted tokens at random so that a step yields L tokens on average, in [1, "
       "draft_max + 1] (llama.cpp's synthetic acceptance; the text is then not the model's); 0 = off")
      ->check(CLI::Range(0.0, 33.0));
}

void add_plan_flags(ConfigFlags& f) {
  using config::Config;
  f.value(
       "--margin", "[plan] margin", [](Config & c) -> auto& { return c.plan.margin; },
       "Fraction of each device's free memory held back (default 0.05)")
      ->check(CLI::Range(0.0, 0.99));
  f.size("--margin-bytes", "[plan] margin_bytes", "Bytes held back on each device on top (default 1GiB)",
         [](Config& c) -> uint64_t& { return c.plan.margin_bytes; });
  f.size(
      "--os-reserve", "[plan] os_reserve",
      "Unified-memory boxes: the OS's working set held back beyond the free figure (default 1GiB)",
      [](Config& c) -> uint64_t& { return c.plan.os_reserve; }, /*zero_off=*/true);
  f.size(
      "--load-reserve", "[plan] load_reserve", "Unified-memory boxes: a load's transients held back (default 1GiB)",
      [](Config& c) -> uint64_t& { return c.plan.load_reserve; }, /*zero_off=*/true);
  f.value(
       "--hop-ms", "[plan] hop_ms", [](Config & c) -> auto& { return c.plan.hop_ms; },
       "Link cost per cable crossing per token, ms (default 0.5)")
      ->check(CLI::Range(0.0, 1e6));
  f.value(
       "--exchange-ms", "[plan] exchange_ms", [](Config & c) -> auto& { return c.plan.exchange_ms; },
       "ffn-tensor: cost of one reduction of a layer's partial sums across the nodes, ms (default 0.2; `tandem link "
       "exchange` measures a link's)")
      ->check(CLI::Range(0.0, 1e6));
}

}  // namespace tandem::cli
