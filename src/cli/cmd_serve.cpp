#include <atomic>
#include <csignal>

#include "cli/commands.h"
#include "cli/config_flags.h"
#include "common/log.h"
#include "common/units.h"
#include "gateway/serve.h"
#include "plan/cluster.h"

namespace tandem::cli {
namespace {

std::atomic<bool> stop_requested{false};
void on_signal(int) { stop_requested = true; }

using config::Config;

// `--worker NAME=HOST:PORT` or `--worker HOST:PORT`; given at all, they replace the file's workers.
Status apply_workers(const std::vector<std::string>& flags, Config& c) {
  if (flags.empty()) return Status::ok();
  c.workers.clear();
  for (size_t i = 0; i < flags.size(); ++i) {
    config::WorkerConfig w;
    const size_t eq = flags[i].find('=');
    w.name = eq == std::string::npos ? "worker" + std::to_string(i + 1) : flags[i].substr(0, eq);
    w.address = eq == std::string::npos ? flags[i] : flags[i].substr(eq + 1);
    for (const auto& other : c.workers) {
      if (other.name == w.name) return Status::invalid_argument("--worker: the name '" + w.name + "' is given twice");
      if (other.address == w.address) {
        return Status::invalid_argument("--worker: " + w.address + " is given twice ('" + other.name + "' and '" +
                                        w.name + "')");
      }
    }
    c.workers.push_back(w);
  }
  return Status::ok();
}

// Every flag of serve is a key of tandem.toml (docs/config.md), bound here once.
void add_config_flags(ConfigFlags& f) {
  // [cluster]
  f.value(
      "--secret-file", "[cluster] secret_file", [](Config & c) -> auto& { return c.cluster.secret_file; },
      "Cluster secret shared with the workers");
  f.value(
      "--head-name", "[cluster] head_name", [](Config & c) -> auto& { return c.cluster.head_name; },
      "This machine's name in plans, reports and the workers' logs");
  f.parsed("--head-memory", "[cluster] head_memory", "Most memory the model may use on this machine, e.g. 110GiB",
           [](const std::string& t, Config& c) { return size_into(t, &c.cluster.head_memory); });
  f.parsed("--head-bandwidth", "[cluster] head_bandwidth", "This machine's memory bandwidth, e.g. 273GB/s",
           [](const std::string& t, Config& c) {
             auto b = plan::parse_bandwidth(t);
             if (!b.is_ok()) return b.status();
             c.cluster.head_bandwidth = b.value();
             return Status::ok();
           })
      ->type_name("BW");
  f.value(
       "--head-device", "[cluster] head_device", [](Config & c) -> auto& { return c.cluster.head_device; },
       "Where this machine's layers run: gpu, unified (a GPU sharing the system memory, as a GB10's) or cpu")
      ->check(CLI::IsMember({"gpu", "unified", "cpu"}));
  f.toggle(
      "--backtraces", "[cluster] backtraces", [](Config & c) -> auto& { return c.cluster.backtraces; }, true,
      "Let ggml print a gdb backtrace into the log when the engine aborts (debugging only)");
  // [model]
  add_model_flags(f);
  f.value(
       "-t,--threads", "[model] threads", [](Config & c) -> auto& { return c.model.threads; },
       "Engine CPU threads (0: one per physical core)")
      ->check(CLI::Range(0, 4096));
  f.toggle(
      "--no-cuda-graphs", "[model] cuda_graphs", [](Config & c) -> auto& { return c.model.cuda_graphs; }, false,
      "Turn CUDA graphs off in the engine");
  f.toggle(
      "--no-mmap", "[model] mmap", [](Config & c) -> auto& { return c.model.mmap; }, false,
      "Load the model file by reading it rather than through a memory mapping, as libllama does when a device "
      "cannot map files (an integrated GPU)");
  f.size(
      "--prompt-cache", "[model] prompt_cache",
      "Memory for the prompt cache on each node, e.g. 8GiB; 0 turns it off (default 8GiB)",
      [](Config& c) -> uint64_t& { return c.model.prompt_cache; }, /*zero_off=*/true);
  f.value(
      "--prompt-cache-dir", "[model] prompt_cache_dir", [](Config & c) -> auto& { return c.model.prompt_cache_dir; },
      "A folder for prompt-cache states memory no longer holds (workers use their --cache-dir); none by default");
  f.size("--prompt-cache-dir-size", "[model] prompt_cache_dir_size",
         "Bound of that folder on each node, e.g. 64GiB (the default)",
         [](Config& c) -> uint64_t& { return c.model.prompt_cache_dir_size; });
  f.value(
       "--engine-flag", "[model] engine_flags", [](Config & c) -> auto& { return c.model.engine_flags; },
       "Turn one of the engine's optimisations off, to measure what it saves, e.g. "
       "--engine-flag=--no-worker-input-slots "
       "(one of: " +
           gateway::engine_flags_list() + "; see `tandem engine --help`); repeat for more")
      ->allow_extra_args(false);
  // [server]
  f.value(
      "--listen", "[server] listen", [](Config & c) -> auto& { return c.server.listen; }, "Address of the HTTP API");
  f.value(
      "--keys-db", "[server] keys_db", [](Config & c) -> auto& { return c.server.keys_db; },
      "API key database (see `tandem keys`)");
  f.toggle(
      "--status-page-public", "[server] status_page_public",
      [](Config & c) -> auto& { return c.server.status_page_public; }, true,
      "Show the status page's figures and /health's details without an API key");
  f.value(
      "--model-id", "[server] model_id", [](Config & c) -> auto& { return c.server.model_id; },
      "Model name clients pass as `model` (default: the file name without .gguf)");
  f.toggle(
      "--insecure-no-auth", "[server] insecure_no_auth", [](Config & c) -> auto& { return c.server.insecure_no_auth; },
      true, "Serve the API without API keys (logged as a warning)");
  f.value(
       "--max-in-flight", "[server] max_in_flight", [](Config & c) -> auto& { return c.server.max_in_flight; },
       "Generation requests admitted at once; more get 503")
      ->check(CLI::Range(1, 100000));
  f.value(
       "--max-tokens", "[server] max_tokens", [](Config & c) -> auto& { return c.server.max_tokens; },
       "Most tokens one request may generate, whatever it asks for (an agent that sends no limit to a model that "
       "does not stop); 0: what the context holds")
      ->check(CLI::Range(0, 1 << 30));
  f.value(
       "--canary-interval", "[server] canary_interval", [](Config & c) -> auto& { return c.server.canary_interval_s; },
       "Seconds between idle one-token canary generations")
      ->check(CLI::Range(1, 86400));
  f.value(
       "--drain-timeout", "[server] drain_timeout", [](Config & c) -> auto& { return c.server.drain_timeout_s; },
       "On SIGTERM, seconds in-flight requests may finish")
      ->check(CLI::Range(0, 3600));
  f.value(
       "--cors-origin", "[server] cors_origins", [](Config & c) -> auto& { return c.server.cors_origins; },
       "A browser origin allowed to call the API, e.g. https://chat.example.org, or * for any; repeat for more (CORS "
       "is off "
       "without one)")
      ->allow_extra_args(false);
  f.value(
       "--log-format", "[server] log_format", [](Config & c) -> auto& { return c.server.log_format; },
       "Log lines as readable text or one JSON object per line")
      ->check(CLI::IsMember({"text", "json"}));
  // [plan]
  add_plan_flags(f);
}

void register_serve(CLI::App& app) {
  auto* cmd = app.add_subcommand(
      "serve", "Serve the model across the cluster: the OpenAI-compatible API, with keys, health and metrics");
  static std::string config_path;
  static std::vector<std::string> workers;
  static ConfigFlags flags(cmd);
  cmd->add_option("-c,--config", config_path,
                  "tandem.toml (docs/config.md); every flag below overrides one of its keys");
  cmd->add_option(
      "--worker", workers,
      "A worker, NAME=HOST:PORT or HOST:PORT, in layer order; repeat for more (replaces the file's [[worker]] tables)");
  add_config_flags(flags);
  cmd->callback([] {
    auto c = flags.resolve(config_path);
    if (!c.is_ok()) fail(c.status().message(), 2);
    if (Status s = apply_workers(workers, c.value()); !s.is_ok()) fail(s.message(), 2);
    if (Status s = gateway::check_engine_flags(c->model.engine_flags); !s.is_ok()) fail(s.message(), 2);
    log::set_format(log::parse_format(c->server.log_format).value());
    gateway::ServeOptions options;
    options.config = c.value();
    std::signal(SIGTERM, on_signal);
    std::signal(SIGINT, on_signal);
    std::signal(SIGPIPE, SIG_IGN);
    Status s = gateway::run_serve(options, stop_requested);
    // A bad configuration exits 2, which the units' RestartPreventExitStatus does not restart.
    const bool config_error = s.code() == StatusCode::invalid_argument || s.code() == StatusCode::not_found;
    if (!s.is_ok()) fail(s.message(), config_error ? 2 : 1);
  });
}

}  // namespace

TANDEM_COMMAND(80, register_serve);

}  // namespace tandem::cli
