#include "engine/ggml_devices.h"

#include <cstring>

#include "ggml-backend.h"

namespace tandem::engine {

bool is_rpc_device(ggml_backend_dev_t dev) {
  ggml_backend_reg_t reg = dev != nullptr ? ggml_backend_dev_backend_reg(dev) : nullptr;
  return reg != nullptr && std::strcmp(ggml_backend_reg_name(reg), "RPC") == 0;
}

}  // namespace tandem::engine
