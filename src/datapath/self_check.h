// The start-up proof that tandem's replacements of ggml's functions (datapath/interpose.h) are
// the ones ggml calls.
//
// A replacement works only while the dynamic linker resolves ggml's calls to the executable's
// definition. A calling library built with -Bsymbolic, an LTO build of ggml that binds its calls
// within a file, or a linker that stops exporting the executable's symbols would bypass tandem's
// versions silently: the split would then compute on inputs never written. So the engine and the
// RPC child check before they take work, and refuse to start otherwise.
#pragma once

#include "common/status.h"

namespace tandem::datapath {

// Checks every replaced function two ways: the dynamic linker resolves its name to tandem's
// definition, and ggml's own code reaches it — eight of the thirteen through calls ggml makes on a
// CPU backend from inside its libraries (tensor_set/get through the asynchronous fallbacks, the
// copy through ggml_backend_tensor_copy_async, a graph through ggml_backend_graph_compute and
// ggml's scheduler, a buffer freed by the scheduler). The other five ggml calls only from another
// library whose calls go through the resolution checked: tensor_memset, buffer_clear and
// buffer_copy_tensor from its RPC server or between two device buffers, tensor_copy_async from the
// meta device (the tensor splits), ggml_arange from libllama's graphs. The first call runs the
// check, before any hook is installed; later calls return its result. Errors name each function
// that is not reached and why.
Status check_interposition();

}  // namespace tandem::datapath
