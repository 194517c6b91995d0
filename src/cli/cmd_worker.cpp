#include <cstdio>
#include <map>

#include "cli/commands.h"
#include "common/log.h"
#include "common/strings.h"
#include "common/units.h"
#include "config/config.h"
#include "link/secret.h"
#include "plan/model_info.h"
#include "plan/plan_config.h"
#include "worker/cache.h"
#include "worker/rpc_server.h"
#include "worker/worker.h"

namespace tandem::cli {

namespace {

struct WorkerFlags {
  std::string config_path, listen, secret_file, devices, cache_dir, cache_max, name, log_format;
  int threads = 0, handshake_ms = 5000;
  bool no_graphs = false, no_netns = false, sync_writes = false, backtraces = false;
  // Which flags were given: with -c, only those override the worker's table.
  std::map<std::string, CLI::Option*> opts;
  bool given(const std::string& flag) const { return opts.at(flag)->count() > 0; }
};

// The worker's settings: its [[worker]] table when -c names a config, with the flags given on top.
config::WorkerConfig resolve_worker(const WorkerFlags& f, std::string* secret_file, bool* backtraces) {
  config::WorkerConfig w;
  *secret_file = f.secret_file;
  *backtraces = f.backtraces;
  if (!f.config_path.empty()) {
    auto c = config::load_config(f.config_path);
    if (!c.is_ok()) fail(c.status().message(), 2);
    auto found = config::find_worker(c.value(), f.name);
    if (!found.is_ok()) fail(found.status().message(), 2);
    w = *found.value();
    auto listen = config::worker_listen(w);
    if (!listen.is_ok()) fail(listen.status().message(), 2);
    w.listen = listen.value();
    if (!f.given("--secret-file")) *secret_file = c->cluster.secret_file;
    if (!f.given("--backtraces")) *backtraces = c->cluster.backtraces;
  }
  if (f.given("--listen")) w.listen = f.listen;
  if (f.given("--name")) w.name = f.name;
  if (f.given("--devices")) w.devices = split_commas(f.devices);
  if (f.given("--cache-dir")) w.cache_dir = f.cache_dir;
  if (f.given("--cache-max-size")) {
    auto b = parse_bytes(f.cache_max, /*require_unit=*/true);
    if (!b.is_ok()) fail("--cache-max-size: " + b.status().message(), 2);
    w.cache_max_size = b.value();
  }
  if (f.given("--threads")) w.threads = f.threads;
  if (f.given("--no-cuda-graphs")) w.cuda_graphs = false;
  if (f.given("--no-private-netns")) w.private_netns = false;
  if (f.given("--log-format")) w.log_format = f.log_format;
  return w;
}

// Seeding from a config: the model and cache folder of the worker's table, and, unless --layers
// says otherwise, the layers the plan of the declared figures gives it (the same plan serve makes
// when every box has at least its declared memory free). A worker cannot ask the head for its
// figures, so without declared memory every layer is seeded.
void seed_from_config(const std::string& path, const std::string& name, bool plan_layers, worker::SeedOptions* o) {
  auto c = config::load_config(path);
  if (!c.is_ok()) fail(c.status().message(), 2);
  auto w = config::find_worker(c.value(), name);
  if (!w.is_ok()) fail(w.status().message(), 2);
  if (o->model.empty()) o->model = c->model.path;
  if (o->cache_dir.empty()) o->cache_dir = w.value()->cache_dir;
  if (o->cache_dir.empty())
    fail(path + ": [[worker]] '" + w.value()->name + "' has no cache_dir (or pass --cache-dir)", 2);
  if (!plan_layers) return;
  auto info = plan::read_model_info(o->model);
  if (!info.is_ok()) fail(info.status().message());
  auto range = plan::declared_layer_range(c.value(), info.value(), w.value()->name);
  if (!range.is_ok()) {
    std::fprintf(stderr, "seeding every layer: %s\n", range.status().message().c_str());
    return;
  }
  if (!range->has_value())
    fail("the plan of " + path + " gives worker '" + w.value()->name + "' no layers: nothing to seed");
  o->first_layer = range->value().first;
  o->last_layer = range->value().second;
  std::fprintf(stderr, "seeding layers %d-%d of %s, worker '%s''s share under the plan of %s\n", o->first_layer,
               o->last_layer, o->model.c_str(), w.value()->name.c_str(), path.c_str());
}

void run_worker_command(const WorkerFlags& f) {
  std::string secret_file;
  bool backtraces = false;
  const config::WorkerConfig w = resolve_worker(f, &secret_file, &backtraces);
  if (w.listen.empty() || secret_file.empty()) fail("worker: give --listen and --secret-file, or -c tandem.toml", 2);
  log::set_format(log::parse_format(w.log_format).value());
  worker::WorkerOptions o;
  auto ep = link::parse_endpoint(w.listen, true);
  if (!ep.is_ok()) fail("--listen: " + ep.status().message(), 2);
  o.listen = ep.value();
  auto secret = link::load_secret(secret_file);
  if (!secret.is_ok()) fail(secret.status().message(), 2);
  o.rpc.devices = w.devices;
  if (auto d = worker::resolve_devices(o.rpc.devices); !d.is_ok()) fail("--devices: " + d.status().message(), 2);
  o.rpc.cache_dir = w.cache_dir;
  o.rpc.threads = w.threads;
  o.rpc.cuda_graphs = w.cuda_graphs;
  o.rpc.backtraces = backtraces;
  o.rpc.async_input_writes = !f.sync_writes;
  o.rpc.private_netns = w.private_netns;
  if (w.cache_max_size) {
    if (w.cache_dir.empty()) fail("--cache-max-size needs --cache-dir", 2);
    o.cache_max_bytes = *w.cache_max_size;
  }
  if (!w.name.empty()) o.handshake.name = w.name;
  o.handshake.step_timeout = link::Millis(f.handshake_ms);
  if (Status s = worker::run_worker(o, secret.value()); !s.is_ok()) fail(s.message());
}

void add_seed(CLI::App* worker) {
  auto* seed = worker->add_subcommand("seed", "Pre-fill the RPC weight cache from this machine's copy of the model");
  static worker::SeedOptions o;
  static std::string layers, config_path, name;
  seed->add_option(
      "-c,--config", config_path,
      "tandem.toml: the model, this worker's cache_dir, and its layers under the plan of the declared memory");
  seed->add_option("--name", name, "With -c: which [[worker]] this is (default: the only one)");
  seed->add_option("-m,--model", o.model, "GGUF model (first split of a split model; default with -c: [model] path)");
  seed->add_option("--cache-dir", o.cache_dir, "The worker's --cache-dir (default with -c: its cache_dir)");
  seed->add_option("--layers", layers, "Only layers A-B (inclusive) of the blk.* tensors; others are always seeded");
  seed->callback([] {
    if (!config_path.empty()) seed_from_config(config_path, name, layers.empty(), &o);
    if (o.model.empty() || o.cache_dir.empty()) fail("seed: give --model and --cache-dir, or -c tandem.toml", 2);
    if (!layers.empty()) {
      if (std::sscanf(layers.c_str(), "%d-%d", &o.first_layer, &o.last_layer) != 2 || o.first_layer < 0 ||
          o.last_layer < o.first_layer) {
        fail("--layers: expected A-B with 0 <= A <= B, got '" + layers + "'", 2);
      }
    }
    auto r = worker::seed_cache(o);
    if (!r.is_ok()) fail(r.status().message());
    std::printf(
        "seeded %s: %llu tensors written (%s), %llu already present; %llu tensors (%s) are at or below the "
        "1 MiB seeding threshold and will travel over the link\n",
        o.cache_dir.c_str(), static_cast<unsigned long long>(r->tensors_written),
        format_bytes(r->bytes_written).c_str(), static_cast<unsigned long long>(r->tensors_present),
        static_cast<unsigned long long>(r->tensors_small), format_bytes(r->bytes_small).c_str());
  });
}

void add_cache(CLI::App* worker) {
  auto* cache = worker->add_subcommand("cache", "Show or prune the RPC weight cache");
  cache->require_subcommand(1);
  static std::string dir;
  static std::vector<std::string> models;
  auto* list = cache->add_subcommand("list", "List the cache's entries, least recently used first");
  list->add_option("--cache-dir", dir, "The worker's --cache-dir")->required();
  list->add_option("-m,--model", models, "Show which entries belong to this model (repeatable)");
  list->callback([] {
    auto entries = worker::list_cache(dir);
    if (!entries.is_ok()) fail(entries.status().message());
    std::map<std::string, std::string> owner;  // entry -> model file
    for (const auto& m : models) {
      auto names = worker::model_cache_names(m);
      if (!names.is_ok()) fail(names.status().message());
      for (const auto& n : names.value()) owner.emplace(n, m);
    }
    uint64_t total = 0;
    for (const auto& e : entries.value()) {
      char when[32];
      tm t{};
      ::gmtime_r(&e.last_used, &t);
      std::strftime(when, sizeof when, "%Y-%m-%d %H:%M", &t);
      const auto it = owner.find(e.name);
      const std::string whose = models.empty() ? "" : it == owner.end() ? "  (no given model)" : "  " + it->second;
      std::printf("%s  %10s  %s%s\n", e.name.c_str(), format_bytes(e.bytes).c_str(), when, whose.c_str());
      total += e.bytes;
    }
    std::printf("%zu entries, %s\n", entries->size(), format_bytes(total).c_str());
  });
  auto* prune = cache->add_subcommand("prune", "Remove entries that belong to none of the given models");
  prune->add_option("--cache-dir", dir, "The worker's --cache-dir")->required();
  prune->add_option("-m,--model", models, "A model whose entries to keep (repeatable)")->required();
  prune->callback([] {
    auto r = worker::prune_cache(dir, models);
    if (!r.is_ok()) fail(r.status().message());
    std::printf("removed %llu entries (%s)\n", static_cast<unsigned long long>(r->entries),
                format_bytes(r->bytes).c_str());
  });
}

void add_rpc_server(CLI::App* worker) {
  // Hidden: the worker's RPC child (see worker/rpc_child.h); not for people.
  auto* rpc = worker->add_subcommand("rpc-server", "")->group("");
  static worker::RpcServerOptions o;
  rpc->add_option("--endpoint", o.endpoint)->required();
  rpc->add_option("--device", o.devices);
  rpc->add_option("--cache-dir", o.cache_dir);
  rpc->add_option("--threads", o.threads);
  rpc->add_flag("--sync-input-writes", [](int64_t) { o.async_input_writes = false; });
  add_log_format_option(rpc);
  rpc->callback([] {
    if (Status s = worker::run_rpc_server(o); !s.is_ok()) fail(s.message());
  });
}

void register_worker(CLI::App& app) {
  auto* cmd = app.add_subcommand("worker", "Serve this machine's devices to a head over the authenticated link");
  static WorkerFlags f;
  cmd->add_option("-c,--config", f.config_path,
                  "tandem.toml: this worker's [[worker]] table (see --name); the flags below override it");
  f.opts["--listen"] =
      cmd->add_option("--listen", f.listen, "Public address, ADDR:PORT (e.g. 0.0.0.0:7070) ([[worker]] listen)");
  f.opts["--secret-file"] = cmd->add_option("--secret-file", f.secret_file,
                                            "The cluster secret (see `tandem secret new`) ([cluster] secret_file)");
  f.opts["--devices"] = cmd->add_option(
      "--devices", f.devices, "Comma-separated ggml devices (default: every GPU, else the CPU) ([[worker]] devices)");
  f.opts["--cache-dir"] = cmd->add_option("--cache-dir", f.cache_dir,
                                          "Weight cache folder (see `tandem worker seed`) ([[worker]] cache_dir)");
  f.opts["--cache-max-size"] = cmd->add_option(
      "--cache-max-size", f.cache_max,
      "Bound the cache (e.g. 200GiB), evicting least recently used entries ([[worker]] cache_max_size)");
  f.opts["--threads"] = cmd->add_option("--threads", f.threads,
                                        "CPU threads of the RPC server (0: one per physical core) ([[worker]] threads)")
                            ->capture_default_str();
  f.opts["--name"] = cmd->add_option("--name", f.name,
                                     "This worker's name in messages (default: the hostname); with -c, which "
                                     "[[worker]] it is (default: the only one)");
  cmd->add_option("--handshake-timeout-ms", f.handshake_ms, "Deadline of each handshake step")
      ->capture_default_str()
      ->check(CLI::Range(100, 600000));
  f.opts["--no-cuda-graphs"] = cmd->add_flag(
      "--no-cuda-graphs", f.no_graphs, "Run the RPC server with CUDA graphs off ([[worker]] cuda_graphs = false)");
  cmd->add_flag("--sync-input-writes", f.sync_writes,
                "Let ggml write each step's inputs to the GPU one at a time, waiting on each (default: queued on a "
                "stream of their own; this is for measuring the difference)");
  f.opts["--no-private-netns"] =
      cmd->add_flag("--no-private-netns", f.no_netns,
                    "Do not isolate the RPC server in a private network namespace ([[worker]] private_netns = false)");
  f.opts["--backtraces"] =
      cmd->add_flag("--backtraces", f.backtraces,
                    "Let ggml print a gdb backtrace into the log when the RPC server aborts ([cluster] backtraces)");
  f.opts["--log-format"] =
      cmd->add_option("--log-format", f.log_format, "Log lines as text (default) or JSON ([[worker]] log_format)")
          ->check(CLI::IsMember({"text", "json"}));
  add_seed(cmd);
  add_cache(cmd);
  add_rpc_server(cmd);
  cmd->callback([cmd] {
    if (cmd->get_subcommands().empty()) run_worker_command(f);
  });
}

}  // namespace

TANDEM_COMMAND(40, register_worker);

}  // namespace tandem::cli
