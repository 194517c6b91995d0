#include "link/log.h"

#include <sys/time.h>

#include <cstdio>
#include <ctime>
#include <mutex>

namespace tandem::link {

void log_line(const std::string& line) {
  static std::mutex mutex;
  timeval tv{};
  ::gettimeofday(&tv, nullptr);
  tm t{};
  ::gmtime_r(&tv.tv_sec, &t);
  char stamp[96];
  std::snprintf(stamp, sizeof stamp, "%04d-%02d-%02dT%02d:%02d:%02d.%03dZ", t.tm_year + 1900, t.tm_mon + 1, t.tm_mday,
                t.tm_hour, t.tm_min, t.tm_sec, static_cast<int>(tv.tv_usec / 1000));
  std::lock_guard<std::mutex> lock(mutex);
  std::fprintf(stderr, "%s %s\n", stamp, line.c_str());
  std::fflush(stderr);
}

}  // namespace tandem::link
