// What kind of device ggml's registry calls a device, for the engine's parts that see ggml only.
#pragma once

struct ggml_backend_device;

namespace tandem::engine {

// True for the devices of ggml's RPC backend (remote servers), whatever their endpoint.
bool is_rpc_device(ggml_backend_device* dev);

}  // namespace tandem::engine
