#include "ops/doctor.h"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <optional>
#include <set>

#include "cluster/live_nodes.h"
#include "common/build_info.h"
#include "common/cached_tensor.h"
#include "common/units.h"
#include "link/control.h"
#include "link/probe.h"
#include "link/protocol.h"
#include "link/secret.h"
#include "plan/model_info.h"
#include "plan/plan_config.h"
#include "plan/solver.h"
#include "worker/cache.h"

namespace tandem::ops {
namespace {

using nlohmann::json;

struct LiveWorker {
  const config::WorkerConfig* config;
  link::Endpoint address;
  json status;
};

std::string rate(double bytes_per_s) { return format_bytes(static_cast<uint64_t>(bytes_per_s)) + "/s"; }

std::string fixed(double v, int digits) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.*f", digits, v);
  return buf;
}

class Doctor {
 public:
  Doctor(const DoctorOptions& o, const std::function<void(const Check&)>& on_check)
      : o_(o), c_(o.config), on_check_(on_check) {}

  std::vector<Check> run() {
    check_head();
    for (const auto& w : c_.workers) check_worker(w);
    std::optional<plan::Plan> p = check_plan();
    for (const auto& lw : live_) {
      check_link(lw);
      check_cache(lw, p);
      check_exposure(lw);
    }
    return checks_;
  }

 private:
  void add(std::string subject, std::string name, Verdict v, std::string detail, std::string fix = "") {
    Check c{std::move(subject), std::move(name), v, std::move(detail), std::move(fix)};
    if (on_check_) on_check_(c);
    checks_.push_back(std::move(c));
  }

  link::HandshakeOptions handshake() const {
    link::HandshakeOptions ho = link::default_handshake_options();
    ho.name = c_.cluster.head_name;
    ho.step_timeout = o_.timeout;
    return ho;
  }

  void check_head() {
    const std::string& head = c_.cluster.head_name;
    if (c_.workers.empty())
      add(head, "workers", Verdict::warn, "the config has no [[worker]]",
          "add a [[worker]] table per worker (docs/config.md)");
    if (c_.cluster.secret_file.empty()) {
      if (!c_.workers.empty())
        add(head, "secret", Verdict::fail, "[cluster] secret_file is not set",
            "create one with `tandem secret new -o /etc/tandem/cluster.key` and set secret_file");
    } else if (auto s = link::load_secret(c_.cluster.secret_file); !s.is_ok()) {
      add(head, "secret", Verdict::fail, s.status().message(),
          "fix the file or make a new one: `tandem secret new -o FILE`, then copy it to every worker");
    } else {
      secret_ = s.value();
      add(head, "secret", Verdict::pass, c_.cluster.secret_file + " is a valid cluster secret, mode 0600");
    }
    if (c_.model.path.empty()) {
      add(head, "model", Verdict::fail, "[model] path is not set",
          "set [model] path to the GGUF file (its first split)");
    } else if (auto info = plan::read_model_info(c_.model.path); !info.is_ok()) {
      add(head, "model", Verdict::fail, info.status().message(),
          "check [model] path; for a split model name the -00001-of- file");
    } else if (info->header_only) {
      info_ = info.value();  // still planned with: the checks of memory hold for the real model
      add(head, "model", Verdict::fail,
          c_.model.path + ": a header-only file (tensor table, no weights): serve would refuse it",
          "point [model] path at the real GGUF file (its first split)");
    } else {
      info_ = info.value();
      add(head, "model", Verdict::pass,
          c_.model.path + ": " + info_->arch + ", " + std::to_string(info_->n_layer) + " layers, " +
              format_bytes(info_->tensor_bytes));
    }
  }

