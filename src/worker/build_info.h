// What this binary was built from and with.
#pragma once

#include <string>
#include <vector>

namespace tandem::worker {

struct BuildInfo {
  std::string tandem_version;
  std::string llama_tag;              // the pinned release, or "unpinned"
  std::string llama_commit;           // as recorded by llama.cpp's own build
  std::vector<std::string> backends;  // ggml backends compiled in, e.g. CPU, RPC, CUDA
  std::string cpu_features;           // the CPU backend's features, e.g. "AVX2 FMA F16C"
};

BuildInfo build_info();

}  // namespace tandem::worker
