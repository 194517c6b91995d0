#include <signal.h>

#include <cstdio>

#include "cli/commands.h"
#include "common/log.h"
#include "common/units.h"
#include "link/control.h"
#include "link/forwarder.h"
#include "link/probe.h"

#include <nlohmann/json.hpp>

namespace tandem::cli {

namespace {

link::Endpoint endpoint_or_fail(const std::string& text, const char* flag, bool allow_zero = false) {
  auto ep = link::parse_endpoint(text, allow_zero);
  if (!ep.is_ok()) fail(std::string(flag) + ": " + ep.status().message(), 2);
  return ep.value();
}

link::Secret secret_or_fail(const std::string& path) {
  auto s = link::load_secret(path);
  if (!s.is_ok()) fail(s.status().message());
  return s.value();
}

void run_forward(const std::string& to, const std::string& listen, const std::string& secret_file, int deadline_ms) {
  link::ForwarderOptions o;
  o.worker = endpoint_or_fail(to, "--to");
  o.listen = endpoint_or_fail(listen, "--listen", true);
  if (!link::is_loopback_host(o.listen.host)) {
    std::fprintf(stderr,
                 "tandem: WARNING: --listen %s is not loopback: anyone who can reach it gets raw, "
                 "unauthenticated ggml RPC access to the worker\n",
                 listen.c_str());
  }
  o.heartbeat_deadline = link::Millis(deadline_ms);
  sigset_t set;
  sigemptyset(&set);
  sigaddset(&set, SIGTERM);
  sigaddset(&set, SIGINT);
  ::pthread_sigmask(SIG_BLOCK, &set, nullptr);
  ::signal(SIGPIPE, SIG_IGN);
  link::Forwarder f(o, secret_or_fail(secret_file));
  f.on_log([](const std::string& line) { log::info("forward", line); });
  if (Status s = f.start(); !s.is_ok()) fail(s.message());
  log::info("forward", "listening on " + link::Endpoint{o.listen.host, f.port()}.to_string() + " for worker " +
                           o.worker.to_string());
  int sig = 0;
  ::sigwait(&set, &sig);
  const auto st = f.stats();
  f.stop();
  log::info("forward", "stopped; " + format_bytes(st.bytes_to_worker) + " to the worker, " +
                           format_bytes(st.bytes_from_worker) + " from it");
}

void run_exchanges(const link::Endpoint& to, const link::Secret& secret, const std::vector<uint64_t>& sizes,
                   uint64_t rounds, bool json) {
  nlohmann::json out = nlohmann::json::array();
  if (!json)
    std::printf("%-9s %10s %10s %10s %10s  (microseconds per round, %llu rounds)\n", "kind", "bytes", "median", "p10",
                "p90", static_cast<unsigned long long>(rounds));
  for (uint64_t bytes : sizes) {
    for (const auto op : {link::ProbeOp::exchange, link::ProbeOp::reduce}) {
      const char* kind = op == link::ProbeOp::exchange ? "exchange" : "reduce";
      auto m = link::measure_exchange(to, secret, op, bytes, rounds, link::Millis(10000));
      if (!m.is_ok()) fail(m.status().message());
      out.push_back({{"kind", kind},
                     {"bytes", bytes},
                     {"rounds", m->rounds},
                     {"median_us", m->median_us},
                     {"p10_us", m->p10_us},
                     {"p90_us", m->p90_us},
                     {"min_us", m->min_us},
                     {"max_us", m->max_us}});
      if (!json)
        std::printf("%-9s %10llu %10.1f %10.1f %10.1f\n", kind, static_cast<unsigned long long>(bytes), m->median_us,
                    m->p10_us, m->p90_us);
    }
  }
  if (json) std::printf("%s\n", out.dump(2).c_str());
}

void register_link(CLI::App& app) {
  auto* cmd = app.add_subcommand("link", "The authenticated cluster link, head side");
  cmd->require_subcommand(1);
  auto* fwd = cmd->add_subcommand("forward",
                                  "Listen on loopback and forward ggml RPC connections to a worker through the link");
  static std::string to, listen = "127.0.0.1:0", secret_file;
  static int deadline_ms = 5000;
  fwd->add_option("--to", to, "The worker's address, HOST:PORT")->required();
  fwd->add_option("--listen", listen, "Local address for the engine's RPC client (port 0: any free one)")
      ->capture_default_str();
  fwd->add_option("--secret-file", secret_file, "The cluster secret")->required();
  fwd->add_option("--heartbeat-deadline-ms", deadline_ms, "Cut the link when the worker is silent this long")
      ->capture_default_str()
      ->check(CLI::Range(100, 600000));
  add_log_format_option(fwd);
  fwd->callback([] { run_forward(to, listen, secret_file, deadline_ms); });

  auto* ex = cmd->add_subcommand(
      "exchange",
      "Measure what swapping a layer's partial sums with a worker costs: both ends send a message at once "
      "(exchange), or the worker answers once it has the head's (reduce: the sum made on one box)");
  static std::string eto, esecret;
  static std::vector<uint64_t> ebytes = {24576};
  static uint64_t erounds = 2000;
  static bool ejson = false;
  ex->add_option("--to", eto, "The worker's address, HOST:PORT")->required();
  ex->add_option("--secret-file", esecret, "The cluster secret")->required();
  ex->add_option("--bytes", ebytes, "Message sizes, e.g. 24576 (MiniMax-M3's hidden state in f32)")
      ->delimiter(',')
      ->capture_default_str()
      ->check(CLI::Range(uint64_t{1}, link::kMaxExchangeBytes));
  ex->add_option("--rounds", erounds, "Rounds per size and kind")
      ->capture_default_str()
      ->check(CLI::Range(uint64_t{10}, link::kMaxProbeRounds));
  ex->add_flag("--json", ejson, "Print JSON");
  ex->callback([] { run_exchanges(endpoint_or_fail(eto, "--to"), secret_or_fail(esecret), ebytes, erounds, ejson); });

  auto* status = cmd->add_subcommand("status", "Ask a worker for its status over the control channel (JSON)");
  static std::string sto, ssecret;
  status->add_option("--to", sto, "The worker's address, HOST:PORT")->required();
  status->add_option("--secret-file", ssecret, "The cluster secret")->required();
  status->callback([] {
    auto r = link::control_request(endpoint_or_fail(sto, "--to"), secret_or_fail(ssecret), "status",
                                   link::default_handshake_options());
    if (!r.is_ok()) fail(r.status().message());
    std::printf("%s\n", r->dump(2).c_str());
  });
}

}  // namespace

TANDEM_COMMAND(70, register_link);

}  // namespace tandem::cli
