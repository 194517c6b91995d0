#include "faults/fault_cluster.h"

#include <httplib.h>
#include <signal.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <set>
#include <sstream>
#include <thread>
#include <vector>

namespace tandem::testing {
namespace {

int sh(const std::string& cmd) { return std::system((cmd + " >/dev/null 2>&1").c_str()); }

std::string slurp(const std::string& path) {
  std::ifstream in(path);
  return std::string((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
}

// A run killed before its destructor leaves its namespace, its veth pair and its subnet behind;
// a later run whose pid maps to the same subnet would route into them ("connection refused").
// Removes those of runs that are no longer alive.
void remove_stale_namespaces() {
  std::vector<std::string> stale;
  std::error_code ec;
  for (const auto& entry : std::filesystem::directory_iterator("/run/netns", ec)) {
    const std::string name = entry.path().filename().string();
    if (name.size() <= 3 || name.compare(0, 3, "tdf") != 0 ||
        name.find_first_not_of("0123456789", 3) != std::string::npos)
      continue;
    const pid_t pid = static_cast<pid_t>(std::stol(name.substr(3)));
    if (pid != ::getpid() && ::kill(pid, 0) != 0 && errno == ESRCH) stale.push_back(name.substr(3));
  }
  for (const std::string& pid : stale) {
    sh("ip link del tdh" + pid);
    sh("ip netns del tdf" + pid);
  }
}

}  // namespace

NetnsLink::NetnsLink() {
  remove_stale_namespaces();
  const int id = ::getpid() % 250 + 1;
  const std::string n = std::to_string(::getpid());
  ns_ = "tdf" + n;
  host_if_ = "tdh" + n;
  inner_if_ = "tdw" + n;
  host_ip_ = "10.213." + std::to_string(id) + ".1";
  inner_ip_ = "10.213." + std::to_string(id) + ".2";
  sh("ip netns del " + ns_);
  sh("ip link del " + host_if_);
  ok_ = sh("ip netns add " + ns_) == 0 &&
        sh("ip link add " + host_if_ + " type veth peer name " + inner_if_ + " netns " + ns_) == 0 &&
        sh("ip addr add " + host_ip_ + "/24 dev " + host_if_) == 0 && sh("ip link set " + host_if_ + " up") == 0 &&
        sh("ip -n " + ns_ + " addr add " + inner_ip_ + "/24 dev " + inner_if_) == 0 &&
        sh("ip -n " + ns_ + " link set " + inner_if_ + " up") == 0 && sh("ip -n " + ns_ + " link set lo up") == 0;
}

NetnsLink::~NetnsLink() {
  sh("ip link del " + host_if_);
  sh("ip netns del " + ns_);
}

bool NetnsLink::throttle(const std::string& rate) {
  sh("tc qdisc del dev " + host_if_ + " root");
  // A token bucket (tbf) rather than netem, whose module many kernels lack; the 400 ms queue
  // bound keeps heartbeats well inside their deadline.
  return rate.empty() ||
         sh("tc qdisc add dev " + host_if_ + " root tbf rate " + rate + " burst 32kbit latency 400ms") == 0;
}

void NetnsLink::cut() { sh("ip link set " + host_if_ + " down"); }
void NetnsLink::restore() { sh("ip link set " + host_if_ + " up"); }

bool FaultCluster::supported(std::string* why) {
  if (::geteuid() != 0) {
    *why = "needs root (network namespaces)";
    return false;
  }
  NetnsLink probe;
  if (!probe.ok()) *why = "cannot create a network namespace with a veth pair (ip netns / ip link)";
  return probe.ok();
}

FaultCluster::FaultCluster(const ScratchDir& dir, FaultClusterOptions options)
    : dir_(dir), options_(std::move(options)) {
  ClusterFiles files = make_cluster_files(dir, "faults");
  secret_ = files.secret;
  model_ = files.model;
  key_ = files.key;
  EXPECT_TRUE(link_.throttle(options_.throttle)) << "tc qdisc tbf failed";
  worker_port_ = free_port();
  start_worker();
  port_ = free_port();
  gateway_ = std::make_unique<ChildProcess>(
      std::vector<std::string>{TANDEM_BINARY,
                               "serve",
                               "-m",
                               model_,
                               "--secret-file",
                               secret_,
                               "--keys-db",
                               dir.file("keys.db"),
                               "--listen",
                               "127.0.0.1:" + std::to_string(port_),
                               "--context",
                               std::to_string(options_.context),
                               "--parallel",
                               std::to_string(options_.parallel),
                               "--model-id",
                               "tiny",
                               "-t",
                               "1",
                               "--worker",
                               "w0=" + link_.inner_ip() + ":" + std::to_string(worker_port_),
                               "--layers",
                               "2,2"},
      dir.file("serve.log"));
}

FaultCluster::~FaultCluster() {
  if (worker_) signal_worker_group(SIGCONT);
  gateway_.reset();
  worker_.reset();
}

void FaultCluster::start_worker() {
  worker_ = std::make_unique<ChildProcess>(
      std::vector<std::string>{"/usr/bin/env", "ip", "netns", "exec", link_.ns(), TANDEM_BINARY, "worker", "--listen",
                               link_.inner_ip() + ":" + std::to_string(worker_port_), "--secret-file", secret_,
                               "--name", "w0", "--threads", "1"},
      dir_.file("worker.log"));
  // `ip netns exec` execs the worker in place, so the pid is the worker's once it listens.
  const auto end = std::chrono::steady_clock::now() + std::chrono::seconds(20);
  while (std::chrono::steady_clock::now() < end && worker_->running()) {
    if (sh("ip netns exec " + link_.ns() + " ss -Hltn 'sport = :" + std::to_string(worker_port_) +
           "' | grep -q LISTEN") == 0)
      return;
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
}

void FaultCluster::signal_worker(int signal) { worker_->signal(signal); }
void FaultCluster::signal_worker_group(int signal) {
  if (worker_->running()) ::kill(-worker_->pid(), signal);
}
void FaultCluster::wait_worker_exit() { worker_->wait(10000); }

nlohmann::json FaultCluster::health() {
  httplib::Client c("127.0.0.1", port_);
  c.set_connection_timeout(1, 0);
  c.set_read_timeout(2, 0);
  auto r = c.Get("/health", {{"Authorization", "Bearer " + key_}});  // the details need a key
  if (!r) return nullptr;
  auto j = nlohmann::json::parse(r->body, nullptr, false);
  return j.is_object() ? j : nlohmann::json();
}

bool FaultCluster::wait_state(const std::string& state, int timeout_ms) {
  const auto end = std::chrono::steady_clock::now() + std::chrono::milliseconds(timeout_ms);
  while (std::chrono::steady_clock::now() < end) {
    auto h = health();
    if (h.is_object() && h.value("state", "") == state) return true;
    if (!gateway_->running()) return false;
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  return false;
}

int FaultCluster::engine_pid() {
  auto h = health();
  if (!h.is_object() || !h.contains("engine")) return -1;
  return h["engine"].value("pid", -1);
}

std::string FaultCluster::gateway_log() const { return slurp(dir_.file("serve.log")); }
std::string FaultCluster::worker_log() const { return slurp(dir_.file("worker.log")); }

std::vector<int> child_pids(int pid) {
  std::vector<int> out;
  for (const auto& e : std::filesystem::directory_iterator("/proc")) {
    const std::string name = e.path().filename();
    if (name.find_first_not_of("0123456789") != std::string::npos) continue;
    const std::string stat = slurp(e.path() / "stat");
    const size_t close = stat.rfind(')');
    if (close == std::string::npos) continue;
    std::istringstream rest(stat.substr(close + 2));
    std::string state;
    int ppid = 0;
    rest >> state >> ppid;
    if (ppid == pid && state != "Z") out.push_back(std::stoi(name));
  }
  return out;
}

std::vector<int> listening_ports(int pid) {
  std::set<std::string> inodes;
  std::error_code ec;
  for (const auto& e : std::filesystem::directory_iterator("/proc/" + std::to_string(pid) + "/fd", ec)) {
    const std::string target = std::filesystem::read_symlink(e.path(), ec).string();
    if (target.rfind("socket:[", 0) == 0) inodes.insert(target.substr(8, target.size() - 9));
  }
  std::vector<int> ports;
  for (const char* table : {"tcp", "tcp6"}) {
    std::istringstream in(slurp("/proc/" + std::to_string(pid) + "/net/" + table));
    std::string line;
    std::getline(in, line);
    while (std::getline(in, line)) {
      std::istringstream f(line);
      std::string sl, local, remote, st, queues, timer, retr, uid, timeout, inode;
      f >> sl >> local >> remote >> st >> queues >> timer >> retr >> uid >> timeout >> inode;
      if (st == "0A" && inodes.count(inode)) ports.push_back(std::stoi(local.substr(local.find(':') + 1), nullptr, 16));
    }
  }
  return ports;
}

int open_fds(int pid) {
  int n = 0;
  std::error_code ec;
  for (auto it = std::filesystem::directory_iterator("/proc/" + std::to_string(pid) + "/fd", ec);
       !ec && it != std::filesystem::directory_iterator(); ++it) {
    ++n;
  }
  return n;
}

}  // namespace tandem::testing
