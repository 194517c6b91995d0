// The data path's one table of switches: flags, their dependencies, and the docs' copy of it.
#include "datapath/switches.h"

#include <gtest/gtest.h>

#include <fstream>
#include <set>
#include <sstream>
#include <string>

namespace tandem::datapath {
namespace {

TEST(Switches, EveryFlagIsOneSwitchOfItsOwnField) {
  std::set<std::string> flags;
  for (const DataPathSwitch& s : kDataPathSwitches) {
    EXPECT_TRUE(flags.insert(s.flag).second) << s.flag << " twice";
    for (const DataPathSwitch& other : kDataPathSwitches) {
      if (&other != &s) EXPECT_NE(other.field, s.field) << s.flag << " turns off what " << other.flag << " does";
    }
    EXPECT_EQ(find_data_path_switch(s.flag), &s);
    if (s.needs != nullptr) {
      const DataPathSwitch* container = find_data_path_switch(s.needs);
      ASSERT_NE(container, nullptr) << s.flag << " needs " << s.needs << ", which is not a switch";
      EXPECT_EQ(container->needs, nullptr) << "one level of containment only";
    }
  }
  EXPECT_EQ(find_data_path_switch("--no-such-switch"), nullptr);
}

TEST(Switches, AFlagTurnsItsMechanismOffAndWhatLivesInsideIt) {
  auto none = apply_switch_flags({});
  ASSERT_TRUE(none.is_ok());
  for (const DataPathSwitch& s : kDataPathSwitches)
    EXPECT_TRUE(none.value().*(s.field)) << s.flag << " is on by default";

  auto sync = apply_switch_flags({"--sync-rpc-writes"});
  ASSERT_TRUE(sync.is_ok());
  EXPECT_FALSE(sync.value().async_rpc_writes);
  EXPECT_FALSE(sync.value().reuse_inputs) << "the markers go through the queued writes";
  EXPECT_FALSE(sync.value().input_runs);
  EXPECT_FALSE(sync.value().worker_input_slots);
  EXPECT_TRUE(sync.value().queue_local_inputs) << "the head's own GPUs are another mechanism";
  EXPECT_TRUE(sync.value().local_input_slots);

  auto slots = apply_switch_flags({"--no-local-input-slots"});
  ASSERT_TRUE(slots.is_ok());
  EXPECT_FALSE(slots.value().local_input_slots);
  EXPECT_TRUE(slots.value().queue_local_inputs) << "turning off the inner one leaves its container";

  DataPathSwitches set_by_hand;
  set_by_hand.queue_local_inputs = false;
  EXPECT_FALSE(resolve_switches(set_by_hand).local_input_slots);
}

TEST(Switches, AnUnknownFlagIsRefusedNamingTheKnownOnes) {
  auto r = apply_switch_flags({"--no-input-reuse", "--no-magic"});
  ASSERT_FALSE(r.is_ok());
  EXPECT_NE(r.status().message().find("'--no-magic' is not one of the engine's switches"), std::string::npos);
  for (const DataPathSwitch& s : kDataPathSwitches)
    EXPECT_NE(r.status().message().find(s.flag), std::string::npos) << s.flag;
}

// docs/cli.md holds the table between two markers, exactly as switches_markdown() renders it.
TEST(Switches, TheDocsTableIsTheTable) {
  std::ifstream in(std::string(TANDEM_SOURCE_DIR) + "/docs/cli.md");
  ASSERT_TRUE(in.good());
  std::stringstream ss;
  ss << in.rdbuf();
  const std::string doc = ss.str();
  const std::string begin = "<!-- switches: generated from src/datapath/switches.h -->\n",
                    end = "<!-- end of switches -->";
  const size_t b = doc.find(begin), e = doc.find(end);
  ASSERT_NE(b, std::string::npos) << "docs/cli.md has no switches table";
  ASSERT_NE(e, std::string::npos);
  EXPECT_EQ(doc.substr(b + begin.size(), e - b - begin.size()), switches_markdown())
      << "docs/cli.md's table differs from src/datapath/switches.h; it should read:\n"
      << switches_markdown();
}

}  // namespace
}  // namespace tandem::datapath
