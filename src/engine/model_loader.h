// Loading a model through libllama onto local devices and remote ggml RPC servers.
#pragma once

#include <functional>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include "common/status.h"
#include "datapath/ggml_devices.h"
#include "datapath/switches.h"

struct llama_model;
struct ggml_backend_device;
struct ggml_backend_buffer;

namespace tandem::datapath {
class HeadSession;
}

namespace tandem::engine {

// Where the layers go. Offload devices are the local GPUs (when `use_local_gpus`) followed by the
// devices of each RPC server, in the order given, or the other way round (`workers_first`).
// Where the layers go, and the data path's switches (datapath/switches.h: each on by default).
struct Placement : datapath::DataPathSwitches {
  std::vector<std::string> rpc_servers;  // "host:port" of ggml RPC servers (or tandem forwarders)
  bool use_local_gpus = true;
  int cpu_layers = 0;  // the first layers stay on the host CPU
  // Layers per offload device; the output head goes with the last device. Empty: llama.cpp's
  // default (proportional to free memory). Otherwise must cover every layer not on the CPU.
  std::vector<int> device_layers;
  // cpu_weight_repack: ggml's RPC server never repacks, and repacked kernels round differently, so
  // a one-process run that must give bit-identical tokens to a CPU split (the tests' oracle) turns
  // it off.
  // With local GPUs and RPC servers: the output head goes on the last local GPU rather than with
  // the last device, so that logits never cross the link.
  bool output_on_head = true;
  // Offload devices in llama.cpp's own order: the RPC servers' devices first, then the local GPUs
  // (`device_layers` lists them in that order). The first layers then run on the workers and the
  // last ones, with the output head, on the head's GPU, with no tensor override: libllama turns
  // pipeline parallelism (asynchronous splits across devices) off for any override. The planner
  // asks for this order whenever the head has a GPU.
  bool workers_first = false;
  // Every layer on every offload device at once through llama.cpp's meta device (its `-sm tensor`):
  // each weight split across the devices by its own rules, partial sums reduced through this
  // process. For measuring that machinery against the layer split (docs/parallelism.md); needs an
  // architecture llama.cpp splits that way (not minimax-m3) and no CPU layers. `device_layers`, when
  // given, are the devices' shares. Turns the queued RPC writes (queued_rpc_writes) and the
  // embedding's move to a worker off.
  bool meta_tensor_split = false;
  // The FFN tensor split (plan/ffn_split.h, `parallelism = "ffn-tensor"`): every layer on every
  // offload device at once through a meta device that splits only the FFNs and the output head;
  // attention, router and KV cache whole on each device. Needs ≥ 2 devices and no CPU layers;
  // like the meta split, it turns the queued RPC writes and the embedding's move off.
  bool ffn_tensor_split = false;
  bool tensor_parallel() const { return meta_tensor_split || ffn_tensor_split; }
  // RPC endpoint -> a file listing the weights its worker has cached (engine/cached_upload.h);
  // those are loaded from the worker's cache without hashing on the load's path. Only for
  // endpoints that reach a tandem worker, and only with an explicit `device_layers`.
  std::map<std::string, std::string> cache_listings;
  // Load the model file through a memory mapping where every device can use one (libllama's own
  // choice: it reads the file instead when a device cannot map it, such as an integrated CUDA GPU);
  // false: read it everywhere (`--no-mmap`, `[model] mmap = false`). Either way the weights a
  // worker loads from its cache are not read on the head (cached_upload.h).
  bool mmap = true;
  // RPC endpoints that reach a tandem worker of this build (through a link forwarder): a step's
  // inputs that repeat across layers cross the link once (datapath/input_reuse.h). Never a stock
  // RPC server, which would store the markers as data. Needs `async_rpc_writes`.
  std::set<std::string> tandem_workers;
  // The slots' size on each device instead of the planner's (input_slot_bytes): for tests of the
  // inputs that do not fit. 0: the planner's.
  uint64_t input_slot_bytes = 0;
  // embedding_on_worker applies when layer 0 runs on a worker by an explicit `device_layers`.
};

// Whether a step's writes to RPC servers are queued (datapath/rpc_writes.h) under `p`. Never under
// the meta device's tensor split: it reuses its host buffers for each layer's partial sums within
// a scheduler run, which the queued writes take for a repeated input, and would send stale sums.
inline bool queued_rpc_writes(const Placement& p) {
  return !p.rpc_servers.empty() && p.async_rpc_writes && !p.tensor_parallel();
}

// The endpoints to which a step's repeated inputs go as markers under `p`.
inline std::set<std::string> reuse_endpoints(const Placement& p) {
  return p.reuse_inputs ? p.tandem_workers : std::set<std::string>{};
}
// The endpoints to which a step's inputs that are mostly runs of one value go as runs under `p`.
inline std::set<std::string> runs_endpoints(const Placement& p) {
  return p.input_runs ? p.tandem_workers : std::set<std::string>{};
}

struct LoadOptions {
  std::string model;
  Placement placement;
  // Called with the load fraction in [0, 1]; returning false aborts the load.
  std::function<bool(float)> progress;
};

// What a loaded model holds beyond libllama's own, freed with it.
struct ModelDeleter {
  // The worker buffer holding the token embedding when it was moved (datapath/worker_embedding.h);
  // libllama's own memory breakdown does not know it.
  ggml_backend_buffer* worker_embedding = nullptr;
  void operator()(llama_model* m) const;
};
using ModelPtr = std::unique_ptr<llama_model, ModelDeleter>;

// Starts ggml's own RPC server inside this process on `endpoint` ("127.0.0.1:PORT"), serving the
// local GPUs (the CPU when there is none), and waits until it accepts. For measurement only: a split
// through it keeps both halves in one process and one CUDA context, which separates what two
// processes sharing a GPU cost from what the RPC path costs. It serves until the process exits.
Status start_in_process_rpc_server(const std::string& endpoint, int threads);

// This process's own GPUs (an integrated one included), in ggml's order; never an RPC server's.
std::vector<struct ggml_backend_device*> local_gpus();

// Names of the offload devices `placement` would use, in order (e.g. "CUDA0", "RPC0[127.0.0.1:7071]").
Result<std::vector<std::string>> offload_devices(const Placement& placement);

// The input slots' size on each device (datapath/input_reuse.h) for `model` under a context of
// `n_ctx` cells shared by `n_seq` sequences and batches of `n_ubatch` tokens, as the planner counts
// them unless `p` gives one; 0 when `on` (one of `p`'s two switches) is false.
uint64_t input_slot_bytes(const Placement& p, bool on, const llama_model* model, uint32_t n_ctx, uint32_t n_seq,
                          uint32_t n_ubatch);

// Opens the head's data-path session (datapath/head_session.h) for `model` under `p`'s switches,
// its input slots sized as input_slot_bytes says for the context given. Open it after the load and
// before the context, and free it after the context. Errors: ggml's calls do not reach tandem's
// definitions (the engine must not serve), or another session is open in this process.
Result<std::unique_ptr<datapath::HeadSession>> open_head_session(const Placement& p, const llama_model* model,
                                                                 uint32_t n_ctx, uint32_t n_seq, uint32_t n_ubatch);

// Loads the model with every layer placed as asked; no warm-up. Errors say which server could not
// be reached or why libllama refused the model.
Result<ModelPtr> load_model(const LoadOptions& options);

}  // namespace tandem::engine
