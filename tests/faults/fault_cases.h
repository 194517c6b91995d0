// The fault cases of `make faults` (docs/reliability.md): each injects one
// fault into a running head + worker, checks that every request in flight ends with an error in
// time, that the gateway stays up, that the cluster recovers by itself once the fault is gone,
// and that no process, port, descriptor or slot leaks.
#pragma once

#include <string>
#include <vector>

#include "faults/fault_cluster.h"

namespace tandem::testing {

enum class Fault { worker_kill, worker_stop, engine_kill, link_cut };
enum class Phase { load, prefill, stream };

struct FaultCase {
  std::string name;
  Fault fault;
  Phase phase;
  // Seconds from the fault until the gateway can know of it: 0 when sockets close at once, the
  // heartbeat deadline when the peer goes silent instead (frozen process, pulled cable).
  double detectable_s;
};

// Every case, in the order of the table.
std::vector<FaultCase> fault_cases();

struct RunResult {
  bool passed = false;
  double time_to_error_s = -1;     // fault -> the last in-flight request ended with an error (load: state degraded)
  double time_to_recovery_s = -1;  // fault removed -> ready again, a request served
  std::string failure;             // why it failed, "" when passed
  std::string note;                // something worth reporting that is not a failure
};

// Baseline of the gateway taken once the cluster was first ready, for leak checks.
struct Baseline {
  std::vector<int> gateway_ports;
  int gateway_fds = 0;
};
Baseline take_baseline(FaultCluster& cluster);

// Runs `c` once on `cluster`, which must be ready (or, for load cases, about to load). With
// `strict_timing`, an error later than 5 s after the fault became detectable fails the run;
// without (ctest's smoke, on a machine shared with other tests) only a hang of a minute does.
RunResult run_fault(FaultCluster& cluster, const FaultCase& c, const Baseline& baseline, bool strict_timing = true);

// Options of the cluster a case needs (load cases throttle the link so a load takes seconds).
FaultClusterOptions cluster_options(const FaultCase& c);

}  // namespace tandem::testing
