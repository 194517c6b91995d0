// One interposer of ggml's `ggml_backend_tensor_set` for the whole process, shared by the
// components that need to see data on its way into a buffer: the engine's cached uploads
// (engine/cached_upload.h) and asynchronous RPC writes (engine/rpc_writes.h) on the head, the
// worker's cache loader (worker/cache_loader.h) and input writes (worker/input_writes.h) in the
// RPC child. A library resolves the symbol to the executable's definition first because the
// executable links a ggml library that calls it (ld then exports it); `interposed` says whether
// that held in this process.
#pragma once

#include <cstddef>

struct ggml_tensor;

namespace tandem {

// Returns true when it placed the data itself; false lets ggml's own function do it.
using TensorSetHook = bool (*)(ggml_tensor* tensor, const void* data, size_t offset, size_t size);

// Adds `hook` after those installed; each call goes to the hooks in that order until one places
// the data. At most four at a time: false when full (or already installed).
bool add_tensor_set_hook(TensorSetHook hook);
// Removes `hook` if installed. The caller makes sure no call is inside it any more.
void remove_tensor_set_hook(TensorSetHook hook);

// ggml's own `ggml_backend_tensor_set`, bypassing the hook; nullptr when ggml is not loaded.
using TensorSetFn = void (*)(ggml_tensor*, const void*, size_t, size_t);
TensorSetFn real_tensor_set();

// True when calls to `ggml_backend_tensor_set` from ggml's libraries reach this interposer.
bool tensor_set_interposed();

}  // namespace tandem
