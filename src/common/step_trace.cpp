#include "common/step_trace.h"

#include <fcntl.h>
#include <time.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>

namespace tandem {
namespace {

int trace_fd() {
  static const int fd = [] {
    const char* path = std::getenv("TANDEM_STEP_TRACE");
    if (path == nullptr || *path == '\0') return -1;
    return ::open(path, O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC, 0644);
  }();
  return fd;
}

}  // namespace

uint64_t step_trace_now() {
  timespec ts{};
  ::clock_gettime(CLOCK_MONOTONIC, &ts);
  return static_cast<uint64_t>(ts.tv_sec) * 1000000000ull + static_cast<uint64_t>(ts.tv_nsec);
}

void step_trace(const char* what, uint64_t start_ns, uint64_t end_ns, uint64_t bytes) {
  const int fd = trace_fd();
  if (fd < 0) return;
  char line[160];
  const int n = bytes > 0
                    ? std::snprintf(line, sizeof line, "%d %s %llu %llu %llu\n", static_cast<int>(::getpid()), what,
                                    static_cast<unsigned long long>(start_ns), static_cast<unsigned long long>(end_ns),
                                    static_cast<unsigned long long>(bytes))
                    : std::snprintf(line, sizeof line, "%d %s %llu %llu\n", static_cast<int>(::getpid()), what,
                                    static_cast<unsigned long long>(start_ns), static_cast<unsigned long long>(end_ns));
  if (n <= 0 || static_cast<size_t>(n) >= sizeof line) return;  // a `what` too long for a line
  // One write per line: O_APPEND keeps lines of several threads and processes whole.
  (void)!::write(fd, line, static_cast<size_t>(n));
}

}  // namespace tandem
