// The states of `tandem serve` (gateway/serve_state.h): one name table, read both ways.
#include "gateway/serve_state.h"

#include <gtest/gtest.h>

#include <set>
#include <string>

#include "gateway/metrics.h"

namespace tandem::gateway {
namespace {

TEST(ServeState, EveryNameReadsBackAsItsState) {
  std::set<std::string_view> names;
  for (const ServeStateName& s : kServeStateNames) {
    EXPECT_EQ(serve_state_name(s.state), s.name);
    EXPECT_EQ(serve_state_from_name(s.name), s.state);
    EXPECT_TRUE(names.insert(s.name).second) << s.name;
  }
  EXPECT_EQ(names.size(), 6u);
  EXPECT_EQ(serve_state_from_name("loading 41%"), std::nullopt);
  EXPECT_EQ(serve_state_from_name(""), std::nullopt);
}

// The names operators and dashboards know, unchanged.
TEST(ServeState, TheNamesAreTheDocumentedOnes) {
  EXPECT_EQ(serve_state_name(ServeState::starting), "starting");
  EXPECT_EQ(serve_state_name(ServeState::loading), "loading");
  EXPECT_EQ(serve_state_name(ServeState::ready), "ready");
  EXPECT_EQ(serve_state_name(ServeState::degraded), "degraded");
  EXPECT_EQ(serve_state_name(ServeState::recovering), "recovering");
  EXPECT_EQ(serve_state_name(ServeState::draining), "draining");
}

// tandem_state has one series per state, 1 for the current one.
TEST(ServeState, TheStateMetricHasOneSeriesEachAndOneIsSet) {
  Metrics m;
  const std::string text = m.render(ServeState::degraded);
  for (const ServeStateName& s : kServeStateNames) {
    const std::string series = "tandem_state{state=\"" + std::string(s.name) + "\"} ";
    const size_t at = text.find(series);
    ASSERT_NE(at, std::string::npos) << series;
    EXPECT_EQ(text.substr(at + series.size(), 1), s.state == ServeState::degraded ? "1" : "0") << series;
  }
}

}  // namespace
}  // namespace tandem::gateway
