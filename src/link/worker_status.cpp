#include "link/worker_status.h"

namespace tandem::link {
namespace {

using json = nlohmann::json;

const json& field(const json& j, const char* key) {
  static const json kNull;
  if (!j.is_object()) return kNull;
  const auto it = j.find(key);
  return it == j.end() ? kNull : *it;
}

std::string text(const json& j, const char* key, const std::string& fallback = "") {
  const json& v = field(j, key);
  return v.is_string() ? v.get<std::string>() : fallback;
}

bool flag(const json& j, const char* key, bool fallback) {
  const json& v = field(j, key);
  return v.is_boolean() ? v.get<bool>() : fallback;
}

template <typename T>
T number(const json& j, const char* key) {
  const json& v = field(j, key);
  return v.is_number() ? v.get<T>() : T{};
}

}  // namespace

json worker_status_json(const WorkerStatus& s) {
  json devices = json::array();
  for (const WorkerDevice& d : s.devices) {
    devices.push_back({{"name", d.name},
                       {"description", d.description},
                       {"type", d.type},
                       {"free_bytes", d.free_bytes},
                       {"total_bytes", d.total_bytes},
                       {"shares_host_memory", d.shares_host_memory}});
  }
  json holders = json::array();
  for (const WorkerMemoryHolder& h : s.memory_holders)
    holders.push_back({{"pid", h.pid}, {"name", h.name}, {"bytes", h.bytes}});
  const WorkerRpcServer& r = s.rpc_server;
  json j;
  j["name"] = s.name;
  j["version"] = s.version;
  j["llama_tag"] = s.llama_tag;
  j["llama_commit"] = s.llama_commit;
  j["protocol"] = s.protocol;
  j["uptime_s"] = s.uptime_s;
  j["devices"] = devices;
  j["memory_holders"] = holders;
  j["rpc_server"] = {{"state", r.state},
                     {"pid", r.pid},
                     {"restarts", r.restarts},
                     {"last_exit", r.last_exit},
                     {"isolated", r.isolated},
                     {"isolation", r.isolation},
                     {"port", r.port},
                     {"cuda_graphs", r.cuda_graphs},
                     {"async_input_writes", r.async_input_writes}};
  j["bytes"] = {{"from_head", s.bytes_from_head}, {"to_head", s.bytes_to_head}};
  j["connections"] = {{"accepted", s.connections_accepted}, {"refused", s.connections_refused}};
  j["cache"] = {
      {"dir", s.cache_dir}, {"entries", s.cache_entries}, {"bytes", s.cache_bytes}, {"max_bytes", s.cache_max_bytes}};
  j["head"] = s.head ? json{{"name", s.head->name}, {"address", s.head->address}, {"since", s.head->since}} : json();
  j["last_event"] = s.last_event;
  return j;
}

WorkerStatus worker_status_from(const json& j) {
  WorkerStatus s;
  s.name = text(j, "name");
  s.version = text(j, "version");
  s.llama_tag = text(j, "llama_tag");
  s.llama_commit = text(j, "llama_commit");
  s.protocol = number<int>(j, "protocol");
  s.uptime_s = number<double>(j, "uptime_s");
  for (const json& d : field(j, "devices").is_array() ? field(j, "devices") : json::array()) {
    WorkerDevice w;
    w.name = text(d, "name");
    w.description = text(d, "description");
    w.type = text(d, "type");
    w.free_bytes = number<uint64_t>(d, "free_bytes");
    w.total_bytes = number<uint64_t>(d, "total_bytes");
    w.shares_host_memory = flag(d, "shares_host_memory", w.type == "igpu");
    s.devices.push_back(w);
  }
  for (const json& h : field(j, "memory_holders").is_array() ? field(j, "memory_holders") : json::array()) {
    if (h.is_object())
      s.memory_holders.push_back({number<int>(h, "pid"), text(h, "name"), number<uint64_t>(h, "bytes")});
  }
  const json& r = field(j, "rpc_server");
  s.rpc_server = {text(r, "state"),
                  number<int>(r, "pid"),
                  number<uint64_t>(r, "restarts"),
                  text(r, "last_exit"),
                  flag(r, "isolated", false),
                  text(r, "isolation"),
                  number<uint16_t>(r, "port"),
                  flag(r, "cuda_graphs", true),
                  flag(r, "async_input_writes", true)};
  s.bytes_from_head = number<uint64_t>(field(j, "bytes"), "from_head");
  s.bytes_to_head = number<uint64_t>(field(j, "bytes"), "to_head");
  s.connections_accepted = number<uint64_t>(field(j, "connections"), "accepted");
  s.connections_refused = number<uint64_t>(field(j, "connections"), "refused");
  const json& cache = field(j, "cache");
  s.cache_dir = text(cache, "dir");
  s.cache_entries = number<uint64_t>(cache, "entries");
  s.cache_bytes = number<uint64_t>(cache, "bytes");
  s.cache_max_bytes = number<uint64_t>(cache, "max_bytes");
  if (const json& h = field(j, "head"); h.is_object())
    s.head = WorkerHead{text(h, "name"), text(h, "address"), text(h, "since")};
  s.last_event = text(j, "last_event");
  return s;
}

}  // namespace tandem::link
