#include "worker/rpc_server.h"

#include <cstring>
#include <filesystem>
#include <thread>

#include "ggml-backend.h"
#include "ggml-rpc.h"

namespace tandem::worker {
namespace {

bool is_rpc(ggml_backend_dev_t dev) {
  ggml_backend_reg_t reg = ggml_backend_dev_backend_reg(dev);
  return reg != nullptr && std::strcmp(ggml_backend_reg_name(reg), "RPC") == 0;
}

Result<std::vector<ggml_backend_dev_t>> pick(const std::vector<std::string>& names) {
  std::vector<ggml_backend_dev_t> out;
  for (const auto& n : names) {
    ggml_backend_dev_t dev = ggml_backend_dev_by_name(n.c_str());
    if (dev == nullptr || is_rpc(dev)) {
      std::string avail;
      for (size_t i = 0; i < ggml_backend_dev_count(); ++i) {
        ggml_backend_dev_t d = ggml_backend_dev_get(i);
        if (!is_rpc(d)) avail += std::string(avail.empty() ? "" : ", ") + ggml_backend_dev_name(d);
      }
      return Status::invalid_argument("unknown device '" + n + "' (this machine has: " + avail + ")");
    }
    out.push_back(dev);
  }
  if (out.empty()) {  // as ggml-rpc-server: the accelerators, else the CPU
    for (size_t i = 0; i < ggml_backend_dev_count(); ++i) {
      ggml_backend_dev_t d = ggml_backend_dev_get(i);
      const auto t = ggml_backend_dev_type(d);
      if (!is_rpc(d) && (t == GGML_BACKEND_DEVICE_TYPE_GPU || t == GGML_BACKEND_DEVICE_TYPE_IGPU)) out.push_back(d);
    }
  }
  if (out.empty()) {
    ggml_backend_dev_t cpu = ggml_backend_dev_by_type(GGML_BACKEND_DEVICE_TYPE_CPU);
    if (cpu != nullptr) out.push_back(cpu);
  }
  if (out.empty()) return Status::not_found("no compute device found");
  return out;
}

}  // namespace

Result<std::vector<std::string>> resolve_devices(const std::vector<std::string>& names) {
  auto devs = pick(names);
  if (!devs.is_ok()) return devs.status();
  std::vector<std::string> out;
  for (auto* d : devs.value()) out.emplace_back(ggml_backend_dev_name(d));
  return out;
}

Status run_rpc_server(const RpcServerOptions& o) {
  auto devs = pick(o.devices);
  if (!devs.is_ok()) return devs.status();
  const char* cache = nullptr;
  if (!o.cache_dir.empty()) {
    std::error_code ec;
    std::filesystem::create_directories(o.cache_dir, ec);
    if (ec) return Status::invalid_argument("cache folder " + o.cache_dir + ": " + ec.message());
    cache = o.cache_dir.c_str();
  }
  const size_t threads = o.threads > 0 ? static_cast<size_t>(o.threads) : std::max(1u, std::thread::hardware_concurrency());
  ggml_backend_rpc_start_server(o.endpoint.c_str(), cache, threads, devs->size(), devs->data());
  return Status::unavailable("ggml's RPC server stopped");
}

}  // namespace tandem::worker
