// A stream of tandem's own on a GPU, with page-locked host memory to stage copies from: the
// RPC child queues the head's step inputs on one (datapath/input_writes.h), the head its own GPUs'
// (datapath/local_inputs.h). A copy from pageable memory would wait for the stream, which is the
// wait these exist to avoid.
#pragma once

#include <cstddef>
#include <cstdint>

#include "ggml-backend.h"

namespace tandem::datapath {

struct DeviceStream {
  ggml_backend_t backend = nullptr;  // nullptr: this buffer type gets no stream (not a GPU's own)
  ggml_backend_buffer_t arena = nullptr;
  uint8_t* base = nullptr;
  size_t size = 0;
  ggml_backend_event_t event = nullptr;  // with_event, where the device has events
};

// Opens a stream on the device whose own (default) buffer type is `buft`, with `arena_bytes` of
// page-locked memory; an empty one for any other buffer type, a device that is not a GPU or has
// no page-locked memory, or when any part fails.
DeviceStream open_device_stream(ggml_backend_buffer_type_t buft, size_t arena_bytes, bool with_event);
// Waits for what the stream holds and frees it.
void close_device_stream(DeviceStream& s);

// `bytes` bytes at `data` in `buffer`, as a tensor that ggml's copies accept whatever the layout of
// the tensor the bytes belong to.
ggml_tensor raw_bytes(ggml_backend_buffer_t buffer, void* data, uint64_t bytes);

}  // namespace tandem::datapath
