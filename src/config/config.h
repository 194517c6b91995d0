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

struct ClusterConfig {
  std::string secret_file;                // shared by head and workers
  std::string head_name = "head";         // how plans and reports name this machine
  std::optional<uint64_t> head_memory;    // bytes the model may use on the head (dry-run plans)
  std::optional<double> head_bandwidth;   // bytes per second
  std::string head_device = "gpu";        // "gpu" (GPU or unified memory) or "cpu" (layers on the CPU)
};

struct WorkerConfig {
  std::string name;
  std::string address;                    // "host:port" of the worker's authenticated listener
  std::optional<uint64_t> memory;         // declared free memory (dry-run plans without asking it)
  std::optional<double> bandwidth;        // bytes per second
  // The worker's own settings (`tandem systemd --role worker` writes them into its unit):
  std::string listen;                     // address the worker binds; "" = 0.0.0.0 and the port of `address`
  std::string cache_dir;                  // its weight cache folder; "" = none
  std::optional<uint64_t> cache_max_size; // bound of that folder
  int line = 0;                           // where the [[worker]] table starts, for messages
};

struct ModelConfig {
  std::string path;                       // GGUF file (the first split of a split model)
  uint32_t context = 4096;                // tokens per sequence
  uint32_t parallel = 1;                  // sequences served at once
  std::string kv_type = "f16";            // KV cache type
};

struct ServerConfig {
  std::string listen = "127.0.0.1:8080";
  std::string keys_db;
  bool status_page_public = false;        // the status page at / (and /status.json) without a key
};

struct PlanConfig {
  double margin = 0.05;                   // fraction of each device's free memory held back
  uint64_t margin_bytes = uint64_t{1} << 30;  // and this many bytes more
  double hop_ms = 0.5;                    // link cost per cable crossing per token
};

struct Config {
  std::string path;                       // the file it came from ("" when parsed from text)
  ClusterConfig cluster;
  std::vector<WorkerConfig> workers;
  ModelConfig model;
  ServerConfig server;
  PlanConfig plan;
};

// Reads and validates `path`. Errors: the file is missing or unreadable, TOML syntax (with line
// and column), a wrong type or value (with line and key), an unknown key or table.
Result<Config> load_config(const std::string& path);

// The same for text already in memory; `source` names it in messages.
Result<Config> parse_config(const std::string& text, const std::string& source = "config");

}  // namespace tandem::config
