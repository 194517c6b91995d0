#include "common/paths.h"

#include <unistd.h>

#include <climits>

namespace tandem {

std::string self_executable() {
  char buf[PATH_MAX];
  const ssize_t n = ::readlink("/proc/self/exe", buf, sizeof buf - 1);
  if (n <= 0) return "";
  return std::string(buf, static_cast<size_t>(n));
}

std::string sibling_program(const std::string& name) {
  const std::string self = self_executable();
  const size_t slash = self.rfind('/');
  if (slash == std::string::npos) return name;
  return self.substr(0, slash + 1) + name;
}

}  // namespace tandem
