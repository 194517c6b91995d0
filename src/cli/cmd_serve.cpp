#include <atomic>
#include <csignal>
#include <optional>

#include "cli/commands.h"
#include "gateway/serve.h"

namespace tandem::cli {
namespace {

std::atomic<bool> stop_requested{false};
void on_signal(int) { stop_requested = true; }

struct ServeFlags {
  std::string config_path, model, secret_file, listen, keys_db;
  std::vector<std::string> workers;
  std::optional<uint32_t> context, parallel;
  bool no_cuda_graphs = false;
  gateway::ServeOptions options;
};

// Flags override the file; `--worker NAME=HOST:PORT` or `--worker HOST:PORT`.
config::Config merged_config(const ServeFlags& f) {
  config::Config c;
  if (!f.config_path.empty()) {
    auto loaded = config::load_config(f.config_path);
    if (!loaded.is_ok()) fail(loaded.status().message(), 2);
    c = loaded.value();
  }
  if (!f.model.empty()) c.model.path = f.model;
  if (!f.secret_file.empty()) c.cluster.secret_file = f.secret_file;
  if (!f.listen.empty()) c.server.listen = f.listen;
  if (!f.keys_db.empty()) c.server.keys_db = f.keys_db;
  if (f.context) c.model.context = *f.context;
  if (f.parallel) c.model.parallel = *f.parallel;
  if (!f.workers.empty()) c.workers.clear();
  for (size_t i = 0; i < f.workers.size(); ++i) {
    config::WorkerConfig w;
    const std::string& text = f.workers[i];
    const size_t eq = text.find('=');
    w.name = eq == std::string::npos ? "worker" + std::to_string(i + 1) : text.substr(0, eq);
    w.address = eq == std::string::npos ? text : text.substr(eq + 1);
    c.workers.push_back(w);
  }
  return c;
}

void register_serve(CLI::App& app) {
  auto* cmd = app.add_subcommand("serve", "Serve the model across the cluster: the OpenAI-compatible API, with keys, health and metrics");
  static ServeFlags f;
  cmd->add_option("-c,--config", f.config_path, "tandem.toml (docs/config.md); the flags below override it");
  cmd->add_option("-m,--model", f.model, "GGUF model file ([model] path)");
  cmd->add_option("--worker", f.workers, "A worker, NAME=HOST:PORT or HOST:PORT, in layer order; repeat for more ([[worker]])");
  cmd->add_option("--secret-file", f.secret_file, "Cluster secret shared with the workers ([cluster] secret_file)");
  cmd->add_option("--listen", f.listen, "Address of the HTTP API ([server] listen, default 127.0.0.1:8080)");
  cmd->add_option("--keys-db", f.keys_db, "API key database ([server] keys_db; see `tandem keys`)");
  cmd->add_option("--context", f.context, "Context tokens per sequence ([model] context)");
  cmd->add_option("--parallel", f.parallel, "Sequences served at once ([model] parallel)");
  cmd->add_option("--model-id", f.options.model_id, "Model name clients pass as `model` (default: the file name)");
  cmd->add_option("--layers", f.options.layers, "Layers per node, head first (e.g. 1,2,1), instead of the planner's choice")->delimiter(',');
  cmd->add_flag("--insecure-no-auth", f.options.insecure_no_auth, "Serve the API without API keys (logged as a warning)");
  cmd->add_option("--canary-interval", f.options.canary_interval_s, "Seconds between idle one-token canary generations")
      ->capture_default_str()->check(CLI::Range(1, 86400));
  cmd->add_option("--drain-timeout", f.options.drain_timeout_s, "On SIGTERM, seconds in-flight requests may finish")
      ->capture_default_str()->check(CLI::Range(0, 3600));
  cmd->add_option("--max-in-flight", f.options.max_in_flight, "Generation requests admitted at once; more get 503")
      ->capture_default_str()->check(CLI::Range(1, 100000));
  cmd->add_option("-t,--threads", f.options.threads, "Engine CPU threads (0: one per physical core)")->capture_default_str();
  cmd->add_flag("--no-cuda-graphs", f.no_cuda_graphs, "Turn CUDA graphs off in the engine");
  cmd->add_option("--engine-flag", f.options.engine_flags,
                  "Turn one of the engine's optimisations off, to measure what it saves, e.g. "
                  "--engine-flag=--no-worker-input-slots (one of: " + gateway::engine_flags_list() +
                      "; see `tandem engine --help`); repeat for more")
      ->allow_extra_args(false)
      ->each([](const std::string& flag) {
        if (Status s = gateway::check_engine_flags({flag}); !s.is_ok()) fail(s.message(), 2);
      });
  add_log_format_option(cmd);
  cmd->callback([] {
    f.options.config = merged_config(f);
    f.options.cuda_graphs = !f.no_cuda_graphs;
    std::signal(SIGTERM, on_signal);
    std::signal(SIGINT, on_signal);
    std::signal(SIGPIPE, SIG_IGN);
    Status s = gateway::run_serve(f.options, stop_requested);
    if (!s.is_ok()) fail(s.message());
  });
}

}  // namespace

TANDEM_COMMAND(80, register_serve);

}  // namespace tandem::cli
