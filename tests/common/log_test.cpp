#include "common/log.h"

#include <gtest/gtest.h>

namespace tandem::log {
namespace {

TEST(Log, TextLineHasTimeComponentMessageAndFields) {
  EXPECT_EQ(render(Format::text, "T", Level::info, "worker", "accepted", {{"peer", "10.0.0.1:5"}, {"why", "a b"}}),
            "T worker: accepted peer=10.0.0.1:5 why=\"a b\"");
  EXPECT_EQ(render(Format::text, "T", Level::warn, "serve", "no auth", {}), "T serve: WARNING: no auth");
  EXPECT_EQ(render(Format::text, "T", Level::error, "", "x", {}), "T ERROR: x");
}

TEST(Log, TextRecordNeverSpansTwoLines) {
  EXPECT_EQ(render(Format::text, "T", Level::info, "c", "one\ntwo", {}), "T c: one two");
}

TEST(Log, JsonLineIsOneObjectWithTheFourKeysFirst) {
  EXPECT_EQ(
      render(Format::json, "2026-12-02T10:20:33.125Z", Level::warn, "serve", "say \"hi\"\n", {{"worker", "box-b"}}),
      "{\"ts\":\"2026-12-02T10:20:33.125Z\",\"level\":\"warn\",\"component\":\"serve\",\"msg\":\"say \\\"hi\\\"\\n\","
      "\"worker\":\"box-b\"}");
}

TEST(Log, JsonFieldsCannotReplaceTheRecordKeys) {
  const std::string line = render(Format::json, "T", Level::info, "c", "m", {{"msg", "forged"}, {"level", "error"}});
  EXPECT_EQ(line, "{\"ts\":\"T\",\"level\":\"info\",\"component\":\"c\",\"msg\":\"m\"}");
}

TEST(Log, JsonQuoteEscapesControlsAndReplacesInvalidUtf8) {
  EXPECT_EQ(json_quote(std::string("a\x01"
                                   "b")),
            "\"a\\u0001b\"");
  EXPECT_EQ(json_quote("caf\xc3\xa9"), "\"caf\xc3\xa9\"");
  EXPECT_EQ(json_quote("bad\xff"
                       "x"),
            "\"bad\\ufffdx\"");
  EXPECT_EQ(json_quote("\xc0\x80"), "\"\\ufffd\\ufffd\"");  // overlong NUL
  EXPECT_EQ(json_quote("\xe2\x82"), "\"\\ufffd\\ufffd\"");  // truncated sequence
}

TEST(Log, ParseFormat) {
  EXPECT_EQ(parse_format("json").value(), Format::json);
  EXPECT_EQ(parse_format("text").value(), Format::text);
  EXPECT_FALSE(parse_format("yaml").is_ok());
}

}  // namespace
}  // namespace tandem::log
