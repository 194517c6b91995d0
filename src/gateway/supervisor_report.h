// What /health and /metrics show of the supervisor, built from one snapshot of it (taken by
// Supervisor::health() under its lock). Private to the gateway; free functions, so that tests
// build a snapshot and read the report without processes.
#pragma once

#include <string>
#include <vector>

#include "engine/protocol.h"
#include "gateway/api_server.h"
#include "gateway/serve_state.h"
#include "link/forwarder.h"

namespace tandem::gateway {

struct WorkerSnapshot {
  std::string name, address;  // as configured
  std::string endpoint;       // the forwarder's loopback HOST:PORT, by which the engine names it
  link::ForwarderStats link;
  std::string refused;  // why it refuses us (it serves another head); "": it does not
};

struct SupervisorSnapshot {
  std::string model_id, head_name;
  std::vector<WorkerSnapshot> workers;  // in layer order
  ServeState state = ServeState::starting;
  int engine_pid = -1;  // -1: no engine running
  bool engine_connected = false;
  int restarts = 0;
  engine::EngineStatus engine;  // the engine's last status
  std::string last_error;
};

// /health's state, admission and detail, with the supervisor's metric families.
HealthReport health_report(const SupervisorSnapshot& s);

// The supervisor's metric families (links, nodes, the engine, the prompt cache), in /metrics' order.
std::string supervisor_metric_families(const SupervisorSnapshot& s);

}  // namespace tandem::gateway
