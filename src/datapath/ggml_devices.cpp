#include "datapath/ggml_devices.h"

#include <cstring>

#include "ggml-backend.h"

namespace tandem::datapath {

// ggml's RPC devices belong to one registry named "RPC"; their buffer types are named
// "RPC<device>[<endpoint>]".
// pinned llama.cpp: text ggml/src/ggml-rpc/ggml-rpc.cpp return ctx ? ctx->name.c_str() : "RPC";
// pinned llama.cpp: text ggml/src/ggml-rpc/ggml-rpc.cpp /* .reg = */ ggml_backend_rpc_reg(),
// pinned llama.cpp: text ggml/src/ggml-rpc/ggml-rpc.cpp std::string buft_name = "RPC" + std::to_string(device) + "[" + std::string(endpoint) + "]";
bool is_rpc_device(ggml_backend_dev_t dev) {
  ggml_backend_reg_t reg = dev != nullptr ? ggml_backend_dev_backend_reg(dev) : nullptr;
  return reg != nullptr && std::strcmp(ggml_backend_reg_name(reg), "RPC") == 0;
}

std::string rpc_endpoint(const char* name) {
  if (name == nullptr || std::strncmp(name, "RPC", 3) != 0) return "";
  const char* open = std::strchr(name, '[');
  const char* close = open != nullptr ? std::strrchr(open, ']') : nullptr;
  return close != nullptr ? std::string(open + 1, close) : "";
}

}  // namespace tandem::datapath
