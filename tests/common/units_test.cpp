#include "common/units.h"

#include <gtest/gtest.h>

namespace tandem {
namespace {

TEST(ParseBytes, Table) {
  struct Case {
    const char* text;
    uint64_t bytes;
  } cases[] = {
      {"4096", 4096},
      {"512MiB", 512ull << 20},
      {"128GiB", 128ull << 30},
      {"128 GiB", 128ull << 30},
      {"96GB", 96000000000},
      {"1.5T", 3ull << 39},
      {"2k", 2048},
      {"10 B", 10},
  };
  for (const auto& c : cases) {
    auto r = parse_bytes(c.text);
    ASSERT_TRUE(r.is_ok()) << c.text << ": " << r.status().to_string();
    EXPECT_EQ(r.value(), c.bytes) << c.text;
  }
}

TEST(ParseBytes, RejectsGarbageWithMessage) {
  for (const char* text : {"", "GiB", "-5GiB", "12 parsecs", "nan"}) {
    auto r = parse_bytes(text);
    ASSERT_FALSE(r.is_ok()) << text;
    EXPECT_EQ(r.status().code(), StatusCode::invalid_argument);
    EXPECT_NE(r.status().message().find(text), std::string::npos) << r.status().message();
  }
}

TEST(FormatBytes, UsesBinaryUnits) {
  EXPECT_EQ(format_bytes(0), "0 B");
  EXPECT_EQ(format_bytes(1023), "1023 B");
  EXPECT_EQ(format_bytes(1536), "1.50 KiB");
  EXPECT_EQ(format_bytes(128ull << 30), "128 GiB");
}

TEST(FormatCount, UsesDecimalSuffixes) {
  EXPECT_EQ(format_count(999), "999");
  EXPECT_EQ(format_count(428.3e9), "428.3B");
  EXPECT_EQ(format_count(23e9), "23.0B");
}

}  // namespace
}  // namespace tandem

#include "common/strings.h"

namespace tandem {
namespace {

TEST(SplitCommas, DropsSpacesAndEmptyItems) {
  EXPECT_EQ(split_commas("a, b,,c "), (std::vector<std::string>{"a", "b", "c"}));
  EXPECT_TRUE(split_commas("").empty());
}

}  // namespace
}  // namespace tandem
