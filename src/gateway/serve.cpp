#include "gateway/serve.h"

#include <systemd/sd-daemon.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <ctime>
#include <filesystem>
#include <mutex>
#include <thread>

#include "cluster/live_nodes.h"
#include "common/log.h"
#include "common/paths.h"
#include "datapath/switches.h"
#include "gateway/api_server.h"
#include "gateway/keys.h"
#include "gateway/restart_memory.h"
#include "gateway/status_page.h"
#include "gateway/supervisor.h"
#include "link/control.h"
#include "plan/model_info.h"
#include "plan/plan_config.h"
#include "plan/plan_report.h"
#include "plan/solver.h"

namespace tandem::gateway {
namespace {

void log(const std::string& line) { log::info("serve", line); }

std::string default_model_id(const std::string& path) {
  std::string name = path.substr(path.find_last_of('/') + 1);
  if (name.size() > 5 && name.compare(name.size() - 5, 5, ".gguf") == 0) name.resize(name.size() - 5);
  return name;
}

}  // namespace

std::string engine_flags_list() { return datapath::switch_flags_list(); }

Status check_engine_flags(const std::vector<std::string>& flags) {
  for (const std::string& f : flags) {
    if (datapath::find_data_path_switch(f) != nullptr) continue;
    return Status::invalid_argument("'" + f + "' is not an engine flag serve passes on to the engine; these are: " +
                                    engine_flags_list() + " ([model] engine_flags, --engine-flag)");
  }
  return Status::ok();
}

std::vector<std::string> engine_flags_for(const plan::LlamaSplit& split, std::vector<std::string> flags) {
  const std::string keep = "--no-worker-embedding";
  if (!split.embedding_on_worker && std::find(flags.begin(), flags.end(), keep) == flags.end()) flags.push_back(keep);
  return flags;
}

namespace {

// What /health and the status page say while serve asks the workers, before there is a plan:
// each worker waited for, and why it has not answered.
class StartupTracker {
 public:
  explicit StartupTracker(const config::Config& c) {
    for (const auto& w : c.workers)
      workers_.push_back({{"name", w.name}, {"address", w.address}, {"state", "waiting"}, {"last_error", ""}});
  }
  void set_phase(const std::string& phase) {
    std::lock_guard<std::mutex> lock(mutex_);
    phase_ = phase;
  }
  void attempt(const std::string& name, const Status& outcome) {
    std::lock_guard<std::mutex> lock(mutex_);
    for (auto& w : workers_) {
      if (w["name"] != name) continue;
      w["state"] = outcome.is_ok() ? "answered" : "waiting";
      w["last_error"] = outcome.is_ok() ? "" : outcome.message();
    }
    if (!outcome.is_ok()) phase_ = "waiting for worker " + name;
  }
  HealthReport report() const {
    std::lock_guard<std::mutex> lock(mutex_);
    HealthReport h;
    h.state = ServeState::starting;
    h.accepting = false;
    std::string last_error;
    for (const auto& w : workers_) {
      if (last_error.empty()) last_error = w["last_error"].get<std::string>();
    }
    h.detail = {{"phase", phase_}, {"nodes", workers_}, {"last_error", last_error}};
    return h;
  }

