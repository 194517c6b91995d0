#include "datapath/device_stream.h"

#include "ggml.h"

namespace tandem::datapath {

DeviceStream open_device_stream(ggml_backend_buffer_type_t buft, size_t arena_bytes, bool with_event) {
  DeviceStream s;
  ggml_backend_dev_t dev = ggml_backend_buft_get_device(buft);
  if (dev == nullptr || ggml_backend_dev_buffer_type(dev) != buft) return s;
  const auto type = ggml_backend_dev_type(dev);
  if (type != GGML_BACKEND_DEVICE_TYPE_GPU && type != GGML_BACKEND_DEVICE_TYPE_IGPU) return s;
  ggml_backend_buffer_type_t host = ggml_backend_dev_host_buffer_type(dev);
  if (host == nullptr) return s;
  s.arena = ggml_backend_buft_alloc_buffer(host, arena_bytes);
  if (s.arena == nullptr) return DeviceStream{};
  s.backend = ggml_backend_dev_init(dev, nullptr);
  if (s.backend == nullptr) {
    ggml_backend_buffer_free(s.arena);
    return DeviceStream{};
  }
  s.base = static_cast<uint8_t*>(ggml_backend_buffer_get_base(s.arena));
  s.size = arena_bytes;
  if (with_event) {
    // What the device's properties promise: its backends record and wait for events (the
    // scheduler relies on the same for pipeline parallelism).
    ggml_backend_dev_props props;
    ggml_backend_dev_get_props(dev, &props);
    if (props.caps.events) s.event = ggml_backend_event_new(dev);
  }
  return s;
}

void close_device_stream(DeviceStream& s) {
  if (s.backend != nullptr) {
    ggml_backend_synchronize(s.backend);
    if (s.event != nullptr) ggml_backend_event_free(s.event);
    ggml_backend_free(s.backend);
  }
  if (s.arena != nullptr) ggml_backend_buffer_free(s.arena);
  s = DeviceStream{};
}

ggml_tensor raw_bytes(ggml_backend_buffer_t buffer, void* data, uint64_t bytes) {
  ggml_tensor t{};
  t.type = GGML_TYPE_I8;
  t.buffer = buffer;
  t.data = data;
  t.ne[0] = static_cast<int64_t>(bytes);
  t.ne[1] = t.ne[2] = t.ne[3] = 1;
  t.nb[0] = 1;
  t.nb[1] = t.nb[2] = t.nb[3] = bytes;
  return t;
}

}  // namespace tandem::datapath
