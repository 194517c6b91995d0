// The data path's switches: one table of every optimisation tandem-engine can turn off, what each
// measures and what it needs. `tandem engine --help`, the flags `tandem serve` passes through
// (`[model] engine_flags`, `--engine-flag`), docs/cli.md's table (a test compares it with
// `switches_markdown`) and the engine's validation all come from `kDataPathSwitches`.
// No ggml here: the gateway reads the table too.
#pragma once

#include <string>
#include <vector>

#include "common/status.h"

namespace tandem::datapath {

// On by default, each; a switch's flag turns one off.
struct DataPathSwitches {
  bool async_rpc_writes = true;     // step inputs to RPC servers queued, not waited on (datapath/rpc_writes.h)
  bool reuse_inputs = true;         // an input repeated across layers crosses the link once (datapath/input_reuse.h)
  bool input_runs = true;           // an input that is mostly runs of one value goes as runs (link/protocol.h)
  bool worker_input_slots = true;   // workers read a step's inputs from one copy per step (redirect_rpc_input)
  bool queue_local_inputs = true;   // the head's GPUs get their inputs queued (datapath/local_inputs.h)
  bool local_input_slots = true;    // ... from one copy per step
  bool local_casts = true;          // a worker's f32 cast of a step input made on the head (datapath/local_casts.h)
  bool embedding_on_worker = true;  // the token embedding on the worker of layer 0 (datapath/worker_embedding.h)
  bool pipeline = true;             // libllama's pipeline parallelism where it applies
  bool overlap = true;              // micro-batches' device work may overlap (datapath/head_session.h)
  bool cpu_weight_repack = true;    // the CPU backend's repacked weight layouts
  bool warm_up = true;              // a throwaway prompt and decode step before the engine is ready
  bool overlapped_reduce = true;    // tensor splits: a reduction's reads queued together (datapath/reduce_copies.h)
};

struct DataPathSwitch {
  const char* flag;               // the tandem-engine flag that turns it off
  bool DataPathSwitches::*field;  // what it turns off
  const char* mechanism;          // what is on by default, in a few words
  const char* measures;           // what turning it off shows, or why one would
  const char* needs;              // the flag of the mechanism this one lives inside (nullptr: none):
                                  // that flag turns this one off too
};

inline constexpr DataPathSwitch kDataPathSwitches[] = {
    {"--sync-rpc-writes", &DataPathSwitches::async_rpc_writes, "step inputs to RPC servers are queued without waiting",
     "writes each one waiting, as ggml's client does: what queueing saves", nullptr},
    {"--no-input-reuse", &DataPathSwitches::reuse_inputs, "an input repeated across layers crosses the link once",
     "sends every repeat whole, as to a stock server", "--sync-rpc-writes"},
    {"--no-input-runs", &DataPathSwitches::input_runs, "inputs that are mostly runs of one value go as runs",
     "sends a prompt chunk's masks whole (MiB instead of KiB)", "--sync-rpc-writes"},
    {"--no-worker-input-slots", &DataPathSwitches::worker_input_slots,
     "workers read each step input from one copy per step (up to 64 MiB each)",
     "one copy per layer that reads it, as ggml's scheduler makes them", "--sync-rpc-writes"},
    {"--sync-local-inputs", &DataPathSwitches::queue_local_inputs,
     "inputs to the head's GPUs are queued, a repeat copied from host memory once",
     "copies each waiting, as ggml's scheduler does", nullptr},
    {"--no-local-input-slots", &DataPathSwitches::local_input_slots,
     "the head's GPUs read each step input from one copy per step (up to 64 MiB each)",
     "one copy per layer that reads it", "--sync-local-inputs"},
    {"--no-local-casts", &DataPathSwitches::local_casts, "the head makes a worker's f32 cast of a step input itself",
     "reads it over the link (MiniMax-M3's mask: up to 8 MB a prompt chunk at 4096 positions)", nullptr},
    {"--no-worker-embedding", &DataPathSwitches::embedding_on_worker,
     "the token embedding moves to the worker of layer 0, which gathers the rows",
     "sends 4 x n_embd bytes per token instead of 4 (serve adds it when the plan has no room for the table)", nullptr},
    {"--no-pipeline", &DataPathSwitches::pipeline, "libllama's pipeline parallelism where it applies",
     "micro-batches of a batch no longer overlap across devices", nullptr},
    {"--no-overlap", &DataPathSwitches::overlap, "micro-batches' device work may overlap",
     "waits for every device after each micro-batch: what the overlap gains or costs", nullptr},
    {"--no-cpu-repack", &DataPathSwitches::cpu_weight_repack, "CPU weights repacked into faster layouts",
     "file layout, bit-identical to a CPU split through RPC servers (the tests' oracle)", nullptr},
    {"--no-warm-up", &DataPathSwitches::warm_up, "a throwaway prompt and decode step before ready",
     "the first request pays the devices' start-up", nullptr},
    {"--no-overlapped-reduce", &DataPathSwitches::overlapped_reduce,
     "a tensor split's reduction reads every device's partial sum at once",
     "reads and writes them one copy at a time, as llama.cpp's meta device does", nullptr},
};

// The switch whose flag is `flag`; nullptr for any other.
const DataPathSwitch* find_data_path_switch(const std::string& flag);

// The switches with every flag of `flags` applied, and each mechanism whose container is off
// turned off too. Errors: a flag that is not a switch (naming the known ones).
Result<DataPathSwitches> apply_switch_flags(const std::vector<std::string>& flags);
// The same for switches already set one by one: each mechanism whose container is off is off.
DataPathSwitches resolve_switches(DataPathSwitches s);

// The flags of every switch, "a, b, c".
std::string switch_flags_list();

// docs/cli.md's table of the switches, as the table says it.
std::string switches_markdown();

}  // namespace tandem::datapath
