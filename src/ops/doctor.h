// `tandem doctor`: checks a cluster as its config describes it, from the head, one line per check,
// each with what to do when it fails. Everything is measured or asked over the network, never
// assumed: each worker's reachability, the handshake (secret, versions), its free memory against a
// live plan, the link's round trip and throughput (the link's `probe` role, link/probe.h), its
// weight cache against the share the plan gives it, and that no ggml RPC port answers on its
// network address.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "config/config.h"
#include "link/socket.h"

namespace tandem::ops {

struct DoctorOptions {
  config::Config config;
  int pings = 20;                             // round trips measured per worker
  uint64_t probe_bytes = uint64_t{64} << 20;  // bytes sent each way for throughput; 0: skip
  std::vector<uint16_t> rpc_ports = {50052};  // tried on each worker's address, besides the port its RPC server reports
  link::Millis timeout{5000};                 // each connect and handshake step
  double slow_link_bytes_per_s = 100e6;       // below this a link is a warning
};

enum class Verdict { pass, warn, fail };

struct Check {
  std::string subject;  // "head", or a worker's name
  std::string name;     // "reachable", "secret", "versions", "memory", "link", "cache", "rpc-exposure", ...
  Verdict verdict = Verdict::pass;
  std::string detail;  // what was seen
  std::string fix;     // what to do (for warn and fail)
};

// Runs every check; `on_check` (may be empty) sees each as soon as it is known. Never throws; a
// failure of one worker does not stop the checks of the others.
std::vector<Check> run_doctor(const DoctorOptions& options, const std::function<void(const Check&)>& on_check);

// "FAIL  box-b  secret: handshake refused: wrong cluster secret -> copy ... "
std::string format_check(const Check& check);

// True when no check failed (warnings allowed).
bool all_passed(const std::vector<Check>& checks);

}  // namespace tandem::ops
