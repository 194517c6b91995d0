#include "worker/build_info.h"

#include <cstring>

#include "common/build_info.h"
#include "ggml-backend.h"

namespace tandem::worker {
namespace {

// The CPU backend lists the instruction sets it was built with through a registry function.
std::string cpu_features() {
  ggml_backend_reg_t cpu = ggml_backend_reg_by_name("CPU");
  if (cpu == nullptr) return "";
  auto get = reinterpret_cast<ggml_backend_get_features_t>(
      ggml_backend_reg_get_proc_address(cpu, "ggml_backend_get_features"));
  if (get == nullptr) return "";
  std::string out;
  for (const ggml_backend_feature* f = get(cpu); f != nullptr && f->name != nullptr; ++f) {
    if (std::strcmp(f->value, "1") != 0) continue;
    out += (out.empty() ? "" : " ") + std::string(f->name);
  }
  return out;
}

}  // namespace

BuildInfo build_info() {
  BuildInfo b;
  b.tandem_version = TANDEM_VERSION;
  b.llama_tag = TANDEM_LLAMA_TAG;
  b.llama_commit = TANDEM_LLAMA_COMMIT;
  for (size_t i = 0; i < ggml_backend_reg_count(); ++i)
    b.backends.emplace_back(ggml_backend_reg_name(ggml_backend_reg_get(i)));
  b.cpu_features = cpu_features();
  return b;
}

}  // namespace tandem::worker
