// What the supervisor asks the workers over their control channel before the engine starts:
// whether another head holds them, whether the memory the plan needs is free, and which weights
// they have cached.
#include "gateway/supervisor.h"

#include "common/cached_tensor.h"
#include "link/control.h"
#include "link/worker_status.h"

namespace tandem::gateway {

bool Supervisor::workers_free() {
  std::map<std::string, std::string> refused;
  for (size_t i = 0; i < options_.workers.size() && i < forwarders_.size(); ++i) {
    const WorkerLink& w = options_.workers[i];
    link::HandshakeOptions ho = link::default_handshake_options();
    ho.name = options_.head_name;
    auto st = link::control_request(w.address, *options_.secret, "status", ho);
    if (!st.is_ok()) continue;  // the heartbeat reports an unreachable worker
    const std::optional<link::WorkerHead> head = link::worker_status_from(st.value()).head;
    // With no engine running we hold no session: a head the worker names is another one, or,
    // under our own name, one on another machine (the worker replaces only our own stale one).
    if (!head || head->name == options_.head_name) continue;
    const auto or_unknown = [](const std::string& s) { return s.empty() ? std::string("?") : s; };
    refused[w.name] = "worker " + w.name + " (" + w.address.to_string() + ") serves another head, '" +
                      or_unknown(head->name) + "' (" + or_unknown(head->address) + ") since " +
                      or_unknown(head->since) + "; a worker serves one head at a time: waiting until it is free";
  }
  std::lock_guard<std::mutex> lock(mutex_);
  for (const auto& [name, why] : refused) {
    if (refused_.count(name) == 0) log(why);
  }
  for (const auto& [name, why] : refused_) {
    if (refused.count(name) == 0) log("worker " + name + " is free again");
  }
  refused_ = refused;
  if (refused.empty()) return true;
  last_error_ = refused.begin()->second;
  restart_at_ = Clock::now() + std::chrono::seconds(5);
  return false;
}

bool Supervisor::memory_free() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    if (!options_.memory_check || restarts_ == 0) return true;
  }
  const std::string short_of = options_.memory_check();
  std::lock_guard<std::mutex> lock(mutex_);
  if (short_of.empty()) {
    if (!memory_short_.empty()) log("the memory the plan needs is free again: restarting the engine");
    memory_short_.clear();
    return true;
  }
  // Logged when it starts and then once a minute; /health carries the latest figures.
  if (memory_short_.empty() || Clock::now() - memory_logged_ >= std::chrono::seconds(60)) {
    log("not restarting the engine yet: " + short_of);
    memory_logged_ = Clock::now();
  }
  memory_short_ = short_of;
  last_error_ = "waiting for memory before restarting the engine: " + short_of;
  restart_at_ = Clock::now() + std::chrono::seconds(5);
  return false;
}

std::vector<engine::WorkerCacheListing> Supervisor::cache_listings() {
  std::vector<engine::WorkerCacheListing> out;
  if (!options_.secret || options_.device_layers.empty()) return out;
  const std::string dir = socket_path_.substr(0, socket_path_.find_last_of('/'));
  for (size_t i = 0; i < options_.workers.size() && i < forwarders_.size(); ++i) {
    const WorkerLink& w = options_.workers[i];
    if (forwarders_[i]->state() != link::LinkState::up) continue;
    link::HandshakeOptions ho = link::default_handshake_options();
    ho.name = options_.head_name;
    auto r = link::control_request(w.address, *options_.secret, "cache", ho);
    CacheListing listing;
    if (r.is_ok()) {
      for (const auto& e : r->value("entries", nlohmann::json::array())) {
        if (!e.is_array() || e.size() != 2 || !e[0].is_string() || !e[1].is_number_unsigned()) continue;
        if (auto h = parse_hash_name(e[0].get<std::string>())) listing[*h] = e[1].get<uint64_t>();
      }
    } else {
      // An older worker or a passing failure: its weights take ggml's own path, slower but whole.
      log("worker " + w.name + ": no cache listing (" + r.status().message() + "); its weights are hashed on the head");
    }
    if (listing.empty()) continue;
    const std::string path = dir + "/worker-" + std::to_string(i) + ".cache";
    if (Status s = write_cache_listing(path, listing); !s.is_ok()) {
      log(s.message());
      continue;
    }
    log("worker " + w.name + ": " + std::to_string(listing.size()) + " cached weights listed");
    out.push_back({"127.0.0.1:" + std::to_string(forwarders_[i]->port()), path});
  }
  return out;
}

}  // namespace tandem::gateway
