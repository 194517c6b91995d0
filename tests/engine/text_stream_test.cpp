#include "engine/text_stream.h"

#include <gtest/gtest.h>

namespace tandem::engine {
namespace {

// Feeds `pieces` and returns everything emitted, as take_ready() then take_rest() give it.
std::string feed(TextStream& s, const std::vector<std::string>& pieces, bool* stopped) {
  std::string out;
  *stopped = false;
  for (const auto& p : pieces) {
    if (s.append(p)) {
      *stopped = true;
      break;
    }
    out += s.take_ready();
  }
  return out + s.take_rest();
}

TEST(TextStream, AStopStringInsideOneTokenCutsTheText) {
  TextStream s({"END"});
  bool stopped;
  EXPECT_EQ(feed(s, {"abc", "xENDy", "more"}, &stopped), "abcx");
  EXPECT_TRUE(stopped);
}

TEST(TextStream, AStopStringStraddlingTokensIsFoundAndNeverPartlyEmitted) {
  TextStream s({"<|stop|>"});
  EXPECT_FALSE(s.append("hello <|"));
  EXPECT_EQ(s.take_ready(), "hello ");  // "<|" could begin the stop string: held back
  EXPECT_FALSE(s.append("st"));
  EXPECT_EQ(s.take_ready(), "");
  EXPECT_TRUE(s.append("op|> tail"));
  EXPECT_EQ(s.take_rest(), "");
  EXPECT_EQ(s.emitted(), "hello ");
}

TEST(TextStream, HeldBackTextIsReleasedWhenItStopsMatching) {
  TextStream s({"STOP"});
  EXPECT_FALSE(s.append("a ST"));
  EXPECT_EQ(s.take_ready(), "a ");
  EXPECT_FALSE(s.append("AR"));
  EXPECT_EQ(s.take_ready(), "STAR");
}

TEST(TextStream, TheEarliestOfSeveralStopStringsWins) {
  TextStream s({"zz", "b"});
  bool stopped;
  EXPECT_EQ(feed(s, {"aab", "zz"}, &stopped), "aa");
  EXPECT_TRUE(stopped);
}

TEST(TextStream, MultiByteCharactersSplitAcrossTokensAreEmittedWhole) {
  TextStream s;
  const std::string euro = "\xE2\x82\xAC";  // €
  EXPECT_FALSE(s.append("x" + euro.substr(0, 1)));
  EXPECT_EQ(s.take_ready(), "x");
  EXPECT_FALSE(s.append(euro.substr(1, 1)));
  EXPECT_EQ(s.take_ready(), "");
  EXPECT_FALSE(s.append(euro.substr(2) + "y"));
  EXPECT_EQ(s.take_ready(), euro + "y");
}

TEST(TextStream, AnIncompleteCharacterAtTheEndIsDropped) {
  TextStream s;
  EXPECT_FALSE(s.append("ok\xF0\x9F"));
  EXPECT_EQ(s.take_ready(), "ok");
  EXPECT_EQ(s.take_rest(), "");
}

TEST(Utf8, CompletePrefix) {
  EXPECT_EQ(utf8_complete_prefix("abc"), 3u);
  EXPECT_EQ(utf8_complete_prefix("a\xC3"), 1u);
  EXPECT_EQ(utf8_complete_prefix("a\xC3\xA9"), 3u);
  EXPECT_EQ(utf8_complete_prefix("\xF0\x9F\x98"), 0u);
  EXPECT_EQ(utf8_complete_prefix("\xF0\x9F\x98\x80"), 4u);
}

}  // namespace
}  // namespace tandem::engine
