#include "gateway/limiter.h"

#include <gtest/gtest.h>

namespace tandem::gateway {
namespace {

TEST(Limiter, ConcurrencyLimitReleasesOnRelease) {
  Limiter l;
  const KeyLimits lim{0, 2};
  EXPECT_TRUE(l.acquire("k", lim).admitted);
  EXPECT_TRUE(l.acquire("k", lim).admitted);
  Admission third = l.acquire("k", lim);
  EXPECT_FALSE(third.admitted);
  EXPECT_GE(third.retry_after_s, 1);
  EXPECT_NE(third.reason.find("limit 2"), std::string::npos);
  EXPECT_TRUE(l.acquire("other", lim).admitted);  // per key
  l.release("k");
  EXPECT_TRUE(l.acquire("k", lim).admitted);
}

TEST(Limiter, RequestsPerMinuteSlideWithTime) {
  Limiter l;
  const KeyLimits lim{3, 0};
  const auto t0 = Limiter::Clock::now();
  for (int i = 0; i < 3; ++i) {
    EXPECT_TRUE(l.acquire("k", lim, t0 + std::chrono::seconds(i)).admitted);
    l.release("k");
  }
  Admission refused = l.acquire("k", lim, t0 + std::chrono::seconds(10));
  EXPECT_FALSE(refused.admitted);
  EXPECT_EQ(refused.retry_after_s, 51);  // the first admission leaves the window at t0+60
  EXPECT_TRUE(l.acquire("k", lim, t0 + std::chrono::seconds(61)).admitted);
}

}  // namespace
}  // namespace tandem::gateway
