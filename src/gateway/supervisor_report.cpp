#include "gateway/supervisor_report.h"

#include <map>

#include "gateway/prometheus.h"

namespace tandem::gateway {
namespace {

// Bytes of prompt-cache states one node holds in either tier.
struct NodeCache {
  std::string node;
  uint64_t memory = 0, disk = 0;
};

// The statistics of the running engine; none without one.
engine::PromptCacheStats prompt_cache(const SupervisorSnapshot& s) {
  return s.engine_pid > 0 ? s.engine.prompt_cache : engine::PromptCacheStats{};
}

uint64_t find(const std::map<std::string, uint64_t>& m, const std::string& k) {
  const auto it = m.find(k);
  return it != m.end() ? it->second : uint64_t{0};
}

// The head first, then each worker by the endpoint the engine names it by.
std::vector<NodeCache> node_caches(const SupervisorSnapshot& s) {
  const engine::PromptCacheStats c = prompt_cache(s);
  std::vector<NodeCache> out = {{s.head_name, c.bytes, c.disk_bytes}};
  for (const WorkerSnapshot& w : s.workers)
    out.push_back({w.name, find(c.per_worker, w.endpoint), find(c.per_worker_disk, w.endpoint)});
  return out;
}

nlohmann::json health_nodes(const SupervisorSnapshot& s) {
  nlohmann::json nodes = nlohmann::json::array();
  const engine::PromptCacheStats c = prompt_cache(s);
  for (const WorkerSnapshot& w : s.workers) {
    nodes.push_back({{"name", w.name},
                     {"address", w.address},
                     {"state", w.refused.empty() ? link::link_state_name(w.link.state) : "refused"},
                     {"bytes_to_worker", w.link.bytes_to_worker},
                     {"bytes_from_worker", w.link.bytes_from_worker},
                     {"prompt_cache_bytes", find(c.per_worker, w.endpoint)},
                     {"prompt_cache_disk_bytes", find(c.per_worker_disk, w.endpoint)},
                     {"last_error", w.refused.empty() ? w.link.last_error : w.refused}});
  }
  return nodes;
}

// /health's prompt_cache: the table's fields (engine/protocol.h) and what each node holds.
nlohmann::json health_prompt_cache(const SupervisorSnapshot& s) {
  nlohmann::json memory = nlohmann::json::object(), disk = nlohmann::json::object();
  for (const NodeCache& n : node_caches(s)) {
    memory[n.node] = n.memory;
    disk[n.node] = n.disk;
  }
  nlohmann::json j = {{"bytes", memory}, {"disk_bytes", disk}};
  const engine::PromptCacheStats c = prompt_cache(s);
  for (const engine::PromptCacheField& f : engine::kPromptCacheFields) {
    if (!f.health.empty()) j[std::string(f.health)] = c.*f.member;
  }
  return j;
}

nlohmann::json health_engine(const SupervisorSnapshot& s) {
  const engine::EngineStatus& e = s.engine;
  return {{"state", std::string(engine::engine_state_name(s.engine_pid > 0 ? e.state : engine::EngineState::stopped))},
          {"pid", s.engine_pid},
          {"restarts", s.restarts},
          {"slots_busy", e.slots_busy},
          {"slots_total", e.slots_total},
          {"waiting", e.waiting},
          {"tokens_per_s", e.tokens_per_s}};
}

nlohmann::json health_load(const engine::LoadProgress& l) {
  nlohmann::json load = {
      {"fraction", l.fraction}, {"bytes", l.bytes}, {"total_bytes", l.total_bytes}, {"rate", l.rate}};
  if (l.rate > 0 && l.total_bytes >= l.bytes) load["eta_s"] = static_cast<double>(l.total_bytes - l.bytes) / l.rate;
  return load;
}

std::vector<prometheus::Sample> one(double v) { return {{"", v}}; }

// The links' and nodes' families.
std::string link_families(const SupervisorSnapshot& s) {
  std::vector<prometheus::Sample> link_bytes, node_up;
  for (const WorkerSnapshot& w : s.workers) {
    const std::string worker = "worker=\"" + prometheus::label(w.name) + "\"";
    link_bytes.push_back({worker + ",direction=\"to_worker\"", static_cast<double>(w.link.bytes_to_worker)});
    link_bytes.push_back({worker + ",direction=\"from_worker\"", static_cast<double>(w.link.bytes_from_worker)});
    node_up.push_back({"node=\"" + prometheus::label(w.name) + "\"", w.link.state == link::LinkState::up ? 1.0 : 0.0});
  }
  return prometheus::family("tandem_link_bytes_total", "counter", "RPC bytes through each worker's link, by direction.",
                            link_bytes) +
         prometheus::family("tandem_node_up", "gauge", "1 while the worker's heartbeat answers.", node_up);
}

// The engine's families: 0 for its slots, queue and speed while none runs.
std::string engine_families(const SupervisorSnapshot& s) {
  const bool running = s.engine_pid > 0;
  const engine::EngineStatus& e = s.engine;
  return prometheus::family("tandem_engine_restarts_total", "counter", "Engine restarts since the gateway started.",
                            one(s.restarts)) +
         prometheus::family("tandem_slots_busy", "gauge", "Engine slots generating now.",
                            one(running ? e.slots_busy : 0)) +
         prometheus::family("tandem_slots_capacity", "gauge",
                            "Engine slots (parallel sequences) of the running engine.",
                            one(running ? e.slots_total : 0)) +
         prometheus::family("tandem_queue_depth", "gauge", "Requests the engine holds waiting for a free slot.",
                            one(running ? e.waiting : 0)) +
         prometheus::family("tandem_engine_tokens_per_second", "gauge",
                            "Tokens generated per second over the last few seconds.",
                            one(running ? e.tokens_per_s : 0.0));
}

// The prompt cache's families: what each node holds, then the table's (engine/protocol.h): the
// bounds and the counts since the engine started (they restart with it, as Prometheus counters may).
std::string prompt_cache_families(const SupervisorSnapshot& s) {
  std::vector<prometheus::Sample> held;
  for (const NodeCache& n : node_caches(s)) {
    const std::string label = "node=\"" + prometheus::label(n.node) + "\",tier=";
    held.push_back({label + "\"memory\"", static_cast<double>(n.memory)});
    held.push_back({label + "\"disk\"", static_cast<double>(n.disk)});
  }
  std::string out = prometheus::family("tandem_prompt_cache_bytes", "gauge",
                                       "Bytes of prompt-cache states each node holds, in memory and on disk.", held);
  const engine::PromptCacheStats c = prompt_cache(s);
  for (const engine::PromptCacheField& f : engine::kPromptCacheFields) {
    if (f.metric.empty()) continue;
    out += prometheus::family(std::string(f.metric), std::string(f.metric_type).c_str(), std::string(f.metric_help),
                              one(static_cast<double>(c.*f.member)));
  }
  return out;
}

// /health's speculative: the mode, the tables' counters and times, the mean tokens a checking step
// gives (1 + accepted ÷ steps; 1 without drafts), and a benchmark's synthetic acceptance when on.
nlohmann::json health_speculation(const engine::EngineStatus& e) {
  nlohmann::json j = {{"mode", e.speculative}};
  const auto& st = e.speculation;
  for (const engine::SpeculationField& f : engine::kSpeculationFields) j[std::string(f.name)] = st.*f.member;
  for (const engine::SpeculationTime& f : engine::kSpeculationTimes) j[std::string(f.name)] = st.*f.member;
  j["acceptance_length"] = st.steps > 0 ? 1.0 + static_cast<double>(st.accepted) / static_cast<double>(st.steps) : 1.0;
  if (st.synth_len > 0) j["synthetic_length"] = st.synth_len;
  return j;
}

std::string speculation_families(const SupervisorSnapshot& s) {
  std::string out;
  for (const engine::SpeculationField& f : engine::kSpeculationFields) {
    out += prometheus::family(std::string(f.metric), "counter", std::string(f.metric_help),
                              one(static_cast<double>(s.engine.speculation.*f.member)));
  }
  for (const engine::SpeculationTime& f : engine::kSpeculationTimes) {
    out += prometheus::family(std::string(f.metric), "counter", std::string(f.metric_help),
                              one(s.engine.speculation.*f.member));
  }
  return out;
}

}  // namespace

std::string supervisor_metric_families(const SupervisorSnapshot& s) {
  return link_families(s) + engine_families(s) + prompt_cache_families(s) + speculation_families(s);
}

HealthReport health_report(const SupervisorSnapshot& s) {
  HealthReport h;
  h.state = s.state;
  if (s.engine_connected && s.engine.state == engine::EngineState::loading)
    h.state = s.restarts > 0 ? ServeState::recovering : ServeState::loading;
  h.accepting = s.state == ServeState::ready;
  h.retry_after_s = s.state == ServeState::degraded ? 10 : 5;
  h.detail = {{"model", s.model_id},
              {"engine", health_engine(s)},
              {"prompt_cache", health_prompt_cache(s)},
              {"speculative", health_speculation(s.engine)},
              {"load", health_load(s.engine.load)},
              {"nodes", health_nodes(s)},
              {"last_error", s.last_error}};
  h.extra_metrics = supervisor_metric_families(s);
  return h;
}

}  // namespace tandem::gateway