  void check_worker(const config::WorkerConfig& w) {
    auto ep = link::parse_endpoint(w.address);
    if (!ep.is_ok()) {
      add(w.name, "reachable", Verdict::fail, "address '" + w.address + "': " + ep.status().message(),
          "fix its address (host:port) in the config");
      return;
    }
    const auto t0 = std::chrono::steady_clock::now();
    auto fd = link::connect_tcp(ep.value(), link::deadline_in(o_.timeout));
    if (!fd.is_ok()) {
      add(w.name, "reachable", Verdict::fail, "cannot connect to " + w.address + ": " + fd.status().message(),
          "start the worker there (`systemctl status tandem-worker`), check the address and that TCP port " +
              std::to_string(ep->port) + " is open between the machines");
      return;
    }
    fd->reset();
    add(w.name, "reachable", Verdict::pass,
        "TCP connect to " + w.address + " in " +
            fixed(std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count(), 2) + " ms");
    if (!secret_) return;
    auto st = link::control_request(ep.value(), *secret_, "status", handshake());
    if (!st.is_ok()) {
      const std::string& m = st.status().message();
      if (m.find("secret") != std::string::npos) {
        add(w.name, "secret", Verdict::fail, m,
            "copy the head's " + c_.cluster.secret_file + " to the worker (mode 0600) and restart it");
      } else if (m.find("mismatch") != std::string::npos) {
        add(w.name, "versions", Verdict::fail, m, "build the same tandem (and llama.cpp) commit on every machine");
      } else {
        add(w.name, "handshake", Verdict::fail, m, "look at the worker's log (`journalctl -u tandem-worker`)");
      }
      return;
    }
    add(w.name, "secret", Verdict::pass,
        "mutual handshake accepted by worker '" + st->value("name", std::string("?")) + "'");
    const std::string version = st->value("version", std::string("?")),
                      commit = st->value("llama_commit", std::string("?"));
    if (version != TANDEM_VERSION || commit != TANDEM_LLAMA_COMMIT) {
      add(w.name, "versions", Verdict::fail,
          "worker runs tandem " + version + " with llama.cpp " + commit.substr(0, 12) + ", the head tandem " +
              TANDEM_VERSION + " with llama.cpp " + std::string(TANDEM_LLAMA_COMMIT).substr(0, 12),
          "build the same tandem commit on every machine");
    } else {
      add(w.name, "versions", Verdict::pass,
          "tandem " + version + ", llama.cpp " + commit.substr(0, 12) + ", link protocol " +
              std::to_string(st->value("protocol", 0)) + ": same as the head");
    }
    live_.push_back({&w, ep.value(), st.value()});
  }

  std::optional<plan::Plan> check_plan() {
    if (!info_ || c_.workers.empty()) return std::nullopt;
    std::vector<plan::NodeSpec> nodes{cluster::head_node(c_)};
    for (const auto& lw : live_) nodes.push_back(cluster::node_from_status(*lw.config, lw.status));
    const bool partial = live_.size() < c_.workers.size();
    auto options = plan::plan_options_from_config(c_);
    if (!options.is_ok()) {
      add("plan", "memory", Verdict::fail, options.status().message(), "fix the [plan] and [model] keys");
      return std::nullopt;
    }
    auto p = plan::make_plan(*info_, nodes, options.value());
    if (!p.is_ok()) {
      add("plan", "memory", Verdict::fail, p.status().message(), "see `tandem plan -c` for details");
      return std::nullopt;
    }
    if (!p->fits) {
      std::string fix;
      for (const auto& s : p->suggestions) fix += (fix.empty() ? "" : "; ") + s;
      add("plan", "memory", Verdict::fail, (partial ? "with the workers that answered, " : std::string()) + p->failure,
          fix.empty() ? "free memory, or add a node" : fix);
      return std::nullopt;
    }
    for (const auto& lw : live_) {
      uint64_t need = 0, free_bytes = 0, reserved = 0;
      int64_t headroom = 0;
      int first = -1, n = 0;
      for (const auto& d : p->devices) {
        if (d.node != lw.config->name) continue;
        need += d.need();
        free_bytes += d.free_bytes;
        reserved += d.reserve.total();
        headroom += d.headroom();
        if (d.n_layers > 0 && first < 0) first = d.first_layer;
        n += d.n_layers;
      }
      // A unified-memory box (GB10) also holds back its prompt cache, the OS and load transients.
      const std::string after =
          " to spare after the margin" +
          (reserved > 0 ? " and " + format_bytes(reserved) + " of unified-memory reserves" : std::string());
      if (n == 0) {
        add(lw.config->name, "memory", Verdict::pass,
            "the plan gives it no layers (the model fits on fewer nodes); " + format_bytes(free_bytes) + " free");
      } else if (p->parallelism == plan::Parallelism::ffn_tensor) {
        add(lw.config->name, "memory", Verdict::pass,
            "every layer with its part of each FFN (parallelism ffn-tensor) needs " + format_bytes(need) + " of " +
                format_bytes(free_bytes) + " free, " +
                format_bytes(static_cast<uint64_t>(std::max<int64_t>(0, headroom))) + after);
      } else {
        add(lw.config->name, "memory", Verdict::pass,
            "layers " + std::to_string(first) + "-" + std::to_string(first + n - 1) + " need " + format_bytes(need) +
                " of " + format_bytes(free_bytes) + " free, " +
                format_bytes(static_cast<uint64_t>(std::max<int64_t>(0, headroom))) + after);
      }
    }
    if (partial) {
      add("plan", "memory", Verdict::warn, "planned without the workers that did not answer",
          "fix those workers, then run doctor again");
    }
    check_parallelism(p.value());
    return p.value();
  }

