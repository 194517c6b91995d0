#include "gateway/prometheus.h"

#include <cmath>
#include <cstdio>
#include <cstdlib>

namespace tandem::gateway::prometheus {

std::string label(const std::string& value) {
  std::string out;
  for (char c : value) {
    if (c == '\\' || c == '"') out += '\\';
    if (c == '\n') {
      out += "\\n";
      continue;
    }
    out += c;
  }
  return out;
}

std::string format_number(double v) {
  if (std::isnan(v)) return "NaN";
  if (std::isinf(v)) return v > 0 ? "+Inf" : "-Inf";
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.17g", v);
  // Shortest text that reads back the same, so that 0.1 prints as 0.1.
  for (int precision = 1; precision < 17; ++precision) {
    char shorter[32];
    std::snprintf(shorter, sizeof shorter, "%.*g", precision, v);
    if (std::strtod(shorter, nullptr) == v) return shorter;
  }
  return buf;
}

std::string family(const std::string& name, const char* type, const std::string& help,
                   const std::vector<Sample>& samples) {
  std::string o = "# HELP " + name + " " + help + "\n# TYPE " + name + " " + type + "\n";
  for (const Sample& s : samples)
    o += name + (s.labels.empty() ? "" : "{" + s.labels + "}") + " " + format_number(s.value) + "\n";
  return o;
}

}  // namespace tandem::gateway::prometheus
