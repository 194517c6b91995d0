// Routing of libllama's and ggml's log output, and capture of the error that explains a failure.
#pragma once

#include <string>

namespace tandem::engine {

// 0: errors only (default), 1: also warnings, 2: everything libllama prints.
void set_llama_verbosity(int level);

// The last error line libllama or ggml logged on this process, "" if none; cleared by the call.
std::string take_last_llama_error();

// "what: <libllama's last error>", or just `what` when libllama logged none; takes the error.
std::string with_llama_reason(const std::string& what);

}  // namespace tandem::engine
