#include "engine/model_loader.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netdb.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <numeric>
#include <thread>

#include "common/log.h"
#include "common/units.h"
#include "datapath/head_session.h"
#include "datapath/input_reuse.h"
#include "datapath/self_check.h"
#include "datapath/worker_embedding.h"
#include "engine/cached_upload.h"
#include "engine/ffn_device.h"
#include "engine/hash_memo.h"
#include "engine/llama_log.h"
#include "ggml-backend.h"
#include "ggml-rpc.h"
#include "llama.h"
#include "plan/model_info.h"

// libllama's own list of a model's weights by name (llama-model.h; exported, used by its tools).
// pinned llama.cpp: text src/llama-model.h const std::vector<std::pair<std::string, ggml_tensor *>> & llama_internal_get_tensor_map(const llama_model * model);
// No public call names the token embedding's tensor.
const std::vector<std::pair<std::string, ggml_tensor*>>& llama_internal_get_tensor_map(const llama_model* model);

namespace tandem::engine {

std::vector<ggml_backend_dev_t> local_gpus() {
  std::vector<ggml_backend_dev_t> out;
  for (size_t i = 0; i < ggml_backend_dev_count(); ++i) {
    ggml_backend_dev_t dev = ggml_backend_dev_get(i);
    const auto type = ggml_backend_dev_type(dev);
    if (!datapath::is_rpc_device(dev) &&
        (type == GGML_BACKEND_DEVICE_TYPE_GPU || type == GGML_BACKEND_DEVICE_TYPE_IGPU))
      out.push_back(dev);
  }
  return out;
}

namespace {

// The model's token embedding when it has exactly one, and whether it has an output head of its own.
std::pair<ggml_tensor*, bool> token_embedding(const llama_model* model) {
  ggml_tensor* table = nullptr;
  int tables = 0;
  bool output = false;
  for (const auto& [name, t] : llama_internal_get_tensor_map(model)) {
    if (name == "token_embd.weight") table = t, ++tables;
    if (name == "output.weight") output = true;
  }
  return {tables == 1 ? table : nullptr, output};
}

// ggml's RPC client aborts the process when it cannot connect, so every endpoint is first tried
// here, with a deadline, to turn the common failure into an error.
Status probe_endpoint(const std::string& endpoint, int timeout_ms) {
  const size_t colon = endpoint.rfind(':');
  if (colon == std::string::npos || colon == 0 || colon + 1 == endpoint.size()) {
    return Status::invalid_argument("RPC server '" + endpoint + "': expected HOST:PORT");
  }
  std::string host = endpoint.substr(0, colon);
  if (host.size() > 2 && host.front() == '[' && host.back() == ']') host = host.substr(1, host.size() - 2);
  const std::string port = endpoint.substr(colon + 1);
  addrinfo hints{};
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* res = nullptr;
  if (int rc = ::getaddrinfo(host.c_str(), port.c_str(), &hints, &res); rc != 0) {
    return Status::unavailable("RPC server " + endpoint + ": cannot resolve: " + gai_strerror(rc));
  }
  std::string why = "no address";
  bool ok = false;
  for (addrinfo* a = res; a != nullptr && !ok; a = a->ai_next) {
    const int fd = ::socket(a->ai_family, a->ai_socktype | SOCK_CLOEXEC | SOCK_NONBLOCK, a->ai_protocol);
    if (fd < 0) continue;
    if (::connect(fd, a->ai_addr, a->ai_addrlen) == 0) {
      ok = true;
    } else if (errno == EINPROGRESS) {
      pollfd pfd{fd, POLLOUT, 0};
      if (::poll(&pfd, 1, timeout_ms) == 1) {
        int err = 0;
        socklen_t len = sizeof err;
        ::getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &len);
        ok = err == 0;
        if (!ok) why = std::strerror(err);
      } else {
        why = "no answer within " + std::to_string(timeout_ms) + " ms";
      }
    } else {
      why = std::strerror(errno);
    }
    ::close(fd);
  }
  ::freeaddrinfo(res);
  if (!ok) return Status::unavailable("RPC server " + endpoint + ": cannot connect: " + why);
  return Status::ok();
}

void add_local_gpus(std::vector<ggml_backend_dev_t>* devices) {
  const auto gpus = local_gpus();
  devices->insert(devices->end(), gpus.begin(), gpus.end());
}

// Whether libllama reads the model file rather than mapping it: when told to, or when a device it
// loads onto cannot map files (engine/cached_upload.h takes it as a hint for the page cache):
// pinned llama.cpp: text src/llama-model.cpp if (ml.use_mmap && params.load_mode == LLAMA_LOAD_MODE_AUTO) { for (const auto & dev : devices) { ggml_backend_dev_props props; ggml_backend_dev_get_props(dev.dev, &props); if (!props.caps.mmap_support) { ml.use_mmap = false;
bool reads_file(const Placement& p, const std::vector<ggml_backend_dev_t>& devices) {
  if (!p.mmap) return true;
  for (ggml_backend_dev_t d : devices) {
    if (d == nullptr) continue;
    ggml_backend_dev_props props{};
    ggml_backend_dev_get_props(d, &props);
    if (!props.caps.mmap_support) return true;
  }
  return false;
}

Result<std::vector<ggml_backend_dev_t>> collect_devices(const Placement& p) {
  std::vector<ggml_backend_dev_t> devices;
  if (p.use_local_gpus && !p.workers_first) add_local_gpus(&devices);
  for (const std::string& server : p.rpc_servers) {
    TANDEM_RETURN_IF_ERROR(probe_endpoint(server, 3000));
    // Registers the server's devices with ggml (once per endpoint) after asking the server for them.
    ggml_backend_reg_t reg = ggml_backend_rpc_add_server(server.c_str());
    if (reg == nullptr || ggml_backend_reg_dev_count(reg) == 0) {
      return Status::unavailable(with_llama_reason("RPC server " + server + ": not reachable or offers no device"));
    }
    for (size_t i = 0; i < ggml_backend_reg_dev_count(reg); ++i) devices.push_back(ggml_backend_reg_dev_get(reg, i));
  }
  if (p.use_local_gpus && p.workers_first) add_local_gpus(&devices);
  return devices;
}

}  // namespace

