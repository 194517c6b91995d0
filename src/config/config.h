// tandem.toml: the one configuration file of a cluster (docs/config.md lists every key).
//
// The file is read whole into a Config; every key is checked for its type and range, and a key
// this version does not know is an error (a typo must not silently fall back to a default). Errors
// name the file, the line and the key: "tandem.toml:7: [model] context: expected an integer".
// New keys are added by extending the structs below and the table in config.cpp.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "common/status.h"

namespace tandem::config {

// One node's share of a hand-made split ([model] layers, `tandem serve --layers`): a count of
// layers, or the range A-B that `tandem plan` prints ("-": none).
struct LayerShare {
  int count = 0;
  int first = -1;  // the range's first layer; -1 when given as a count ("-": 0)
  bool operator==(const LayerShare&) const = default;
};

// Parses one share per node, head first, separated by commas: counts ("1,2,1"), ranges as `tandem
// plan` prints them ("-,0-1,2-3"), or both. Errors name the part that is wrong.
Result<std::vector<LayerShare>> parse_layers(const std::string& text);
// The shares as parse_layers reads them back ("1,0-1,-").
std::string format_layers(const std::vector<LayerShare>& layers);

struct ClusterConfig {
  std::string secret_file;               // shared by head and workers
  std::string head_name = "head";        // how plans and reports name this machine
  std::optional<uint64_t> head_memory;   // bytes the model may use on the head (dry-run plans)
  std::optional<double> head_bandwidth;  // bytes per second
  // "gpu" (a GPU; unified memory when ggml says it is integrated), "unified" (a GPU that shares the
  // system memory, said outright: declared plans count its reserves) or "cpu" (layers on the CPU).
  std::string head_device = "gpu";
  bool backtraces = false;  // ggml's gdb backtraces in the engine's and RPC servers' logs
};

struct WorkerConfig {
  std::string name;
  std::string address;              // "host:port" of the worker's authenticated listener
  std::optional<uint64_t> memory;   // declared free memory (dry-run plans without asking it)
  std::optional<double> bandwidth;  // bytes per second
  bool unified_memory = false;      // its GPU shares its system memory (GB10), whatever it reports
  // The worker's own settings (`tandem systemd --role worker` writes them into its unit):
  std::string listen;                      // address the worker binds; "" = 0.0.0.0 and the port of `address`
  std::string cache_dir;                   // its weight cache folder; "" = none
  std::optional<uint64_t> cache_max_size;  // bound of that folder
  std::vector<std::string> devices;        // ggml devices it serves; empty = every GPU, else the CPU
  int threads = 0;                         // CPU threads of its RPC server; 0 = one per physical core
  bool cuda_graphs = true;
  bool private_netns = true;        // its RPC server in a private network namespace
  std::string log_format = "text";  // "text" or "json"
  int line = 0;                     // where the [[worker]] table starts, for messages
};

struct ModelConfig {
  std::string path;                // GGUF file (the first split of a split model)
  uint32_t context = 4096;         // tokens per sequence
  uint32_t parallel = 1;           // sequences served at once
  std::string kv_type = "f16";     // KV cache type
  std::vector<LayerShare> layers;  // a hand-made split, one share per node; empty = the planner's
  // How the nodes share the model: "layer" (each runs its range of layers in turn) or "ffn-tensor"
  // (every node runs every layer, the FFNs split across them: plan/ffn_split.h).
  std::string parallelism = "layer";
  int threads = 0;  // the engine's CPU threads; 0 = one per physical core
  bool cuda_graphs = true;
  // Load the model file through a memory mapping where the devices allow it; false reads it
  // (engine::Placement::mmap).
  bool mmap = true;
  std::vector<std::string> engine_flags;  // tandem-engine switches serve passes on (datapath/switches.h)
  // Memory for the prompt cache's states on each node (the head's part on the head, each worker's
  // on that worker); 0 turns the cache off.
  uint64_t prompt_cache = uint64_t{8} << 30;
  // A folder for the states memory no longer holds ("" = none), bounded on each node; the workers
  // spill their parts into their cache_dir's prompt-cache folder.
  std::string prompt_cache_dir;
  uint64_t prompt_cache_dir_size = uint64_t{64} << 30;
  // Speculative decoding (docs/serve.md): "off"; "ngram", drafts from the request's own tokens (no
  // model); "draft", drafts from `draft_model` (an ordinary small model of the same vocabulary, or
  // an EAGLE3 draft for this model), which runs on the head.
  std::string speculative = "off";
  std::string draft_model;  // GGUF of the draft; "draft" needs it
  int draft_max = 8;        // tokens drafted per step at most
  // Benchmarks only: drafts are kept at random so that a step yields this many tokens on average
  // (llama.cpp's synthetic acceptance); 0 = off. The text generated is then not the model's.
  double spec_synth_len = 0;
};

struct ServerConfig {
  std::string listen = "127.0.0.1:8080";
  std::string keys_db;
  bool status_page_public = false;        // the status page at / (and /status.json) without a key
  std::string model_id;                   // the name clients pass as `model`; "" = the file name
  bool insecure_no_auth = false;          // the API without keys (logged as a warning)
  int max_in_flight = 64;                 // generation requests admitted at once; beyond: 503
  int max_tokens = 0;                     // most tokens one request may generate; 0 = what the context holds
  int canary_interval_s = 30;             // seconds between idle one-token canaries
  int drain_timeout_s = 30;               // on SIGTERM, how long requests in flight may finish
  std::string log_format = "text";        // "text" or "json"
  std::vector<std::string> cors_origins;  // browser origins allowed to call the API ("*": any); empty: CORS off
};

struct PlanConfig {
  double margin = 0.05;                       // fraction of each device's free memory held back
  uint64_t margin_bytes = uint64_t{1} << 30;  // and this many bytes more
  double hop_ms = 0.5;                        // link cost per cable crossing per token
  double exchange_ms = 0.2;                   // ffn-tensor: cost of one reduction of partial sums
  // Held back on unified-memory nodes beside the margin (plan::HostReserve): the OS's working set
  // beyond the free figure, and a load's transients.
  uint64_t os_reserve = uint64_t{1} << 30;
  uint64_t load_reserve = uint64_t{1} << 30;
};

struct Config {
  std::string path;  // the file it came from ("" when parsed from text)
  ClusterConfig cluster;
  std::vector<WorkerConfig> workers;
  ModelConfig model;
  ServerConfig server;
  PlanConfig plan;
};

// Reads and validates `path`. Errors: the file is missing or unreadable, TOML syntax (with line
// and column), a wrong type or value (with line and key), an unknown key or table, two workers with
// one name or one address. Relative paths in the file (secret_file, model path, keys_db,
// cache_dir, prompt_cache_dir) are resolved against the file's folder, so a unit or another working directory
// finds the same files.
Result<Config> load_config(const std::string& path);

// The same for text already in memory; `source` names it in messages.
Result<Config> parse_config(const std::string& text, const std::string& source = "config");

// The [[worker]] named `name`; "" picks the only one. Errors name the workers there are.
Result<const WorkerConfig*> find_worker(const Config& config, const std::string& name);

// What a worker binds: its `listen`, else 0.0.0.0 and the port of its `address`.
Result<std::string> worker_listen(const WorkerConfig& worker);

// Every key this version knows, as "[table] key" ("[[worker]] memory"), in the order of docs/config.md.
std::vector<std::string> known_keys();

}  // namespace tandem::config