  // Both parallelisms priced for this cluster. Reported, not judged: the FFN split's estimate
  // rests on [plan] exchange_ms, and it gives up seeded loads and the prompt cache.
  void check_parallelism(const plan::Plan& p) {
    std::string detail;
    for (const auto& e : p.estimates) {
      detail += (detail.empty() ? "" : "; ") + std::string(plan::parallelism_name(e.parallelism)) +
                (e.parallelism == p.parallelism ? " (configured)" : "") + ": " +
                (e.fits ? fixed(e.tokens_per_second, 1) + " tok/s bandwidth bound" : "does not fit");
    }
    add("plan", "parallelism", Verdict::pass,
        detail + " (ffn-tensor at [plan] exchange_ms per reduction; docs/parallelism.md says when each wins)");
  }

  void check_link(const LiveWorker& lw) {
    const std::string ctx = "worker " + lw.config->name + " (" + lw.address.to_string() + ")";
    auto fd = link::connect_tcp(lw.address, link::deadline_in(o_.timeout));
    if (!fd.is_ok()) {
      add(lw.config->name, "link", Verdict::fail, fd.status().message(), "check the cable and the worker");
      return;
    }
    auto peer = link::client_handshake(fd->get(), *secret_, link::Role::probe, handshake(), ctx);
    if (!peer.is_ok()) {
      add(lw.config->name, "link", Verdict::fail, peer.status().message(),
          "update tandem on the worker: it does not serve the probe role");
      return;
    }
    auto m = link::run_probe(fd->get(), o_.pings, o_.probe_bytes, o_.timeout);
    if (!m.is_ok()) {
      add(lw.config->name, "link", Verdict::fail, ctx + ": " + m.status().message(),
          "check the cable, the network interfaces and the worker's log");
      return;
    }
    std::string detail = "round trip " + fixed(m->rtt_median_ms, 3) + " ms (median of " + std::to_string(o_.pings) +
                         ", min " + fixed(m->rtt_min_ms, 3) + ", max " + fixed(m->rtt_max_ms, 3) + ")";
    if (o_.probe_bytes == 0) {
      add(lw.config->name, "link", Verdict::pass, detail);
      return;
    }
    detail += "; " + format_bytes(o_.probe_bytes) + " each way: head->worker " + rate(m->upload_bytes_per_s) +
              ", worker->head " + rate(m->download_bytes_per_s);
    const double slowest = std::min(m->upload_bytes_per_s, m->download_bytes_per_s);
    if (slowest < o_.slow_link_bytes_per_s) {
      add(lw.config->name, "link", Verdict::warn, detail,
          "slower than " + rate(o_.slow_link_bytes_per_s) +
              ": an unseeded first load will be slow; check the cable, link speed (ethtool) and MTU, and seed the "
              "worker's cache");
    } else {
      add(lw.config->name, "link", Verdict::pass, detail);
    }
  }

  // Bytes of the tensors the worker's ggml cache would hold for its share: those above ggml's
  // hash threshold in its layers, and the output head when it holds the last layer.
  uint64_t expected_cache_bytes(const plan::Plan& p, const std::string& node, std::string* layers) const {
    int first = -1, last = -1;
    bool output = false;
    for (const auto& d : p.devices) {
      if (d.node != node || d.n_layers == 0) continue;
      if (first < 0) first = d.first_layer;
      last = d.first_layer + d.n_layers - 1;
      output |= d.output;
    }
    if (first < 0) return 0;
    *layers = std::to_string(first) + "-" + std::to_string(last);
    uint64_t bytes = 0;
    for (const auto& t : info_->tensors) {
      if (t.bytes <= kSeedThreshold) continue;
      if ((t.layer >= first && t.layer <= last) || (output && t.layer < 0 && t.name.rfind("output", 0) == 0))
        bytes += t.bytes;
    }
    return bytes;
  }

