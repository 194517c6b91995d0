#include "common/units.h"

#include <cctype>
#include <cmath>
#include <cstdio>
#include <cstdlib>

namespace tandem {

std::string format_bytes(uint64_t bytes) {
  static const char* const units[] = {"B", "KiB", "MiB", "GiB", "TiB", "PiB"};
  double v = static_cast<double>(bytes);
  int u = 0;
  while (v >= 1024.0 && u < 5) {
    v /= 1024.0;
    ++u;
  }
  char buf[32];
  if (u == 0) {
    std::snprintf(buf, sizeof buf, "%llu B", static_cast<unsigned long long>(bytes));
  } else {
    std::snprintf(buf, sizeof buf, v < 10 ? "%.2f %s" : v < 100 ? "%.1f %s" : "%.0f %s", v, units[u]);
  }
  return buf;
}

std::string format_count(double count) {
  static const char* const suffix[] = {"", "K", "M", "B", "T"};
  int s = 0;
  while (std::fabs(count) >= 1000.0 && s < 4) {
    count /= 1000.0;
    ++s;
  }
  char buf[32];
  std::snprintf(buf, sizeof buf, s == 0 ? "%.0f%s" : "%.1f%s", count, suffix[s]);
  return buf;
}

Result<uint64_t> parse_bytes(const std::string& text, bool require_unit) {
  const char* p = text.c_str();
  char* end = nullptr;
  double value = std::strtod(p, &end);
  if (end == p || !std::isfinite(value) || value < 0) {
    return Status::invalid_argument("'" + text + "' is not a size (expected e.g. 128GiB, 96GB, 512MiB)");
  }
  std::string unit;
  for (const char* q = end; *q; ++q) {
    if (!std::isspace(static_cast<unsigned char>(*q))) unit += static_cast<char>(std::toupper(*q));
  }
  if (unit.empty() && require_unit && value != 0) {
    return Status::invalid_argument("'" + text + "' has no unit: write e.g. " + text + "GiB or " + text +
                                    "GB (B for a count of bytes)");
  }
  double mult = 1;
  if (unit.empty() || unit == "B")
    mult = 1;
  else if (unit == "K" || unit == "KIB")
    mult = 1024.0;
  else if (unit == "M" || unit == "MIB")
    mult = 1024.0 * 1024;
  else if (unit == "G" || unit == "GIB")
    mult = 1024.0 * 1024 * 1024;
  else if (unit == "T" || unit == "TIB")
    mult = 1024.0 * 1024 * 1024 * 1024;
  else if (unit == "KB")
    mult = 1e3;
  else if (unit == "MB")
    mult = 1e6;
  else if (unit == "GB")
    mult = 1e9;
  else if (unit == "TB")
    mult = 1e12;
  else
    return Status::invalid_argument("'" + text + "': unknown unit '" + unit +
                                    "' (use B, KiB, MiB, GiB, TiB, KB, MB, GB or TB)");
  const double bytes = value * mult;
  if (bytes > 1.8e19) return Status::invalid_argument("'" + text + "' is too large");
  return static_cast<uint64_t>(std::llround(bytes));
}

}  // namespace tandem