Status start_in_process_rpc_server(const std::string& endpoint, int threads) {
  llama_backend_init();
  std::vector<ggml_backend_dev_t> devices;
  add_local_gpus(&devices);
  if (devices.empty()) devices.push_back(ggml_backend_dev_by_type(GGML_BACKEND_DEVICE_TYPE_CPU));
  const size_t n_threads = threads > 0 ? static_cast<size_t>(threads) : 1;
  std::thread([endpoint, devices, n_threads]() mutable {
    ggml_backend_rpc_start_server(endpoint.c_str(), nullptr, n_threads, devices.size(), devices.data());
  }).detach();
  Status s;
  for (int i = 0; i < 100; ++i) {
    s = probe_endpoint(endpoint, 100);
    if (s.is_ok()) return s;
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  return s.with_context("the RPC server inside this process did not start");
}

void ModelDeleter::operator()(llama_model* m) const {
  llama_model_free(m);
  if (worker_embedding != nullptr) ggml_backend_buffer_free(worker_embedding);
}

uint64_t input_slot_bytes(const Placement& p, bool on, const llama_model* model, uint32_t n_ctx, uint32_t n_seq,
                          uint32_t n_ubatch) {
  if (!on) return 0;
  if (p.input_slot_bytes > 0) return p.input_slot_bytes;
  // The planner's shape (plan/memory_model.cpp): each sequence's cells rounded up to 256.
  const uint64_t per_stream = (n_ctx / std::max<uint32_t>(1, n_seq) + 255) / 256 * 256;
  const uint64_t tokens = std::min<uint64_t>(n_ubatch, per_stream * std::max<uint32_t>(1, n_seq));
  return datapath::input_slot_bytes(static_cast<uint64_t>(llama_model_n_embd(model)), tokens, per_stream);
}

Result<std::unique_ptr<datapath::HeadSession>> open_head_session(const Placement& p, const llama_model* model,
                                                                 uint32_t n_ctx, uint32_t n_seq, uint32_t n_ubatch) {
  datapath::HeadOptions o;
  o.async_rpc_writes = queued_rpc_writes(p);
  if (o.async_rpc_writes) {
    o.reuse_endpoints = reuse_endpoints(p);
    o.runs_endpoints = runs_endpoints(p);
    o.worker_slot_bytes = input_slot_bytes(p, p.worker_input_slots, model, n_ctx, n_seq, n_ubatch);
  }
  o.queue_local_inputs = p.queue_local_inputs;
  if (o.queue_local_inputs)
    o.local_slot_bytes = input_slot_bytes(p, p.local_input_slots, model, n_ctx, n_seq, n_ubatch);
  o.local_casts = p.local_casts;
  o.serial_runs = !p.overlap;
  o.overlapped_reduce = p.tensor_parallel() && p.overlapped_reduce;
  o.anchor_arange = p.ffn_tensor_split;
  return datapath::HeadSession::open(o);
}

Result<std::vector<std::string>> offload_devices(const Placement& placement) {
  llama_backend_init();
  auto devices = collect_devices(placement);
  if (!devices.is_ok()) return devices.status();
  std::vector<std::string> names;
  for (ggml_backend_dev_t d : devices.value()) names.emplace_back(ggml_backend_dev_name(d));
  return names;
}

namespace {

// What libllama is given as its devices: the offload devices, or under the FFN split the one meta
// device over them; null-terminated.
Result<std::vector<ggml_backend_dev_t>> model_devices(const Placement& p, const plan::ModelInfo& info,
                                                      const std::vector<ggml_backend_dev_t>& devices) {
  std::vector<ggml_backend_dev_t> device_list = devices;
  if (p.ffn_tensor_split) {
    // libllama sees one device holding every layer; the meta device splits each weight by tandem's
    // policy and runs each graph on all devices, reducing the FFNs' partial sums.
    auto meta = ffn_split_device(info, devices);
    if (!meta.is_ok()) return meta.status();
    device_list = {meta.value()};
  }
  device_list.push_back(nullptr);
  return device_list;
}

// The layer split as libllama's proportions, written into `split`, at which mp then points.
Status set_layer_split(const Placement& p, size_t n_devices, int n_layer, std::vector<float>& split,
                       llama_model_params& mp) {
  if (p.device_layers.empty() || p.ffn_tensor_split) return Status::ok();
  if (p.device_layers.size() != n_devices) {
    return Status::invalid_argument("the layer split names " + std::to_string(p.device_layers.size()) +
                                    " devices, but " + std::to_string(n_devices) + " offload devices are present");
  }
  const int offloaded = std::accumulate(p.device_layers.begin(), p.device_layers.end(), 0);
  if (!p.meta_tensor_split && offloaded + p.cpu_layers != n_layer) {
    return Status::invalid_argument("the layer split covers " + std::to_string(offloaded + p.cpu_layers) +
                                    " layers, the model has " + std::to_string(n_layer));
  }
  // Integer layer counts as proportions reproduce llama.cpp's boundaries exactly: the split
  // points are k/(n+1) and layer il goes to the first device whose point exceeds il/(n+1).
  for (size_t i = 0; i < p.device_layers.size(); ++i) split[i] = static_cast<float>(p.device_layers[i]);
  if (!p.meta_tensor_split) split[p.device_layers.size() - 1] += 1.0f;
  mp.tensor_split = split.data();
  return Status::ok();
}

// The tensor overrides, null-terminated; empty when there are none.
std::vector<llama_model_tensor_buft_override> tensor_overrides(const Placement& p,
                                                               const std::vector<ggml_backend_dev_t>& devices) {
  // With a GPU on the head and layers on workers, the output head stays on the head's last GPU
  // instead of going with the last device: the logits (4 bytes x vocabulary per token) then never
  // cross the link, only the hidden state does, as in a stock split whose RPC devices come first.
  // The planner places it the same way (plan/solver.h).
  std::vector<llama_model_tensor_buft_override> overrides;
  ggml_backend_dev_t last_local = nullptr;
  for (ggml_backend_dev_t d : devices) {
    if (!datapath::is_rpc_device(d)) last_local = d;
  }
  if (last_local != nullptr && !p.rpc_servers.empty() && p.output_on_head && !p.workers_first && !p.tensor_parallel()) {
    overrides.push_back({"^output\\.weight$", ggml_backend_dev_buffer_type(last_local)});
  }
  // libllama has no switch for it, but keeps pipeline parallelism off under any tensor override:
  // one that matches no tensor changes nothing else.
  // pinned llama.cpp: text src/llama-context.cpp cparams.offload_kqv && !model.has_tensor_overrides();
  // pinned llama.cpp: text src/llama-model.cpp pimpl->has_tensor_overrides = params.tensor_buft_overrides && params.tensor_buft_overrides[0].pattern;
  if (!p.pipeline) overrides.push_back({"^tandem\\.no-pipeline$", ggml_backend_cpu_buffer_type()});
  if (!overrides.empty()) overrides.push_back({nullptr, nullptr});
  return overrides;
}

// The device of layer 0 when it is a worker's: it gathers the token embedding's rows itself
// (datapath/worker_embedding.h). Null otherwise.
ggml_backend_dev_t embedding_device_of(const Placement& p, const std::vector<ggml_backend_dev_t>& devices) {
  if (!p.embedding_on_worker || p.cpu_layers != 0 || p.tensor_parallel()) return nullptr;
  for (size_t i = 0; i < p.device_layers.size() && i < devices.size(); ++i) {
    if (p.device_layers[i] == 0) continue;
    return datapath::is_rpc_device(devices[i]) ? devices[i] : nullptr;
  }
  return nullptr;
}

// Starts loading the weights the workers' caches list, by marker (engine/cached_upload.h).
Status start_cached_loads(const LoadOptions& o, const std::vector<ggml_backend_dev_t>& devices,
                          const std::vector<ggml_backend_dev_t>& device_list, bool embedding_remote) {
  const Placement& p = o.placement;
  CachedUploadPlan cp;
  cp.model = o.model;
  long local = 0;
  for (ggml_backend_dev_t d : devices) local += datapath::is_rpc_device(d) ? 0 : 1;
  const long remote = static_cast<long>(devices.size()) - local;
  if (p.workers_first) {
    cp.first_layer = p.cpu_layers;
    cp.end_layer = p.cpu_layers + std::accumulate(p.device_layers.begin(), p.device_layers.begin() + remote, 0);
    cp.output_remote = local == 0;
  } else {
    cp.first_layer = p.cpu_layers + std::accumulate(p.device_layers.begin(), p.device_layers.begin() + local, 0);
    cp.output_remote = remote > 0 && !(local > 0 && p.output_on_head);
  }
  for (const auto& [endpoint, file] : p.cache_listings) {
    auto listing = read_cache_listing(file);
    if (!listing.is_ok()) return listing.status().with_context("RPC server " + endpoint);
    cp.listings[endpoint] = std::move(listing.value());
  }
  cp.embedding_remote = embedding_remote;
  cp.hash_memo_dir = default_hash_memo_dir();
  cp.file_read = reads_file(p, device_list);
  return start_cached_uploads(cp);
}

// Moves the loaded token embedding to the worker of layer 0, or logs why it stays on the head.
void move_embedding(ModelPtr& model, ggml_backend_dev_t embedding_device) {
  // Before the cached uploads end: the table is one more weight the worker may hold.
  const auto [table, has_output] = token_embedding(model.get());
  auto moved = datapath::move_embedding_to_worker(table, has_output, embedding_device);
  if (moved.is_ok()) model.get_deleter().worker_embedding = moved->buffer;
  const std::string dev = ggml_backend_dev_name(embedding_device);
  if (!moved.is_ok()) {
    log::warn("engine",
              "token embedding stays on the head, which sends each batch's rows instead: " + moved.status().message() +
                  " (the plan counts it there: check the worker's free memory against `tandem plan`)");
  } else if (!moved->moved) {
    log::info("engine", "token embedding stays on the head: " + moved->why_not);
  } else {
    log::info("engine", "token embedding (" + format_bytes(moved->bytes) + ") on " + dev +
                            ", which gathers each batch's rows from the token ids");
  }
}

// Ends the cached uploads and logs what they did.
void finish_cached_loads() {
  const CachedUploadStats st = finish_cached_uploads();
  char line[320];
  std::snprintf(line, sizeof line,
                "%llu weights (%.2f GiB) loaded from the workers' caches, %llu sent whole; hashing ran %.1f s (%llu "
                "hashes remembered)",
                static_cast<unsigned long long>(st.markers), static_cast<double>(st.marker_bytes) / (1ull << 30),
                static_cast<unsigned long long>(st.fallbacks), st.hash_s,
                static_cast<unsigned long long>(st.remembered));
  std::string said = line;
  if (st.reads_skipped > 0) {
    std::snprintf(
        line, sizeof line, "; without mmap, %llu of libllama's reads skipped (%.2f GiB the head did not read)",
        static_cast<unsigned long long>(st.reads_skipped), static_cast<double>(st.bytes_not_read) / (1ull << 30));
    said += line;
    if (st.reads_completed > 0) {
      said += ", " + std::to_string(st.reads_completed) + " of them made after all (sent whole)";
    }
  }
  log::info("engine", said);
}

}  // namespace

Result<ModelPtr> load_model(const LoadOptions& o) {
  llama_backend_init();
  // Before anything reaches ggml: a split whose data path ggml bypasses would compute on inputs
  // never written, so the engine refuses to load at all.
  if (Status s = datapath::check_interposition(); !s.is_ok()) return s;
  take_last_llama_error();
  auto info = plan::read_model_info(o.model);
  if (!info.is_ok()) return info.status();
  const int n_layer = static_cast<int>(info->n_layer);
  const Placement& p = o.placement;
  if (p.cpu_layers < 0 || p.cpu_layers > n_layer) {
    return Status::invalid_argument("CPU layers must be in 0.." + std::to_string(n_layer) + ", got " +
                                    std::to_string(p.cpu_layers));
  }
  auto devices = collect_devices(p);
  if (!devices.is_ok()) return devices.status();

  llama_model_params mp = llama_model_default_params();
  if (p.meta_tensor_split && p.ffn_tensor_split) {
    return Status::invalid_argument("choose one tensor split: llama.cpp's (meta) or the FFN split");
  }
  if (p.tensor_parallel() && (p.cpu_layers != 0 || devices->size() < 2)) {
    return Status::invalid_argument(
        "the tensor split runs every layer on every offload device: give two or more devices (--rpc) "
        "and no CPU layers (" +
        std::to_string(devices->size()) + " device(s), " + std::to_string(p.cpu_layers) + " CPU layer(s))");
  }
  auto device_list = model_devices(p, info.value(), devices.value());
  if (!device_list.is_ok()) return device_list.status();
  mp.devices = device_list->data();
  mp.split_mode = p.meta_tensor_split ? LLAMA_SPLIT_MODE_TENSOR : LLAMA_SPLIT_MODE_LAYER;
  mp.use_extra_bufts = p.cpu_weight_repack;
  // Without mmap as on a device that cannot map files: libllama then reads huge CPU tensors whole
  // too, rather than through a mapping on demand.
  mp.load_mode = p.mmap ? LLAMA_LOAD_MODE_AUTO : LLAMA_LOAD_MODE_NONE;
  if (!p.mmap) mp.lazy_mode = LLAMA_LAZY_MODE_OFF;
  // llama.cpp counts the output head as one more layer, offloaded with the last device.
  mp.n_gpu_layers = devices->empty() ? 0 : n_layer + 1 - p.cpu_layers;
  std::vector<float> split(llama_max_devices(), 0.0f);
  TANDEM_RETURN_IF_ERROR(set_layer_split(p, devices->size(), n_layer, split, mp));
  std::vector<llama_model_tensor_buft_override> overrides = tensor_overrides(p, devices.value());
  if (!overrides.empty()) mp.tensor_buft_overrides = overrides.data();
  std::function<bool(float)> progress = o.progress;
  if (progress) {
    mp.progress_callback = [](float f, void* user) { return (*static_cast<std::function<bool(float)>*>(user))(f); };
    mp.progress_callback_user_data = &progress;
  }
  ggml_backend_dev_t embedding_device = embedding_device_of(p, devices.value());
  const bool cached = !p.cache_listings.empty() && !p.device_layers.empty() && !p.tensor_parallel();
  if (cached) {
    TANDEM_RETURN_IF_ERROR(start_cached_loads(o, devices.value(), device_list.value(), embedding_device != nullptr));
  }
  ModelPtr model(llama_model_load_from_file(o.model.c_str(), mp));
  if (model && cached) complete_skipped_reads();
  if (model && embedding_device != nullptr) move_embedding(model, embedding_device);
  if (cached) finish_cached_loads();
  if (!model) return Status::invalid_argument(with_llama_reason(o.model + ": loading the model failed"));
  return model;
}

}  // namespace tandem::engine
