// Fuzz target: a GGUF file as `tandem inspect` and the planner read it (plan/model_info.cpp over
// ggml's gguf reader). The input becomes an in-memory file reached through /proc/self/fd.
#include <sys/mman.h>
#include <unistd.h>

#include <cstddef>
#include <cstdint>
#include <string>

#include "plan/model_info.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static const int fd = ::memfd_create("fuzz.gguf", 0);
  if (fd < 0) return 0;
  if (::ftruncate(fd, 0) != 0 || ::pwrite(fd, data, size, 0) != static_cast<ssize_t>(size)) return 0;
  static const std::string path = "/proc/self/fd/" + std::to_string(fd);
  auto info = tandem::plan::read_model_info(path);
  if (info.is_ok()) (void)tandem::plan::format_model_info(info.value());
  return 0;
}
