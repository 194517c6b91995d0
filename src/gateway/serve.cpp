#include "gateway/serve.h"

#include <systemd/sd-daemon.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <mutex>
#include <cstdio>
#include <ctime>
#include <thread>

#include "common/paths.h"
#include "gateway/api_server.h"
#include "gateway/cluster_nodes.h"
#include "gateway/keys.h"
#include "gateway/status_page.h"
#include "gateway/supervisor.h"
#include "link/control.h"
#include "common/log.h"
#include "plan/model_info.h"
#include "plan/plan_config.h"
#include "plan/plan_report.h"
#include "plan/solver.h"
#include "worker/devices.h"

namespace tandem::gateway {
namespace {

void log(const std::string& line) { log::info("serve", line); }

// Replaces the solver's split with one layer count per node (head first). Each worker must offer
// one device; the head's share goes to its GPU when it has one, else to its CPU.
Status apply_explicit_layers(const std::vector<int>& layers, const std::vector<plan::NodeSpec>& nodes, uint32_t n_layer,
                             plan::Plan* p) {
  if (layers.size() != nodes.size()) {
    return Status::invalid_argument("--layers gives " + std::to_string(layers.size()) + " counts for " +
                                    std::to_string(nodes.size()) + " nodes (the head, then each worker)");
  }
  int total = 0;
  for (int n : layers) {
    if (n < 0) return Status::invalid_argument("--layers: counts must not be negative");
    total += n;
  }
  if (total != static_cast<int>(n_layer)) {
    return Status::invalid_argument("--layers covers " + std::to_string(total) + " layers, the model has " + std::to_string(n_layer));
  }
  plan::LlamaSplit split;
  const plan::NodeSpec& head = nodes[0];
  const bool head_gpu = !head.devices.empty() && head.devices[0].kind == plan::DeviceKind::gpu;
  if (head_gpu && head.devices.size() > 1) return Status::invalid_argument("--layers: the head has several GPUs; let the planner place them");
  if (!head_gpu) split.cpu_layers = layers[0];
  for (size_t i = 1; i < nodes.size(); ++i) {
    if (nodes[i].devices.size() != 1) return Status::invalid_argument("--layers: worker " + nodes[i].name + " offers several devices");
    if (!head_gpu && layers[i] == 0 && i + 1 == nodes.size()) {
      return Status::invalid_argument("--layers: the last worker must hold layers (it gets the output head)");
    }
    split.device_layers.push_back(layers[i]);
    split.rpc_nodes.push_back(nodes[i].name);
  }
  // A GPU head runs the last layers and the output head, after the workers (plan/solver.h).
  if (head_gpu) {
    split.use_local_gpus = true;
    split.workers_first = !split.rpc_nodes.empty();
    split.device_layers.insert(split.workers_first ? split.device_layers.end() : split.device_layers.begin(), layers[0]);
  }
  p->split = split;
  p->fits = true;
  return Status::ok();
}

std::string default_model_id(const std::string& path) {
  std::string name = path.substr(path.find_last_of('/') + 1);
  if (name.size() > 5 && name.compare(name.size() - 5, 5, ".gguf") == 0) name.resize(name.size() - 5);
  return name;
}

}  // namespace

std::string engine_flags_list() {
  std::string known;
  for (const std::string& k : kEngineFlags) known += (known.empty() ? "" : ", ") + k;
  return known;
}

Status check_engine_flags(const std::vector<std::string>& flags) {
  for (const std::string& f : flags) {
    if (std::find(kEngineFlags.begin(), kEngineFlags.end(), f) != kEngineFlags.end()) continue;
    return Status::invalid_argument("--engine-flag: '" + f + "' is not one serve passes on to the engine; these are: " +
                                    engine_flags_list());
  }
  return Status::ok();
}

std::vector<std::string> engine_flags_for(const plan::LlamaSplit& split, std::vector<std::string> flags) {
  const std::string keep = "--no-worker-embedding";
  if (!split.embedding_on_worker && std::find(flags.begin(), flags.end(), keep) == flags.end()) flags.push_back(keep);
  return flags;
}

Status run_serve(const ServeOptions& o, const std::atomic<bool>& stop) {
  const config::Config& c = o.config;
  TANDEM_RETURN_IF_ERROR(check_engine_flags(o.engine_flags));
  if (c.model.path.empty()) return Status::invalid_argument("no model: set [model] path in the config or pass --model");
  auto info = plan::read_model_info(c.model.path);
  if (!info.is_ok()) return info.status();
  auto listen = link::parse_endpoint(c.server.listen);
  if (!listen.is_ok()) return listen.status().with_context("[server] listen");

  std::unique_ptr<KeyStore> keys;
  if (o.insecure_no_auth) {
    log("WARNING: --insecure-no-auth: the API answers anyone who can reach " + c.server.listen + ", without a key");
  } else {
    if (c.server.keys_db.empty()) return Status::invalid_argument("no key database: set [server] keys_db or pass --keys-db (or --insecure-no-auth)");
    auto k = KeyStore::open(c.server.keys_db);
    if (!k.is_ok()) return k.status();
    keys = std::move(k.value());
  }
  std::optional<link::Secret> secret;
  if (!c.workers.empty()) {
    if (c.cluster.secret_file.empty()) return Status::invalid_argument("workers need [cluster] secret_file (or --secret-file)");
    auto s = link::load_secret(c.cluster.secret_file);
    if (!s.is_ok()) return s.status();
    secret = s.value();
  }
  if (listen->host != "127.0.0.1" && listen->host != "localhost" && listen->host != "::1") {
    log("listening beyond loopback on " + c.server.listen + (o.insecure_no_auth ? " WITHOUT authentication" : " (API keys required)"));
  }

  // /health answers from the first moment; generation waits for the supervisor.
  std::unique_ptr<Supervisor> supervisor;
  std::mutex sup_mutex;
  std::string phase = "starting";
  auto health = [&]() -> HealthReport {
    std::lock_guard<std::mutex> lock(sup_mutex);
    if (supervisor) return supervisor->health();
    HealthReport h;
    h.state = "starting";
    h.accepting = false;
    h.detail = {{"phase", phase}};
    return h;
  };
  ApiOptions ao;
  ao.host = listen->host;
  ao.port = listen->port;
  ao.model_id = o.model_id.empty() ? default_model_id(c.model.path) : o.model_id;
  ao.auth = !o.insecure_no_auth;
  ao.max_in_flight = o.max_in_flight;
  ao.status_page_public = c.server.status_page_public;
  std::atomic<Backend*> backend{nullptr};
  class Late : public Backend {  // forwards to the supervisor's backend once it exists
   public:
    std::atomic<Backend*>* target;
    Status submit(const GenerationRequest& r, EventSink s) override {
      Backend* b = target->load();
      return b ? b->submit(r, std::move(s)) : Status::unavailable("the cluster is starting");
    }
    void cancel(const std::string& id) override {
      if (Backend* b = target->load()) b->cancel(id);
    }
  } late;
  late.target = &backend;
  ApiServer api(ao, &late, keys.get(), health);
  TANDEM_RETURN_IF_ERROR(api.start());
  {
    // Until the plan exists the status page shows the configured nodes.
    nlohmann::json names = nlohmann::json::array({{{"name", c.cluster.head_name}, {"role", "head"}, {"devices", nlohmann::json::array()}}});
    for (const auto& w : c.workers) names.push_back({{"name", w.name}, {"role", "worker"}, {"address", w.address}, {"devices", nlohmann::json::array()}});
    api.set_status_info({{"nodes", names}, {"n_layer", info->n_layer}});
  }
  log("API on http://" + c.server.listen + " serving model '" + ao.model_id + "'");

  std::vector<plan::NodeSpec> nodes{head_node(c)};
  {
    std::lock_guard<std::mutex> lock(sup_mutex);
    phase = "asking the workers";
  }
  if (!c.workers.empty()) {
    auto w = query_workers(c, *secret, &stop);
    if (!w.is_ok()) return w.status();
    nodes.insert(nodes.end(), w->begin(), w->end());
  }
  auto options = plan::plan_options_from_config(c);
  if (!options.is_ok()) return options.status();
  auto p = plan::make_plan(info.value(), nodes, options.value());
  if (!p.is_ok()) return p.status();
  if (!o.layers.empty()) {
    TANDEM_RETURN_IF_ERROR(apply_explicit_layers(o.layers, nodes, info->n_layer, &p.value()));
  } else if (!p->fits) {
    std::string msg = "the model does not fit: " + p->failure;
    for (const auto& s : p->suggestions) msg += "; " + s;
    return Status::resource_exhausted(msg);
  }
  api.set_status_info(status_info_from_plan(p.value(), nodes, info->n_layer));
  std::string split;
  for (int n : p->split.device_layers) split += (split.empty() ? "" : ", ") + std::to_string(n);
  log("plan: " + std::to_string(p->split.cpu_layers) + " layer(s) on the head's CPU, offload devices [" + split +
      "], estimated decode " + std::to_string(static_cast<int>(p->tokens_per_second())) + " tok/s" +
      (o.layers.empty() ? "" : " (layers given by hand)"));
  if (p->split.rpc_nodes.size() < c.workers.size()) {
    log("the plan leaves " + std::to_string(c.workers.size() - p->split.rpc_nodes.size()) +
        " worker(s) without layers: the model fits on fewer nodes (use --layers to spread it anyway)");
  }

  SupervisorOptions so;
  so.engine_program = o.engine_program.empty() ? sibling_program("tandem-engine") : o.engine_program;
  so.model = c.model.path;
  so.model_id = ao.model_id;
  so.head_name = c.cluster.head_name;
  // Only the workers the plan gives layers to, in device order.
  for (const std::string& name : p->split.rpc_nodes) {
    for (const auto& w : c.workers) {
      if (w.name == name) so.workers.push_back({w.name, link::parse_endpoint(w.address).value()});
    }
  }
  so.secret = secret;
  so.cpu_layers = p->split.cpu_layers;
  so.device_layers = p->split.device_layers;
  so.workers_first = p->split.workers_first;
  so.context = static_cast<int>(c.model.context);
  so.parallel = static_cast<int>(c.model.parallel);
  so.threads = o.threads;
  so.cuda_graphs = o.cuda_graphs;
  so.engine_flags = engine_flags_for(p->split, o.engine_flags);
  so.canary_interval = std::chrono::seconds(o.canary_interval_s);
  so.log = log;
  so.progress_tty = ::isatty(STDERR_FILENO) != 0 && log::format() == log::Format::text;
  auto started = std::make_unique<Supervisor>(so);
  started->set_busy_probe([&api] { return api.in_flight(); });
  TANDEM_RETURN_IF_ERROR(started->start());
  {
    std::lock_guard<std::mutex> lock(sup_mutex);  // /health reads it from now on
    supervisor = std::move(started);
  }
  backend = supervisor->backend();

  uint64_t watchdog_usec = 0;
  const bool watchdog = sd_watchdog_enabled(0, &watchdog_usec) > 0;
  bool notified_ready = false;
  std::string last_state;
  while (!stop) {
    const std::string st = supervisor->state();
    if (st != last_state) {
      sd_notifyf(0, "STATUS=%s", st.c_str());
      last_state = st;
    }
    if (!notified_ready && st == "ready") {
      sd_notify(0, "READY=1");
      notified_ready = true;
    }
    if (watchdog) sd_notify(0, "WATCHDOG=1");
    std::this_thread::sleep_for(std::chrono::milliseconds(200));
  }

  // Drain: refuse new work, let what runs finish for a while, then end the rest.
  sd_notify(0, "STOPPING=1\nSTATUS=draining");
  api.stop_accepting();
  log("draining: " + std::to_string(api.in_flight()) + " request(s) in flight, up to " + std::to_string(o.drain_timeout_s) + " s");
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(o.drain_timeout_s);
  while (api.in_flight() > 0 && std::chrono::steady_clock::now() < deadline) std::this_thread::sleep_for(std::chrono::milliseconds(100));
  if (api.in_flight() > 0) log("drain deadline reached: ending " + std::to_string(api.in_flight()) + " request(s)");
  supervisor->stop();
  backend = nullptr;
  api.stop();
  log("stopped");
  return Status::ok();
}

}  // namespace tandem::gateway