  void check_cache(const LiveWorker& lw, const std::optional<plan::Plan>& p) {
    const json cache = lw.status.value("cache", json::object());
    const std::string dir = cache.value("dir", std::string());
    const uint64_t have = cache.value("bytes", uint64_t{0}), entries = cache.value("entries", uint64_t{0});
    std::string layers;
    const uint64_t want = p ? expected_cache_bytes(*p, lw.config->name, &layers) : 0;
    const std::string& name = lw.config->name;
    if (p && p->parallelism == plan::Parallelism::ffn_tensor) {
      // The cache holds whole tensors; a worker's part of a split FFN is none of them.
      add(name, "cache", Verdict::warn,
          "under parallelism ffn-tensor the weight cache is not used: a load sends this worker's part of the model "
          "over the link",
          "expect a first load at the link's speed, or use parallelism \"layer\", whose loads the cache seeds");
      return;
    }
    if (p && want == 0) {
      add(name, "cache", Verdict::pass,
          layers.empty() ? "no layers planned here: nothing to seed"
                         : "its layers have no tensor above ggml's 10 MiB hash threshold: nothing to seed");
      return;
    }
    const std::string seed = "on " + name + ": `tandem worker seed --model <its copy of the model> --cache-dir " +
                             (dir.empty() ? std::string("<dir>") : dir) +
                             (layers.empty() ? "" : " --layers " + layers) + "`";
    if (dir.empty()) {
      add(name, "cache", Verdict::warn,
          "the worker has no weight cache: a load sends " + (p ? format_bytes(want) : std::string("its share")) +
              " over the link",
          "run the worker with --cache-dir (or cache_dir in its [[worker]] table), then " + seed);
      return;
    }
    const std::string held = std::to_string(entries) + " entries, " + format_bytes(have) + " in " + dir;
    if (!p) {
      add(name, "cache", Verdict::pass, held + " (no plan to compare with)");
    } else if (have >= want) {
      add(name, "cache", Verdict::pass,
          held + ": at least the " + format_bytes(want) + " of large tensors its layers " + layers + " need");
    } else {
      add(name, "cache", Verdict::warn,
          held + ": less than the " + format_bytes(want) + " its layers " + layers +
              " need; the first load sends the rest over the link",
          seed);
    }
  }

  void check_exposure(const LiveWorker& lw) {
    const json rpc = lw.status.value("rpc_server", json::object());
    const bool isolated = rpc.value("isolated", false);
    const uint16_t reported = rpc.value("port", uint16_t{0});
    const std::string& name = lw.config->name;
    if (!isolated) {
      add(name, "rpc-isolation", Verdict::warn,
          "its ggml RPC server is not in a private network namespace: " + rpc.value("isolation", std::string("?")),
          "run the worker with CAP_SYS_ADMIN and CAP_NET_ADMIN (the unit of `tandem systemd --role worker` grants "
          "them)");
    } else {
      add(name, "rpc-isolation", Verdict::pass, "its ggml RPC server runs in a private network namespace");
    }
    const std::string host = lw.address.host;
    if (link::is_loopback_host(host)) {
      add(name, "rpc-exposure", Verdict::pass,
          "the worker's address " + lw.address.to_string() + " is loopback: no network address to probe");
      return;
    }
    std::set<uint16_t> ports(o_.rpc_ports.begin(), o_.rpc_ports.end());
    if (reported != 0) ports.insert(reported);
    std::string open, tried;
    for (uint16_t port : ports) {
      tried += (tried.empty() ? "" : ", ") + std::to_string(port);
      auto fd = link::connect_tcp({host, port}, link::deadline_in(std::min(o_.timeout, link::Millis(2000))));
      if (fd.is_ok()) open += (open.empty() ? "" : ", ") + host + ":" + std::to_string(port);
    }
    if (!open.empty()) {
      add(name, "rpc-exposure", Verdict::fail,
          "something accepts TCP connections without the link handshake at " + open +
              " (ggml RPC ports): a raw ggml-rpc-server gives anyone full control of that machine",
          "stop any ggml-rpc-server / llama.cpp rpc-server there, and firewall those ports; tandem's own RPC server "
          "listens only inside its namespace");
    } else {
      add(name, "rpc-exposure", Verdict::pass,
          "no answer on " + host + " port(s) " + tried + ": no ggml RPC port is reachable from here");
    }
  }

  const DoctorOptions& o_;
  const config::Config& c_;
  const std::function<void(const Check&)>& on_check_;
  std::optional<link::Secret> secret_;
  std::optional<plan::ModelInfo> info_;
  std::vector<LiveWorker> live_;
  std::vector<Check> checks_;
};

}  // namespace

std::vector<Check> run_doctor(const DoctorOptions& options, const std::function<void(const Check&)>& on_check) {
  return Doctor(options, on_check).run();
}

std::string format_check(const Check& c) {
  const char* v = c.verdict == Verdict::pass ? "PASS" : c.verdict == Verdict::warn ? "WARN" : "FAIL";
  std::string line = std::string(v) + "  " + c.subject + "  " + c.name + ": " + c.detail;
  if (c.verdict != Verdict::pass && !c.fix.empty()) line += "  -> " + c.fix;
  return line;
}

bool all_passed(const std::vector<Check>& checks) {
  return std::none_of(checks.begin(), checks.end(), [](const Check& c) { return c.verdict == Verdict::fail; });
}

}  // namespace tandem::ops
