// libc's `fread`, replaced the way interpose.h replaces ggml's functions, for loads without mmap.
//
// libllama loads without mmap where a device cannot map files (an integrated CUDA GPU, such as
// GB10's) or when told to (`tandem engine --no-mmap`). It then reads each weight bound for another
// device's buffer whole, with one `fread` of the weight's bytes into a buffer of its own, and hands
// that buffer to `ggml_backend_tensor_set`. A weight that a worker loads from its own cache
// (engine/cached_upload.h) needs none of those bytes on the head: the hook installed here may skip
// such a read, leaving the buffer as it is and the stream where the read would have left it; the
// tensor-set hook then sends the worker its marker instead. It may also make a read itself, to
// choose how the kernel reads ahead around it.
//
// The definition lives in the executable, as the ggml ones do: libllama's calls to `fread` go
// through the dynamic linker, which resolves them to the executable first. With no hook installed
// it only forwards to libc's.
#pragma once

#include <cstddef>
#include <cstdio>

namespace tandem::datapath {

// True when it handled the read itself (skipped it, or made it through `real_fread`): `fread` then
// returns `*items`. False lets libc read.
using FileReadHook = bool (*)(void* ptr, size_t size, size_t n, FILE* stream, size_t* items);

// Installs `hook` for the whole process; nullptr uninstalls. One at a time. The caller makes sure no
// call is inside a hook it uninstalls.
void set_file_read_hook(FileReadHook hook);

// True when calls to `fread` from the process's libraries resolve to this file's definition.
bool file_read_interposed();

// libc's own `fread`, bypassing the hook.
size_t real_fread(void* ptr, size_t size, size_t n, FILE* stream);

}  // namespace tandem::datapath
