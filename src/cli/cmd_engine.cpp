#include <cstdio>
#include <nlohmann/json.hpp>

#include "cli/commands.h"
#include "engine/generate.h"
#include "engine/llama_log.h"

namespace tandem::cli {

namespace {

std::vector<std::string> split_list(const std::string& text) {
  std::vector<std::string> out;
  std::string item;
  for (char c : text + ",") {
    if (c == ',') {
      if (!item.empty()) out.push_back(item);
      item.clear();
    } else if (c != ' ') {
      item += c;
    }
  }
  return out;
}

void register_engine(CLI::App& app) {
  auto* cmd = app.add_subcommand("engine", "Run the inference engine; with --prompt, generate once and print the text and speed");
  static engine::GenerateOptions o;
  static bool json = false;
  static int verbose = 0;
  cmd->add_option("-m,--model", o.model, "GGUF model file")->required();
  cmd->add_option("-p,--prompt", o.prompt, "Prompt to complete")->required();
  cmd->add_option("-n,--n-predict", o.n_predict, "Tokens to generate at most")->capture_default_str()->check(CLI::Range(1, 1 << 20));
  cmd->add_option("-c,--context", o.n_ctx, "Context size in tokens")->capture_default_str()->check(CLI::Range(8, 1 << 24));
  cmd->add_option("-t,--threads", o.threads, "CPU threads (0: all cores)")->capture_default_str()->check(CLI::NonNegativeNumber);
  cmd->add_option("--temperature", o.temperature, "Sample at this temperature instead of greedy decoding")
      ->check(CLI::Range(0.0f, 5.0f))->each([](const std::string&) { o.greedy = false; });
  cmd->add_option("--seed", o.seed, "Sampling seed")->capture_default_str();
  cmd->add_flag("--ignore-eos", o.ignore_eos, "Keep generating past end-of-generation tokens");
  static std::string rpc, split;
  cmd->add_option("--rpc", rpc, "Comma-separated ggml RPC servers (host:port) to offload layers to");
  cmd->add_option("--cpu-layers", o.placement.cpu_layers, "Number of leading layers kept on the host CPU")->capture_default_str();
  cmd->add_option("--layer-split", split, "Comma-separated layer counts per offload device (local GPUs, then RPC devices)");
  static bool no_repack = false;
  cmd->add_flag("--no-cpu-repack", no_repack, "Keep CPU weights in file layout (bit-identical to a CPU split through RPC servers)");
  cmd->add_flag("--json", json, "Print the result as JSON (text, tokens, timings)");
  cmd->add_flag("-v,--verbose", verbose, "Show libllama's log (-v warnings, -vv everything)");
  cmd->callback([] {
    engine::set_llama_verbosity(verbose);
    o.placement.rpc_servers = split_list(rpc);
    o.placement.cpu_weight_repack = !no_repack;
    for (const std::string& n : split_list(split)) {
      try {
        o.placement.device_layers.push_back(std::stoi(n));
      } catch (const std::exception&) {
        fail("--layer-split: '" + n + "' is not a layer count", 2);
      }
    }
    auto r = engine::generate(o);
    if (!r.is_ok()) fail(r.status().message());
    if (json) {
      nlohmann::json j = {{"text", r->text},           {"tokens", r->tokens},
                          {"n_prompt_tokens", r->n_prompt_tokens}, {"load_s", r->load_s},
                          {"prefill_tps", r->prefill_tps}, {"decode_tps", r->decode_tps}};
      // Generated text may end inside a UTF-8 sequence: replace, never throw.
      std::printf("%s\n", j.dump(2, ' ', false, nlohmann::json::error_handler_t::replace).c_str());
      return;
    }
    std::printf("%s%s\n", o.prompt.c_str(), r->text.c_str());
    std::fflush(stdout);
    std::fprintf(stderr, "\n%zu tokens generated; load %.2f s, prompt %d tokens at %.1f tok/s, decode %.1f tok/s\n",
                 r->tokens.size(), r->load_s, r->n_prompt_tokens, r->prefill_tps, r->decode_tps);
  });
}

}  // namespace

TANDEM_COMMAND(50, register_engine);

}  // namespace tandem::cli