 private:
  mutable std::mutex mutex_;
  std::string phase_ = "starting";                    // guarded by mutex_
  nlohmann::json workers_ = nlohmann::json::array();  // guarded by mutex_
};

// What must hold before anything starts: the flags serve passes on, the prompt cache's folder, and
// a model with weights. Returns the model's description.
Result<plan::ModelInfo> servable_model(const config::Config& c) {
  TANDEM_RETURN_IF_ERROR(check_engine_flags(c.model.engine_flags));
  if (!c.model.prompt_cache_dir.empty() && c.model.prompt_cache > 0) {
    // The engine would fail on it at every restart: a folder that cannot be made is the config's.
    std::error_code ec;
    std::filesystem::create_directories(c.model.prompt_cache_dir, ec);
    if (ec)
      return Status::invalid_argument("[model] prompt_cache_dir " + c.model.prompt_cache_dir + ": " + ec.message());
  }
  if (c.model.speculative == "draft") {
    if (c.model.draft_model.empty())
      return Status::invalid_argument("[model] speculative = \"draft\" needs draft_model (or --draft-model)");
    auto draft = plan::read_model_info(c.model.draft_model);
    if (!draft.is_ok()) return Status::invalid_argument("[model] draft_model: " + draft.status().message());
  }
  if (c.model.path.empty()) return Status::invalid_argument("no model: set [model] path in the config or pass --model");
  auto info = plan::read_model_info(c.model.path);
  if (!info.is_ok()) return info.status();
  if (info->header_only) {
    return Status::invalid_argument(c.model.path +
                                    ": a header-only model (written by `tandem synth --header-only`) has a tensor "
                                    "table but no weights: it can be planned (`tandem plan`), not served");
  }
  return info;
}

// The API keys; none (and a warning) with --insecure-no-auth.
Result<std::unique_ptr<KeyStore>> open_keys(const config::Config& c) {
  if (c.server.insecure_no_auth) {
    log("WARNING: --insecure-no-auth: the API answers anyone who can reach " + c.server.listen + ", without a key");
    return std::unique_ptr<KeyStore>();
  }
  if (c.server.keys_db.empty())
    return Status::invalid_argument("no key database: set [server] keys_db or pass --keys-db (or --insecure-no-auth)");
  auto k = KeyStore::open(c.server.keys_db);
  if (!k.is_ok()) return Status::invalid_argument(k.status().message());
  return std::move(k.value());
}

// The cluster secret; none without workers.
Result<std::optional<link::Secret>> cluster_secret(const config::Config& c) {
  if (c.workers.empty()) return std::optional<link::Secret>();
  if (c.cluster.secret_file.empty())
    return Status::invalid_argument("workers need [cluster] secret_file (or --secret-file)");
  auto s = link::load_secret(c.cluster.secret_file);
  if (!s.is_ok()) return Status::invalid_argument(s.status().message());
  return std::optional<link::Secret>(s.value());
}

ApiOptions api_options(const config::Config& c, const link::Endpoint& listen) {
  ApiOptions ao;
  ao.host = listen.host;
  ao.port = listen.port;
  ao.model_id = c.server.model_id.empty() ? default_model_id(c.model.path) : c.server.model_id;
  ao.auth = !c.server.insecure_no_auth;
  ao.max_in_flight = c.server.max_in_flight;
  ao.max_tokens = c.server.max_tokens;
  ao.status_page_public = c.server.status_page_public;
  ao.cors_origins = c.server.cors_origins;
  return ao;
}

// Forwards to the supervisor's backend once it exists; until then every call is `unavailable`.
class LateBackend : public Backend {
 public:
  void set(Backend* b) { target_ = b; }
  Status submit(const GenerationRequest& r, EventSink s) override {
    Backend* b = target_.load();
    return b ? b->submit(r, std::move(s)) : Status::unavailable("the cluster is starting");
  }
  void cancel(const std::string& id) override {
    if (Backend* b = target_.load()) b->cancel(id);
  }
  Result<std::vector<Token>> tokenize(const std::string& text, bool add_special) override {
    Backend* b = target_.load();
    return b ? b->tokenize(text, add_special)
             : Result<std::vector<Token>>(Status::unavailable("the cluster is starting"));
  }
  Result<std::string> detokenize(const std::vector<int32_t>& tokens) override {
    Backend* b = target_.load();
    return b ? b->detokenize(tokens) : Result<std::string>(Status::unavailable("the cluster is starting"));
  }
  Result<Rendered> render(Endpoint e, const nlohmann::json& body) override {
    Backend* b = target_.load();
    return b ? b->render(e, body) : Result<Rendered>(Status::unavailable("the cluster is starting"));
  }

