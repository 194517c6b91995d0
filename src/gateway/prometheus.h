// Prometheus' text exposition format (0.0.4): each metric family once, its HELP and TYPE lines
// first, then all of its samples, so that `promtool check metrics` accepts the page.
#pragma once

#include <array>
#include <cstdint>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

namespace tandem::gateway::prometheus {

// `value` as a label value: backslash, double quote and newline escaped.
std::string label(const std::string& value);

struct Sample {
  std::string labels;  // `a="x",b="y"` (escaped with label()), or "" for none
  double value = 0;
};

// One family: "# HELP", "# TYPE" and a line per sample. `type`: counter or gauge.
std::string family(const std::string& name, const char* type, const std::string& help,
                   const std::vector<Sample>& samples);

// Cumulative buckets of one histogram series, with its sum and count.
template <size_t N>
struct Histogram {
  static constexpr size_t kBuckets = N;
  std::array<uint64_t, N> counts{};  // observations <= each bound
  uint64_t count = 0;
  double sum = 0;
  void observe(const std::array<double, N>& bounds, double v) {
    for (size_t i = 0; i < N; ++i) counts[i] += v <= bounds[i] ? 1 : 0;
    ++count;
    sum += v;
  }
};

// A number as Prometheus reads it: the shortest text that reads back the same value.
std::string format_number(double v);

// One histogram family over series keyed by their labels (e.g. `endpoint="chat"`).
template <size_t N>
std::string histogram_family(const std::string& name, const std::string& help, const std::array<double, N>& bounds,
                             const std::vector<std::pair<std::string, Histogram<N>>>& series) {
  std::ostringstream o;
  o << "# HELP " << name << " " << help << "\n# TYPE " << name << " histogram\n";
  for (const auto& [labels, h] : series) {
    const std::string sep = labels.empty() ? "" : labels + ",";
    for (size_t i = 0; i < N; ++i)
      o << name << "_bucket{" << sep << "le=\"" << format_number(bounds[i]) << "\"} " << h.counts[i] << "\n";
    o << name << "_bucket{" << sep << "le=\"+Inf\"} " << h.count << "\n";
    const std::string braces = labels.empty() ? "" : "{" + labels + "}";
    o << name << "_sum" << braces << " " << format_number(h.sum) << "\n";
    o << name << "_count" << braces << " " << h.count << "\n";
  }
  return o.str();
}

}  // namespace tandem::gateway::prometheus
