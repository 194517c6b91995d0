// How `tandem serve` starts the engine: the arguments of `tandem-engine engine --socket ...` as one
// struct. The gateway turns it into a command line with launch_args(); the engine's CLI registers
// its flags from the same table (launch_flags()) and reads them back with each flag's own reader,
// so the two ends cannot drift apart. JSON-free and libllama-free, like protocol.h: the gateway
// links it.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "common/status.h"

namespace tandem::engine {

// A tandem worker's cached weights, listed in a file (`"HASH BYTES"` lines) that the gateway
// writes: the engine loads those weights from the worker behind `endpoint` instead of sending them.
struct WorkerCacheListing {
  std::string endpoint;  // HOST:PORT, one of EngineLaunch::rpc
  std::string file;
  bool operator==(const WorkerCacheListing&) const = default;
};

// The defaults are the engine CLI's; `tandem serve` sets most fields itself (serve.cpp).
struct EngineLaunch {
  std::string socket_path;                               // --socket: serve the engine protocol there ("": one-shot)
  std::string model;                                     // -m: GGUF path
  int context = 512;                                     // -c: tokens per slot
  std::string kv_type = "f16";                           // --kv-type: the KV cache's type (--socket)
  int parallel = 1;                                      // --parallel: slots
  int cpu_layers = 0;                                    // --cpu-layers: leading layers on the host CPU
  std::vector<std::string> rpc;                          // --rpc: ggml RPC servers (HOST:PORT), in order
  std::vector<std::string> tandem_workers;               // --tandem-worker: those of rpc that are tandem workers
  std::vector<int> device_layers;                        // --layer-split: layers per offload device
  bool workers_first = false;                            // --workers-first
  std::string split_mode = "layer";                      // --split-mode: layer, tensor or ffn-tensor
  int threads = 0;                                       // -t: CPU threads (0: one per physical core)
  bool cuda_graphs = true;                               // off: --no-cuda-graphs
  bool mmap = true;                                      // off: --no-mmap
  uint64_t prompt_cache_bytes = 0;                       // --prompt-cache: per node (0: off)
  std::string prompt_cache_dir;                          // --prompt-cache-dir ("": no disk tier)
  uint64_t prompt_cache_dir_bytes = uint64_t{64} << 30;  // --prompt-cache-dir-size
  std::vector<WorkerCacheListing> worker_caches;         // --worker-cache HOST:PORT=FILE (repeated)
  std::string speculative = "off";                       // --speculative: off, ngram or draft
  std::string draft_model;                               // --draft-model: the draft's GGUF
  int draft_max = 8;                                     // --draft-max: tokens drafted per step
  double spec_synth_len = 0;                             // --spec-synth-len: benchmarks' synthetic acceptance
  bool json_logs = false;                                // --log-format json
  // Appended after every flag above, as they are (serve's --engine-flag); read back as everything
  // from the first argument that is not one of the table's flags.
  std::vector<std::string> extra;
  bool operator==(const EngineLaunch&) const = default;
};

// "off", "ngram" or "draft" (engine/speculation.h); anything else is an invalid_argument naming the
// choices.
Status check_speculation_mode(const std::string& mode);

// One flag of the table: its CLI11 names (the first is the one written), its help, and the field's
// writer and reader. Both see the value as command-line text.
struct LaunchFlag {
  enum class Kind {
    value,     // one value, given at most once
    repeated,  // one value per occurrence, in order
    toggle,    // no value
  };
  const char* names;  // "-c,--context"
  Kind kind;
  const char* help;
  // The values to write: none leaves the flag out (a toggle writes one empty value when set).
  std::vector<std::string> (*write)(const EngineLaunch&);
  // Reads one occurrence (a toggle gets ""). An invalid value: InvalidArgument naming the flag.
  Status (*read)(EngineLaunch&, const std::string&);
  std::string written_name() const;  // names up to the first comma
};

// Every field but `extra`, in the order launch_args() writes them.
const std::vector<LaunchFlag>& launch_flags();

// The engine's arguments after `tandem-engine engine`: every flag whose writer gives a value, in
// table order, then `extra`.
std::vector<std::string> launch_args(const EngineLaunch& launch);

// The inverse, through the same readers, then validate_launch(). Accepts `--flag=value` too.
// Everything from the first argument that is not a table flag is `extra`.
Result<EngineLaunch> parse_launch_args(const std::vector<std::string>& args);

// What no single flag can check: every --tandem-worker is one of the --rpc endpoints.
Status validate_launch(const EngineLaunch& launch);

}  // namespace tandem::engine
