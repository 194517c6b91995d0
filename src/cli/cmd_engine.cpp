#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <cstring>

#include "cli/commands.h"
#include "datapath/switches.h"
#include "engine/generate.h"
#include "engine/launch.h"
#include "engine/llama_log.h"
#include "engine/server.h"

namespace tandem::cli {

namespace {

std::atomic<bool> stop_requested{false};
void on_signal(int) { stop_requested = true; }

struct EngineFlags {
  engine::EngineLaunch launch;  // the flags `tandem serve` writes (engine/launch.h)
  std::string launch_error;     // the first invalid one: reported once parsing is done
  engine::GenerateOptions one_shot;
  engine::EngineConfig serve;
  std::string rpc_in_process;
  bool json = false, output_last = false;
  std::vector<std::string> switches_off;  // flags of datapath::kDataPathSwitches given
  int verbose = 0;
};

engine::Placement placement(const EngineFlags& f) {
  const engine::EngineLaunch& l = f.launch;
  engine::Placement p = f.one_shot.placement;
  p.cpu_layers = l.cpu_layers;
  p.rpc_servers = l.rpc;
  auto switches = datapath::apply_switch_flags(f.switches_off);
  if (!switches.is_ok()) fail(switches.status().message(), 2);
  static_cast<datapath::DataPathSwitches&>(p) = switches.value();
  p.output_on_head = !f.output_last;
  p.workers_first = l.workers_first;
  p.mmap = l.mmap;
  p.meta_tensor_split = l.split_mode == "tensor";
  p.ffn_tensor_split = l.split_mode == "ffn-tensor";
  for (const engine::WorkerCacheListing& w : l.worker_caches) {
    p.cache_listings[w.endpoint] = w.file;
    p.tandem_workers.insert(w.endpoint);  // only a tandem worker has a cache
  }
  p.tandem_workers.insert(l.tandem_workers.begin(), l.tandem_workers.end());
  p.device_layers = l.device_layers;
  return p;
}

void run_one_shot(EngineFlags& f) {
  if (f.launch.speculative != "off")
    fail("--speculative applies to the served engine (--socket); a one-shot generation decodes without it", 2);
  engine::GenerateOptions& o = f.one_shot;
  o.model = f.launch.model;
  o.n_ctx = f.launch.context;
  o.threads = f.launch.threads;
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
  const engine::EngineLaunch& l = f.launch;
  engine::EngineConfig& c = f.serve;
  c.socket_path = l.socket_path;
  c.load.model = l.model;
  c.load.placement = placement(f);
  c.scheduler.threads = l.threads;
  c.scheduler.context = l.context;
  c.scheduler.parallel = l.parallel;
  c.scheduler.kv_type = l.kv_type;
  c.scheduler.prompt_cache_bytes = l.prompt_cache_bytes;
  c.scheduler.prompt_cache_dir = l.prompt_cache_dir;
  c.scheduler.prompt_cache_dir_bytes = l.prompt_cache_dir_bytes;
  c.scheduler.speculation = {l.speculative, l.draft_model, l.draft_max, l.spec_synth_len};
  c.cuda_graphs = l.cuda_graphs;
  c.scheduler.warm_up = c.load.placement.warm_up;
  std::signal(SIGTERM, on_signal);
  std::signal(SIGINT, on_signal);
  std::signal(SIGPIPE, SIG_IGN);
  Status st = engine::serve_engine(c, stop_requested);
  if (!st.is_ok()) fail(st.message());
}

// What the CLI adds to a flag of the launch table: the checks a user's value gets (with CLI11's own
// messages) and the default --help shows.
void decorate_launch_flag(CLI::Option* o, const std::string& name) {
  if (name == "-c" || name == "--parallel" || name == "--cpu-layers" || name == "-t") o->type_name("INT");
  if (name == "-m") o->required();
  if (name == "-c") o->default_str("512")->check(CLI::Range(16, 1 << 24));
  if (name == "--parallel") o->default_str("1")->check(CLI::Range(1, 256));
  if (name == "--cpu-layers") o->default_str("0");
  if (name == "-t") o->default_str("0")->check(CLI::NonNegativeNumber);
  if (name == "--split-mode") o->default_str("layer")->check(CLI::IsMember({"layer", "tensor", "ffn-tensor"}));
  if (name == "--prompt-cache") o->default_str("0");
  if (name == "--prompt-cache-dir-size") o->default_str("64GiB");
}

// The flags `tandem serve` writes, from their table (engine/launch.h), read into f.launch by the
// table's own readers. Returns --socket's option.
CLI::Option* add_launch_flags(CLI::App* cmd, EngineFlags& f) {
  CLI::Option* socket = nullptr;
  for (const engine::LaunchFlag& flag : engine::launch_flags()) {
    const std::string name = flag.written_name();
    if (name == "--log-format") continue;  // add_log_format_option takes it, as for every command
    const auto read = [&f, r = flag.read](const std::string& v) {
      Status s = r(f.launch, v);
      if (!s.is_ok() && f.launch_error.empty()) f.launch_error = s.message();
    };
    CLI::Option* o = nullptr;
    switch (flag.kind) {
      case engine::LaunchFlag::Kind::toggle:
        o = cmd->add_flag(
            flag.names, [read](int64_t) { read(""); }, flag.help);
        break;
      case engine::LaunchFlag::Kind::repeated:
        o = cmd->add_option_function<std::vector<std::string>>(
            flag.names,
            [read](const std::vector<std::string>& values) {
              for (const std::string& v : values) read(v);
            },
            flag.help);
        break;
      case engine::LaunchFlag::Kind::value:
        o = cmd->add_option_function<std::string>(flag.names, read, flag.help);
        break;
    }
    decorate_launch_flag(o, name);
    if (name == "--socket") socket = o;
  }
  return socket;
}

void register_engine(CLI::App& app) {
  auto* cmd =
      app.add_subcommand("engine", "Run the inference engine on a Unix socket (--socket), or generate once (--prompt)");
  static EngineFlags f;
  engine::GenerateOptions& o = f.one_shot;
  auto* socket = add_launch_flags(cmd, f);
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
  cmd->add_option("--batch", f.serve.scheduler.batch, "--socket: tokens per decode step at most")
      ->capture_default_str()
      ->check(CLI::Range(1, 1 << 16));
  cmd->add_option("--prompt-chunk", f.serve.scheduler.max_prompt_chunk,
                  "--socket: prompt tokens per slot and step at most (0: the batch; below 64 for batch-independent "
                  "results on CPU)")
      ->capture_default_str()
      ->check(CLI::Range(0, 1 << 16));
  cmd->add_option("--temperature", o.temperature, "--prompt: sample at this temperature instead of greedy decoding")
      ->check(CLI::Range(0.0f, 5.0f))
      ->each([](const std::string&) { f.one_shot.greedy = false; });
  cmd->add_option("--seed", o.seed, "--prompt: sampling seed")->capture_default_str();
  cmd->add_flag("--ignore-eos", o.ignore_eos, "--prompt: keep generating past end-of-generation tokens");
  cmd->add_flag("--output-with-last-device", f.output_last,
                "Put the output head with the last device as llama.cpp does (default with local GPUs and RPC servers: "
                "on the last local GPU)");
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
  cmd->add_flag("--json", f.json, "--prompt: print the result as JSON (text, tokens, timings)");
  cmd->add_flag("-v,--verbose", f.verbose, "Show libllama's log (-v warnings, -vv everything)");
  add_log_format_option(cmd);
  cmd->callback([socket, prompt] {
    engine::set_llama_verbosity(f.verbose);
    if (socket->count() == 0 && prompt->count() == 0)
      fail("engine: give --socket PATH to serve or --prompt TEXT to generate once", 2);
    if (!f.launch_error.empty()) fail(f.launch_error, 2);
    if (Status s = engine::validate_launch(f.launch); !s.is_ok()) fail(s.message(), 2);
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
