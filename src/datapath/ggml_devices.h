// What kind of device ggml's registry calls a device, for the engine's parts that see ggml only.
#pragma once

#include <string>

struct ggml_backend_device;

namespace tandem::datapath {

// True for the devices of ggml's RPC backend (remote servers), whatever their endpoint.
bool is_rpc_device(ggml_backend_device* dev);
// The endpoint in the name of an RPC device or buffer type ("RPC0[127.0.0.1:7071]" ->
// "127.0.0.1:7071"); "" for any other name.
std::string rpc_endpoint(const char* name);

}  // namespace tandem::datapath