 private:
  std::atomic<Backend*> target_{nullptr};
};

// Until the plan exists the status page shows the configured nodes.
nlohmann::json configured_nodes(const config::Config& c, uint32_t n_layer) {
  nlohmann::json names =
      nlohmann::json::array({{{"name", c.cluster.head_name}, {"role", "head"}, {"devices", nlohmann::json::array()}}});
  for (const auto& w : c.workers)
    names.push_back(
        {{"name", w.name}, {"role", "worker"}, {"address", w.address}, {"devices", nlohmann::json::array()}});
  return {{"nodes", names}, {"n_layer", n_layer}};
}

// The head and every worker's devices, waiting for those that do not answer yet.
Result<std::vector<plan::NodeSpec>> cluster_nodes(const config::Config& c, const std::optional<link::Secret>& secret,
                                                  const std::atomic<bool>& stop, StartupTracker& startup) {
  std::vector<plan::NodeSpec> nodes{cluster::head_node(c)};
  startup.set_phase("asking the workers");
  if (c.workers.empty()) return nodes;
  auto w = cluster::query_workers(c, *secret, &stop,
                                  [&startup](const std::string& name, const Status& s) { startup.attempt(name, s); });
  if (!w.is_ok()) return w.status();
  nodes.insert(nodes.end(), w->begin(), w->end());
  return nodes;
}

Result<plan::Plan> plan_that_fits(const plan::ModelInfo& info, const std::vector<plan::NodeSpec>& nodes,
                                  const plan::PlanOptions& options) {
  auto p = plan::make_plan(info, nodes, options);
  if (!p.is_ok()) return p.status();
  if (!p->fits) {
    std::string msg = "the model does not fit: " + p->failure;
    for (const auto& s : p->suggestions) msg += "; " + s;
    return Status::resource_exhausted(msg);
  }
  return p;
}

void log_plan(const plan::Plan& p, const std::vector<plan::NodeSpec>& nodes, const plan::PlanOptions& options,
              const config::Config& c) {
  std::string names;
  for (const auto& n : nodes) names += (names.empty() ? "" : ", ") + n.name;
  if (p.parallelism == plan::Parallelism::ffn_tensor) {
    std::string runners;
    for (const auto& n : nodes) {
      const bool runs = std::any_of(p.devices.begin(), p.devices.end(), [&](const plan::DeviceAssignment& d) {
        return d.node == n.name && d.n_layers > 0;
      });
      if (runs) runners += (runners.empty() ? "" : ", ") + n.name;
    }
    log("plan: every layer on " + runners + " at once, the FFNs split across them (parallelism ffn-tensor), " +
        std::to_string(p.exchanges_per_token) + " swaps per token; bandwidth bound " +
        std::to_string(static_cast<int>(p.tokens_per_second())) + " tok/s with the swaps at " +
        std::to_string(options.exchange_seconds * 1e3).substr(0, 5) + " ms");
  } else {
    log("plan: layers \"" + plan::layer_shares(p) + "\" on " + names + ", bandwidth bound " +
        std::to_string(static_cast<int>(p.tokens_per_second())) + " tok/s" +
        (c.model.layers.empty() ? "" : " (the split given by hand)"));
  }
  if (p.split.rpc_nodes.size() < c.workers.size()) {
    log("the plan leaves " + std::to_string(c.workers.size() - p.split.rpc_nodes.size()) +
        " worker(s) without layers: the model fits on fewer nodes (use --layers to spread it anyway)");
  }
}

SupervisorOptions supervisor_options(const ServeOptions& o, const plan::Plan& p,
                                     const std::optional<link::Secret>& secret, const std::string& model_id) {
  const config::Config& c = o.config;
  SupervisorOptions so;
  so.engine_program = o.engine_program.empty() ? sibling_program("tandem-engine") : o.engine_program;
  so.model = c.model.path;
  so.model_id = model_id;
  so.head_name = c.cluster.head_name;
  // Only the workers the plan gives layers to, in device order.
  for (const std::string& name : p.split.rpc_nodes) {
    for (const auto& w : c.workers) {
      if (w.name == name) so.workers.push_back({w.name, link::parse_endpoint(w.address).value()});
    }
  }
  so.secret = secret;
  so.cpu_layers = p.split.cpu_layers;
  so.device_layers = p.split.device_layers;
  so.workers_first = p.split.workers_first;
  so.ffn_tensor = p.parallelism == plan::Parallelism::ffn_tensor;
  so.context = static_cast<int>(c.model.context);
  so.parallel = static_cast<int>(c.model.parallel);
  so.threads = c.model.threads;
  so.cuda_graphs = c.model.cuda_graphs;
  so.mmap = c.model.mmap;
  so.prompt_cache = c.model.prompt_cache;
  so.prompt_cache_dir = c.model.prompt_cache_dir;
  so.prompt_cache_dir_size = c.model.prompt_cache_dir_size;
  so.speculative = c.model.speculative;
  so.draft_model = c.model.draft_model;
  so.draft_max = c.model.draft_max;
  so.kv_type = c.model.kv_type;
  so.spec_synth_len = c.model.spec_synth_len;
  so.backtraces = c.cluster.backtraces;
  so.engine_flags = engine_flags_for(p.split, c.model.engine_flags);
  so.canary_interval = std::chrono::seconds(c.server.canary_interval_s);
  so.log = log;
  // Before a restart, the memory the plan counted on must be free again on every node it uses.
  so.memory_check = [c, secret, needs = memory_needs(p)] {
    return check_memory(needs, memory_now(c, secret ? &*secret : nullptr, needs));
  };
  so.progress_tty = ::isatty(STDERR_FILENO) != 0 && log::format() == log::Format::text;
  return so;
}

// Tells systemd the state as it changes (READY once it is ready) and feeds its watchdog.
void notify_until_stopped(Supervisor& supervisor, const std::atomic<bool>& stop) {
  uint64_t watchdog_usec = 0;
  const bool watchdog = sd_watchdog_enabled(0, &watchdog_usec) > 0;
  bool notified_ready = false;
  std::string last_state;
  while (!stop) {
    const std::string st = supervisor.state();
    if (st != last_state) {
      sd_notifyf(0, "STATUS=%s", st.c_str());
      last_state = st;
    }
    if (!notified_ready && st == serve_state_name(ServeState::ready)) {
      sd_notify(0, "READY=1");
      notified_ready = true;
    }
    if (watchdog) sd_notify(0, "WATCHDOG=1");
    std::this_thread::sleep_for(std::chrono::milliseconds(200));
  }
}

// Refuses new work and lets what runs finish for a while; what is left ends with the supervisor.
void drain(ApiServer& api, int timeout_s) {
  sd_notify(0, "STOPPING=1\nSTATUS=draining");
  api.stop_accepting();
  log("draining: " + std::to_string(api.in_flight()) + " request(s) in flight, up to " + std::to_string(timeout_s) +
      " s");
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(timeout_s);
  while (api.in_flight() > 0 && std::chrono::steady_clock::now() < deadline)
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  if (api.in_flight() > 0) log("drain deadline reached: ending " + std::to_string(api.in_flight()) + " request(s)");
}

}  // namespace

Status run_serve(const ServeOptions& o, const std::atomic<bool>& stop) {
  const config::Config& c = o.config;
  auto info = servable_model(c);
  if (!info.is_ok()) return info.status();
  auto options = plan::plan_options_from_config(c);
  if (!options.is_ok()) return options.status();
  auto listen = link::parse_endpoint(c.server.listen);
  if (!listen.is_ok()) return listen.status().with_context("[server] listen");
  auto keys = open_keys(c);
  if (!keys.is_ok()) return keys.status();
  auto secret = cluster_secret(c);
  if (!secret.is_ok()) return secret.status();
  if (listen->host != "127.0.0.1" && listen->host != "localhost" && listen->host != "::1") {
    log("listening beyond loopback on " + c.server.listen +
        (c.server.insecure_no_auth ? " WITHOUT authentication" : " (API keys required)"));
  }

  // /health answers from the first moment; generation waits for the supervisor.
  std::unique_ptr<Supervisor> supervisor;
  std::mutex sup_mutex;
  StartupTracker startup(c);
  auto health = [&]() -> HealthReport {
    std::lock_guard<std::mutex> lock(sup_mutex);
    return supervisor ? supervisor->health() : startup.report();
  };
  const ApiOptions ao = api_options(c, listen.value());
  LateBackend late;
  ApiServer api(ao, &late, keys->get(), health);
  TANDEM_RETURN_IF_ERROR(api.start());
  api.set_status_info(configured_nodes(c, info->n_layer));
  log("API on http://" + c.server.listen + " serving model '" + ao.model_id + "'");

  auto nodes = cluster_nodes(c, secret.value(), stop, startup);
  // A stop while waiting for a worker is a clean end, not a failure.
  if (!nodes.is_ok()) return stop ? Status::ok() : nodes.status();
  startup.set_phase("planning");
  auto p = plan_that_fits(info.value(), nodes.value(), options.value());
  if (!p.is_ok()) return p.status();
  // The placement as `tandem plan -c --json` prints it, so that the two can be compared.
  nlohmann::json status = status_info_from_plan(p.value(), nodes.value(), info->n_layer);
  status["placement"] = nlohmann::json::parse(plan::plan_to_json(p.value(), info.value(), options.value(), -1));
  api.set_status_info(status);
  log_plan(p.value(), nodes.value(), options.value(), c);

  auto started = std::make_unique<Supervisor>(supervisor_options(o, p.value(), secret.value(), ao.model_id));
  started->set_busy_probe([&api] { return api.in_flight(); });
  TANDEM_RETURN_IF_ERROR(started->start());
  {
    std::lock_guard<std::mutex> lock(sup_mutex);  // /health reads it from now on
    supervisor = std::move(started);
  }
  late.set(supervisor->backend());
  notify_until_stopped(*supervisor, stop);
  drain(api, c.server.drain_timeout_s);
  supervisor->stop();
  late.set(nullptr);
  api.stop();
  log("stopped");
  return Status::ok();
}

}  // namespace tandem::gateway
