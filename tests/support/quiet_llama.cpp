// Linked into test binaries that load models: libllama's info log would drown the test output.
#include "engine/llama_log.h"

namespace {
const bool quiet = [] {
  tandem::engine::set_llama_verbosity(0);
  return true;
}();
}  // namespace
