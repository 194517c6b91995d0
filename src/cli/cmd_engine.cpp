#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <cstring>

#include "cli/commands.h"
#include "common/strings.h"
#include "common/units.h"
#include "datapath/switches.h"
#include "engine/generate.h"
#include "engine/llama_log.h"
#include "engine/server.h"

namespace tandem::cli {

namespace {

std::atomic<bool> stop_requested{false};
void on_signal(int) { stop_requested = true; }

struct EngineFlags {
  engine::GenerateOptions one_shot;
  engine::EngineConfig serve;
  std::string rpc, split;
  std::vector<std::string> worker_caches, tandem_workers;
  std::string rpc_in_process;
  std::string prompt_cache = "0";
  std::string prompt_cache_dir_size = "64GiB";
  bool json = false, no_cuda_graphs = false, output_last = false, workers_first = false, no_mmap = false;
  std::string split_mode = "layer";
  std::vector<std::string> switches_off;  // flags of datapath::kDataPathSwitches given
  int verbose = 0;
};

engine::Placement placement(const EngineFlags& f) {
  engine::Placement p = f.one_shot.placement;
  p.rpc_servers = split_commas(f.rpc);
  auto switches = datapath::apply_switch_flags(f.switches_off);
  if (!switches.is_ok()) fail(switches.status().message(), 2);
  static_cast<datapath::DataPathSwitches&>(p) = switches.value();
  p.output_on_head = !f.output_last;
  p.workers_first = f.workers_first;
  p.mmap = !f.no_mmap;
  p.meta_tensor_split = f.split_mode == "tensor";
  p.ffn_tensor_split = f.split_mode == "ffn-tensor";
  for (const std::string& w : f.worker_caches) {
    const size_t eq = w.find('=');
    if (eq == std::string::npos || eq == 0 || eq + 1 == w.size())
      fail("--worker-cache: expected HOST:PORT=FILE, got '" + w + "'", 2);
    p.cache_listings[w.substr(0, eq)] = w.substr(eq + 1);
    p.tandem_workers.insert(w.substr(0, eq));  // only a tandem worker has a cache
  }
  for (const std::string& w : f.tandem_workers) {
    if (std::find(p.rpc_servers.begin(), p.rpc_servers.end(), w) == p.rpc_servers.end()) {
      fail("--tandem-worker: '" + w + "' is not one of the --rpc endpoints (" + f.rpc + ")", 2);
    }
    p.tandem_workers.insert(w);
  }
  for (const std::string& n : split_commas(f.split)) {
    try {
      p.device_layers.push_back(std::stoi(n));
    } catch (const std::exception&) {
      fail("--layer-split: '" + n + "' is not a layer count", 2);
    }
  }
  return p;
}

void run_one_shot(EngineFlags& f) {
  engine::GenerateOptions& o = f.one_shot;
  o.placement = placement(f);
  FILE* out = stdout;
  if (!f.rpc_in_process.empty()) {
    // ggml's server prints its log on stdout: the result keeps the real one, the log goes to stderr.
    std::fflush(stdout);
    out = ::fdopen(::dup(1), "w");
    if (out == nullptr || ::dup2(2, 1) < 0)
      fail(std::string("--rpc-in-process: cannot set stdout aside: ") + std::strerror(errno));
    if (Status s = engine::start_in_process_rpc_server(f.rpc_in_process, o.threads); !s.is_ok()) fail(s.message());
  }
  auto r = engine::generate(o);
  if (!r.is_ok()) fail(r.status().message());
  if (f.json) {
    std::fprintf(out, "%s\n", engine::generate_result_json(r.value()).c_str());
    std::fflush(out);
    return;
  }
  std::fprintf(out, "%s%s\n", o.prompt.c_str(), r->text.c_str());
  std::fflush(out);
  std::fprintf(stderr, "\n%zu tokens generated; load %.2f s, prompt %d tokens at %.1f tok/s, decode %.1f tok/s\n",
               r->tokens.size(), r->load_s, r->n_prompt_tokens, r->prefill_tps, r->decode_tps);
}

void run_server(EngineFlags& f) {
  engine::EngineConfig& c = f.serve;
  c.load.model = f.one_shot.model;
  c.load.placement = placement(f);
  c.scheduler.threads = f.one_shot.threads;
  c.cuda_graphs = !f.no_cuda_graphs;
  c.scheduler.warm_up = c.load.placement.warm_up;
  std::signal(SIGTERM, on_signal);
  std::signal(SIGINT, on_signal);
  std::signal(SIGPIPE, SIG_IGN);
  Status st = engine::serve_engine(c, stop_requested);
  if (!st.is_ok()) fail(st.message());
}

void register_engine(CLI::App& app) {
  auto* cmd =
      app.add_subcommand("engine", "Run the inference engine on a Unix socket (--socket), or generate once (--prompt)");
  static EngineFlags f;
  engine::GenerateOptions& o = f.one_shot;
  cmd->add_option("-m,--model", o.model, "GGUF model file")->required();
  auto* socket = cmd->add_option("--socket", f.serve.socket_path,
                                 "Serve the engine protocol on this Unix socket (docs/engine-protocol.md)");
  auto* prompt =
      cmd->add_option("-p,--prompt", o.prompt, "Generate once from this prompt and print the text and speed");
  socket->excludes(prompt);
  cmd->add_option("--chunk-times", o.chunk_tokens,
                  "--prompt: also report the decode speed of each run of N generated tokens (chunk_tps in --json; "
                  "a soak's stall shows as a slow chunk)")
      ->check(CLI::NonNegativeNumber);
  cmd->add_option("-n,--n-predict", o.n_predict, "--prompt: tokens to generate at most")
      ->capture_default_str()
      ->check(CLI::Range(1, 1 << 20));
  cmd->add_option("-c,--context", o.n_ctx, "Context size in tokens (--socket: per parallel slot)")
      ->capture_default_str()
      ->check(CLI::Range(16, 1 << 24));
  cmd->add_option("--parallel", f.serve.scheduler.parallel, "--socket: requests decoded at the same time (slots)")
      ->capture_default_str()
      ->check(CLI::Range(1, 256));
  cmd->add_option("--batch", f.serve.scheduler.batch, "--socket: tokens per decode step at most")
      ->capture_default_str()
      ->check(CLI::Range(1, 1 << 16));
  cmd->add_option("--prompt-chunk", f.serve.scheduler.max_prompt_chunk,
                  "--socket: prompt tokens per slot and step at most (0: the batch; below 64 for batch-independent "
                  "results on CPU)")
      ->capture_default_str()
      ->check(CLI::Range(0, 1 << 16));
  cmd->add_option("--prompt-cache", f.prompt_cache,
                  "--socket: memory for the prompt cache on each node (e.g. 8GiB; 0: off): a slot's state is saved "
                  "when it idles or is taken over, and restored for a later request sharing a longer prefix with it; a "
                  "--tandem-worker keeps its part of each state in its own memory")
      ->capture_default_str();
  cmd->add_option("--prompt-cache-dir", f.serve.scheduler.prompt_cache_dir,
                  "--socket: a folder for the prompt cache's states that memory no longer holds (emptied at start; "
                  "a --tandem-worker spills its part into its own cache folder)");
  cmd->add_option("--prompt-cache-dir-size", f.prompt_cache_dir_size,
                  "--socket: bound of that folder on each node (e.g. 64GiB)")
      ->capture_default_str();
  cmd->add_option("-t,--threads", o.threads, "CPU threads (0: one per physical core)")
      ->capture_default_str()
      ->check(CLI::NonNegativeNumber);
  cmd->add_option("--temperature", o.temperature, "--prompt: sample at this temperature instead of greedy decoding")
      ->check(CLI::Range(0.0f, 5.0f))
      ->each([](const std::string&) { f.one_shot.greedy = false; });
  cmd->add_option("--seed", o.seed, "--prompt: sampling seed")->capture_default_str();
  cmd->add_flag("--ignore-eos", o.ignore_eos, "--prompt: keep generating past end-of-generation tokens");
  cmd->add_option("--rpc", f.rpc, "Comma-separated ggml RPC servers (host:port) to offload layers to");
  cmd->add_option("--cpu-layers", o.placement.cpu_layers, "Number of leading layers kept on the host CPU")
      ->capture_default_str();
  cmd->add_option(
      "--layer-split", f.split,
      "Comma-separated layer counts per offload device (local GPUs, then RPC devices; see --workers-first)");
  cmd->add_flag(
      "--workers-first", f.workers_first,
      "Order the offload devices as llama.cpp does: RPC devices first, local GPUs last (the first layers run on the "
      "workers; "
      "the output head stays on the last local GPU without a tensor override, so pipeline parallelism stays on)");
  cmd->add_option("--split-mode", f.split_mode,
                  "layer: each device runs its range of layers in turn (tandem's split); tensor: every device runs "
                  "every layer at once through llama.cpp's meta device (its -sm tensor; for measurement, on the "
                  "architectures it splits; --layer-split gives the shares); ffn-tensor: every device runs every "
                  "layer at once with only the FFNs and the output head split across them, attention and KV cache "
                  "whole on each (the FFN tensor split, docs/parallelism.md)")
      ->check(CLI::IsMember({"layer", "tensor", "ffn-tensor"}))
      ->capture_default_str();
  cmd->add_option("--worker-cache", f.worker_caches,
                  "HOST:PORT=FILE: the tandem worker behind this RPC endpoint has the weights FILE lists cached "
                  "(\"HASH BYTES\" lines; `tandem serve` writes it); load them from there (repeatable)");
  cmd->add_flag("--output-with-last-device", f.output_last,
                "Put the output head with the last device as llama.cpp does (default with local GPUs and RPC servers: "
                "on the last local GPU)");
  cmd->add_option(
      "--tandem-worker", f.tandem_workers,
      "HOST:PORT (repeatable): this --rpc endpoint reaches a tandem worker of this build (through `tandem link "
      "forward`), so a step's inputs that repeat across layers cross the link once; never a stock ggml RPC server "
      "(implied by --worker-cache)");
  cmd->add_option(
      "--rpc-in-process", f.rpc_in_process,
      "--prompt: start ggml's RPC server inside this process on HOST:PORT, serving the local GPUs (name it in "
      "--rpc too): a split with both halves in one process and one CUDA context, for measurement");
  // The data path's switches, from their table (datapath/switches.h).
  for (const datapath::DataPathSwitch& sw : datapath::kDataPathSwitches) {
    std::string help = std::string("On by default: ") + sw.mechanism + ". Off: " + sw.measures;
    if (sw.needs != nullptr) help += std::string(". Also off with ") + sw.needs;
    const std::string flag = sw.flag;
    cmd->add_flag(
        flag, [flag](int64_t) { f.switches_off.push_back(flag); }, help);
  }
  cmd->add_flag("--no-cuda-graphs", f.no_cuda_graphs,
                "Turn CUDA graphs off in the engine (GGML_CUDA_DISABLE_GRAPHS=1)");
  cmd->add_flag("--no-mmap", f.no_mmap,
                "Read the model file rather than map it, as libllama does when a device cannot map files (an "
                "integrated GPU); the weights a --worker-cache lists are not read on the head either way");
  cmd->add_flag("--json", f.json, "--prompt: print the result as JSON (text, tokens, timings)");
  cmd->add_flag("-v,--verbose", f.verbose, "Show libllama's log (-v warnings, -vv everything)");
  add_log_format_option(cmd);
  cmd->callback([socket, prompt] {
    engine::set_llama_verbosity(f.verbose);
    if (socket->count() == 0 && prompt->count() == 0)
      fail("engine: give --socket PATH to serve or --prompt TEXT to generate once", 2);
    f.serve.scheduler.context = f.one_shot.n_ctx;
    auto cache = parse_bytes(f.prompt_cache);
    if (!cache.is_ok()) fail("--prompt-cache: " + cache.status().message(), 2);
    f.serve.scheduler.prompt_cache_bytes = cache.value();
    auto dir_size = parse_bytes(f.prompt_cache_dir_size);
    if (!dir_size.is_ok()) fail("--prompt-cache-dir-size: " + dir_size.status().message(), 2);
    f.serve.scheduler.prompt_cache_dir_bytes = dir_size.value();
    if (socket->count() > 0) return run_server(f);
    run_one_shot(f);
    if (!f.rpc_in_process.empty()) {
      // Its server thread never returns: leave without running destructors under it.
      std::fflush(nullptr);
      std::_Exit(0);
    }
  });
}

}  // namespace

TANDEM_COMMAND(50, register_engine);

}  // namespace tandem::cli
