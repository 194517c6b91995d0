// Before the engine starts again after a crash: is the memory the plan counted on free again?
//
// A crashed engine's memory is not always back at once: a worker's RPC server frees its buffers
// only once it sees the session end, and on a unified-memory box (GB10) the driver has been seen to
// hold a dead process's memory for a while. Starting a load into memory that is not there fails at
// best and, where the GPU shares the system's memory, can wedge the box. So the supervisor asks
// every node that holds a part of the model for its devices' free memory, compares it with what the
// plan counted on, and waits, saying which device is short, by how much and what holds memory there.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "config/config.h"
#include "link/secret.h"
#include "plan/cluster.h"
#include "plan/solver.h"

namespace tandem::gateway {

// What the plan counted on for one device: its free memory at planning less the headroom it left,
// i.e. the model's part there, the margin and a unified-memory node's reserve.
struct MemoryNeed {
  std::string node, device;
  uint64_t bytes = 0;
};

// The devices that hold something (layers, the output head, the head's host buffers) and what each needs.
std::vector<MemoryNeed> memory_needs(const plan::Plan& plan);

// One node as it reports itself now.
struct NodeMemory {
  std::string node;
  std::vector<plan::DeviceSpec> devices;  // free memory as reported, no cap applied
  std::string holders;                    // the processes holding most memory there ("" when unknown)
  std::string error;                      // why it could not be asked ("" when it was)
};

// "" when every device has what it needs free; otherwise one sentence per short device: which, how
// much is free and needed, and what holds memory there. A node that could not be asked, or a device
// it no longer lists, does not hold the restart back (the links' heartbeats and the load report those).
std::string check_memory(const std::vector<MemoryNeed>& needs, const std::vector<NodeMemory>& now);

// The nodes of `needs` as they are now: the head's own devices and holders, and each worker's from
// its `status` over the control channel (`secret` may be null without workers).
std::vector<NodeMemory> memory_now(const config::Config& config, const link::Secret* secret,
                                   const std::vector<MemoryNeed>& needs);

}  // namespace tandem::gateway
