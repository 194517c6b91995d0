#include "cluster/devices.h"

#include <cstring>

#include "ggml-backend.h"

namespace tandem::cluster {

std::vector<DeviceInfo> local_devices() {
  std::vector<DeviceInfo> out;
  for (size_t i = 0; i < ggml_backend_dev_count(); ++i) {
    ggml_backend_dev_t dev = ggml_backend_dev_get(i);
    ggml_backend_reg_t reg = ggml_backend_dev_backend_reg(dev);
    if (reg != nullptr && std::strcmp(ggml_backend_reg_name(reg), "RPC") == 0) continue;
    DeviceInfo d;
    d.name = ggml_backend_dev_name(dev);
    d.description = ggml_backend_dev_description(dev);
    switch (ggml_backend_dev_type(dev)) {
      case GGML_BACKEND_DEVICE_TYPE_CPU:
        d.type = "cpu";
        break;
      case GGML_BACKEND_DEVICE_TYPE_GPU:
        d.type = "gpu";
        break;
      case GGML_BACKEND_DEVICE_TYPE_IGPU:
        d.type = "igpu";
        break;
      default:
        d.type = "accel";
        break;
    }
    size_t free = 0, total = 0;
    ggml_backend_dev_memory(dev, &free, &total);
    d.free_bytes = free;
    d.total_bytes = total;
    out.push_back(std::move(d));
  }
  return out;
}

}  // namespace tandem::cluster
