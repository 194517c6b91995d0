#include <cstdio>
#include <map>

#include "cli/commands.h"
#include "common/strings.h"
#include "common/units.h"
#include "link/secret.h"
#include "worker/cache.h"
#include "worker/rpc_server.h"
#include "worker/worker.h"

namespace tandem::cli {

namespace {


struct WorkerFlags {
  std::string listen, secret_file, devices, cache_dir, cache_max, name;
  int threads = 0, handshake_ms = 5000;
  bool no_graphs = false, no_netns = false, sync_writes = false;
};

void run_worker_command(const WorkerFlags& f) {
  if (f.listen.empty() || f.secret_file.empty()) fail("worker: --listen and --secret-file are required", 2);
  worker::WorkerOptions o;
  auto ep = link::parse_endpoint(f.listen, true);
  if (!ep.is_ok()) fail("--listen: " + ep.status().message(), 2);
  o.listen = ep.value();
  auto secret = link::load_secret(f.secret_file);
  if (!secret.is_ok()) fail(secret.status().message());
  o.rpc.devices = split_commas(f.devices);
  if (auto d = worker::resolve_devices(o.rpc.devices); !d.is_ok()) fail("--devices: " + d.status().message(), 2);
  o.rpc.cache_dir = f.cache_dir;
  o.rpc.threads = f.threads;
  o.rpc.cuda_graphs = !f.no_graphs;
  o.rpc.async_input_writes = !f.sync_writes;
  o.rpc.private_netns = !f.no_netns;
  if (!f.cache_max.empty()) {
    if (f.cache_dir.empty()) fail("--cache-max-size needs --cache-dir", 2);
    auto b = parse_bytes(f.cache_max, /*require_unit=*/true);
    if (!b.is_ok()) fail("--cache-max-size: " + b.status().message(), 2);
    o.cache_max_bytes = b.value();
  }
  if (!f.name.empty()) o.handshake.name = f.name;
  o.handshake.step_timeout = link::Millis(f.handshake_ms);
  if (Status s = worker::run_worker(o, secret.value()); !s.is_ok()) fail(s.message());
}

void add_seed(CLI::App* worker) {
  auto* seed = worker->add_subcommand("seed", "Pre-fill the RPC weight cache from this machine's copy of the model");
  static worker::SeedOptions o;
  static std::string layers;
  seed->add_option("-m,--model", o.model, "GGUF model (first split of a split model)")->required();
  seed->add_option("--cache-dir", o.cache_dir, "The worker's --cache-dir")->required();
  seed->add_option("--layers", layers, "Only layers A-B (inclusive) of the blk.* tensors; others are always seeded");
  seed->callback([] {
    if (!layers.empty()) {
      if (std::sscanf(layers.c_str(), "%d-%d", &o.first_layer, &o.last_layer) != 2 || o.first_layer < 0 ||
          o.last_layer < o.first_layer) {
        fail("--layers: expected A-B with 0 <= A <= B, got '" + layers + "'", 2);
      }
    }
    auto r = worker::seed_cache(o);
    if (!r.is_ok()) fail(r.status().message());
    std::printf("seeded %s: %llu tensors written (%s), %llu already present; %llu tensors (%s) are at or below the "
                "1 MiB seeding threshold and will travel over the link\n",
                o.cache_dir.c_str(), static_cast<unsigned long long>(r->tensors_written), format_bytes(r->bytes_written).c_str(),
                static_cast<unsigned long long>(r->tensors_present), static_cast<unsigned long long>(r->tensors_small),
                format_bytes(r->bytes_small).c_str());
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
    std::printf("removed %llu entries (%s)\n", static_cast<unsigned long long>(r->entries), format_bytes(r->bytes).c_str());
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
  cmd->add_option("--listen", f.listen, "Public address, ADDR:PORT (e.g. 0.0.0.0:7070)");
  cmd->add_option("--secret-file", f.secret_file, "The cluster secret (see `tandem secret new`)");
  cmd->add_option("--devices", f.devices, "Comma-separated ggml devices (default: every GPU, else the CPU)");
  cmd->add_option("--cache-dir", f.cache_dir, "Weight cache folder (see `tandem worker seed`)");
  cmd->add_option("--cache-max-size", f.cache_max, "Bound the cache (e.g. 200GiB), evicting least recently used entries");
  cmd->add_option("--threads", f.threads, "CPU threads of the RPC server (0: one per physical core)")->capture_default_str();
  cmd->add_option("--name", f.name, "This worker's name in messages (default: the hostname)");
  cmd->add_option("--handshake-timeout-ms", f.handshake_ms, "Deadline of each handshake step")
      ->capture_default_str()->check(CLI::Range(100, 600000));
  cmd->add_flag("--no-cuda-graphs", f.no_graphs, "Run the RPC server with CUDA graphs off");
  cmd->add_flag("--sync-input-writes", f.sync_writes,
                "Let ggml write each step's inputs to the GPU one at a time, waiting on each (default: queued on a "
                "stream of their own; this is for measuring the difference)");
  cmd->add_flag("--no-private-netns", f.no_netns, "Do not isolate the RPC server in a private network namespace");
  add_log_format_option(cmd);
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
