#include "common/progress.h"

#include <algorithm>

#include <gtest/gtest.h>

namespace tandem {
namespace {

std::string read_all(std::FILE* f) {
  std::rewind(f);
  std::string s;
  char buf[256];
  while (size_t n = std::fread(buf, 1, sizeof buf, f)) s.append(buf, n);
  return s;
}

TEST(Progress, FormatsBytesPercentRateAndEta) {
  ProgressSnapshot p{512ull << 20, 1024ull << 20, 64.0 * (1 << 20), 8};
  EXPECT_EQ(format_progress(p), "512 MiB of 1.00 GiB (50%), 64.0 MiB/s, 8 s left");
  p.eta_s = 125;
  EXPECT_EQ(format_progress(p), "512 MiB of 1.00 GiB (50%), 64.0 MiB/s, 2 min 05 s left");
}

TEST(Progress, LogLinesComeEveryFewSecondsWithRateAndEta) {
  std::FILE* f = std::tmpfile();
  ProgressMeter m("loading", f, /*tty=*/false, std::chrono::seconds(5));
  const auto t0 = ProgressMeter::Clock::now();
  const uint64_t mib = 1 << 20;
  for (int s = 0; s <= 10; ++s) m.update(s * 100 * mib, 2000 * mib, t0 + std::chrono::seconds(s));
  m.finish(t0 + std::chrono::seconds(11));
  const std::string out = read_all(f);
  std::fclose(f);
  // Printed at 0 s, 5 s and 10 s, then the final line.
  EXPECT_EQ(std::count(out.begin(), out.end(), '\n'), 4) << out;
  EXPECT_NE(out.find("loading: 1000 MiB of 1.95 GiB (50%), 100 MiB/s, 10 s left"), std::string::npos) << out;
  EXPECT_NE(out.find("done in 11.0 s"), std::string::npos) << out;
  EXPECT_NEAR(m.snapshot().rate, 100.0 * mib, 1.0);
}

TEST(Progress, TerminalModeRedrawsOneLine) {
  std::FILE* f = std::tmpfile();
  ProgressMeter m("loading", f, /*tty=*/true);
  m.update(1, 4);
  const std::string out = read_all(f);
  std::fclose(f);
  EXPECT_EQ(out.rfind("\r\033[Kloading [", 0), 0u) << out;
  EXPECT_EQ(out.find('\n'), std::string::npos);
}

}  // namespace
}  // namespace tandem
