#include "engine/build_info.h"

#include "build-info.h"
#include "common/build_info.h"
#include "ggml-backend.h"
#include "llama.h"

namespace tandem::engine {

BuildInfo build_info() {
  BuildInfo b;
  b.tandem_version = TANDEM_VERSION;
  b.llama_tag = TANDEM_LLAMA_TAG;
  b.llama_commit = TANDEM_LLAMA_COMMIT;  // llama.cpp records only a short hash
  for (size_t i = 0; i < ggml_backend_reg_count(); ++i) b.backends.emplace_back(ggml_backend_reg_name(ggml_backend_reg_get(i)));
  b.cpu_features = llama_print_system_info();
  return b;
}

}  // namespace tandem::engine
