#include "integration/cluster.h"

#include <httplib.h>
#include <signal.h>

#include <algorithm>
#include <chrono>
#include <fstream>
#include <nlohmann/json.hpp>
#include <thread>

namespace tandem::testing {

LocalCluster::LocalCluster(const ScratchDir& dir, int workers, const std::vector<std::string>& extra,
                           const std::vector<std::string>& worker_args, const std::string& synth_args)
    : dir_(dir), worker_args_(worker_args) {
  ClusterFiles files = make_cluster_files(dir, "test", synth_args);
  secret_ = files.secret;
  model_ = files.model;
  key_ = files.key;
  for (int i = 0; i < workers; ++i) {
    worker_ports_.push_back(free_port());
    workers_.emplace_back();
    start_worker(i);
  }
  port_ = free_port();
  std::vector<std::string> argv = {TANDEM_BINARY,
                                   "serve",
                                   "-m",
                                   model_,
                                   "--secret-file",
                                   secret_,
                                   "--keys-db",
                                   dir.file("keys.db"),
                                   "--listen",
                                   "127.0.0.1:" + std::to_string(port_),
                                   "--model-id",
                                   "tiny",
                                   "-t",
                                   "1"};
  // 512 tokens unless the caller sets its own (serve refuses a flag given twice).
  if (std::find(extra.begin(), extra.end(), "--context") == extra.end()) argv.insert(argv.end(), {"--context", "512"});
  if (std::find(extra.begin(), extra.end(), "--parallel") == extra.end()) argv.insert(argv.end(), {"--parallel", "2"});
  std::string layers = std::to_string(4 - workers * (workers == 1 ? 2 : 1));  // tiny has 4 layers
  for (int i = 0; i < workers; ++i) {
    argv.push_back("--worker");
    argv.push_back("w" + std::to_string(i) + "=127.0.0.1:" + std::to_string(worker_ports_[i]));
    layers += workers == 1 ? ",2" : ",1";
  }
  if (workers > 0 && std::find(extra.begin(), extra.end(), "--parallelism") == extra.end() &&
      std::find(extra.begin(), extra.end(), "--layers") == extra.end())
    argv.insert(argv.end(), {"--layers", layers});
  argv.insert(argv.end(), extra.begin(), extra.end());
  gateway_ = std::make_unique<ChildProcess>(argv, dir.file("serve.log"));
}

void LocalCluster::start_worker(int i) {
  std::vector<std::string> argv = {
      TANDEM_BINARY,   "worker", "--listen", "127.0.0.1:" + std::to_string(worker_ports_[i]),
      "--secret-file", secret_,  "--name",   "w" + std::to_string(i),
      "--threads",     "1"};
  for (std::string a : worker_args_) {
    if (const size_t at = a.find("{i}"); at != std::string::npos) a.replace(at, 3, std::to_string(i));
    argv.push_back(a);
  }
  workers_[i] = std::make_unique<ChildProcess>(argv, dir_.file("worker" + std::to_string(i) + ".log"));
  wait_for_port(worker_ports_[i], 10000);
}

void LocalCluster::kill_worker(int i, int signal) { workers_[i]->signal(signal); }

void LocalCluster::restart_worker(int i) {
  workers_[i]->wait(5000);
  start_worker(i);
}

std::string LocalCluster::wait_state(const std::string& want, int timeout_ms) {
  std::string seen;
  for (int waited = 0; waited <= timeout_ms && seen != want; waited += 100) {
    seen = state();
    if (seen != want) std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  return seen;
}

std::string LocalCluster::state() {
  httplib::Client c("127.0.0.1", port_);
  c.set_connection_timeout(1, 0);
  c.set_read_timeout(2, 0);
  auto r = c.Get("/health");
  if (!r) return "";
  auto j = nlohmann::json::parse(r->body, nullptr, false);
  return j.is_object() ? j.value("state", "") : "";
}

bool LocalCluster::wait_ready(int timeout_ms) {
  const auto end = std::chrono::steady_clock::now() + std::chrono::milliseconds(timeout_ms);
  while (std::chrono::steady_clock::now() < end) {
    if (state() == "ready") return true;
    if (!gateway_->running()) return false;
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  return false;
}

bool LocalCluster::wait_in_flight(int n, int timeout_ms) {
  httplib::Client c("127.0.0.1", port_);
  c.set_connection_timeout(1, 0);
  c.set_read_timeout(2, 0);
  const auto end = std::chrono::steady_clock::now() + std::chrono::milliseconds(timeout_ms);
  while (std::chrono::steady_clock::now() < end) {
    auto r = c.Get("/health", {{"Authorization", "Bearer " + key_}});  // the details need a key
    const auto j = r ? nlohmann::json::parse(r->body, nullptr, false) : nlohmann::json();
    if (j.is_object() && j.value("requests_in_flight", 0) >= n) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  return false;
}

AsyncPost::AsyncPost(int port, const std::string& key, const std::string& path, const std::string& body) {
  future_ = std::async(std::launch::async, [this, port, key, path, body] {
    httplib::Client c("127.0.0.1", port);
    c.set_read_timeout(60, 0);
    httplib::Request req;
    req.method = "POST";
    req.path = path;
    req.headers = {{"Authorization", "Bearer " + key}};
    req.body = body;
    req.set_header("Content-Type", "application/json");
    req.content_receiver = [this](const char* data, size_t n, uint64_t, uint64_t) {
      std::lock_guard<std::mutex> lock(mutex_);
      body_.append(data, n);
      if (body_.find("\"text\":\"") != std::string::npos || body_.find("\"content\":\"") != std::string::npos)
        text_ = true;
      return true;
    };
    httplib::Response res;
    httplib::Error err;
    c.send(req, res, err);
    std::lock_guard<std::mutex> lock(mutex_);
    ended_ = Clock::now();
    done_ = true;
  });
}

AsyncPost::~AsyncPost() { future_.wait(); }

bool AsyncPost::wait_first_text(int timeout_ms) {
  const auto end = Clock::now() + std::chrono::milliseconds(timeout_ms);
  while (!text_ && !done_ && Clock::now() < end) std::this_thread::sleep_for(std::chrono::milliseconds(5));
  return text_;
}

std::string AsyncPost::body() {
  future_.wait();
  std::lock_guard<std::mutex> lock(mutex_);
  return body_;
}

AsyncPost::Clock::time_point AsyncPost::ended() {
  future_.wait();
  std::lock_guard<std::mutex> lock(mutex_);
  return ended_;
}

std::string LocalCluster::log() const {
  std::ifstream in(dir_.file("serve.log"));
  return std::string((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
}

nlohmann::json settled_speculation(const LocalCluster& cluster) {
  httplib::Client c("127.0.0.1", cluster.port());
  const httplib::Headers auth = {{"Authorization", "Bearer " + cluster.key()}};
  nlohmann::json last;
  for (int i = 0; i < 16; ++i) {
    auto r = c.Get("/health", auth);
    const nlohmann::json now =
        r ? nlohmann::json::parse(r->body, nullptr, false).value("speculative", nlohmann::json()) : nlohmann::json();
    if (now.is_object() && now.value("mode", "off") == "off") return now;
    if (!last.is_null() && now == last && now.value("steps", 0) > 0) return now;
    last = now;
    std::this_thread::sleep_for(std::chrono::milliseconds(1200));
  }
  return last;
}

}  // namespace tandem::testing
