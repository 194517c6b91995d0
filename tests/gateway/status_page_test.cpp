// What the status page is told about the plan: layers per node from the split libllama gets.
#include "gateway/status_page.h"

#include <gtest/gtest.h>

namespace tandem::gateway {
namespace {

plan::DeviceAssignment device(const std::string& node, int first, int n) {
  plan::DeviceAssignment d;
  d.node = node;
  d.device = node + "-dev";
  d.first_layer = first;
  d.n_layers = n;
  d.weights = 100;
  d.free_bytes = 1000;
  d.margin = 50;
  return d;
}

std::vector<plan::NodeSpec> nodes() {
  std::vector<plan::NodeSpec> n(3);
  n[0].name = "head";
  n[1].name = "box-b";
  n[1].address = "10.0.0.2:7070";
  n[2].name = "box-c";
  return n;
}

TEST(StatusPageInfo, LayersPerNodeFollowTheSplitAndMemoryThePlan) {
  plan::Plan p;
  p.devices = {device("head", 0, 1), device("box-b", 1, 3), device("box-c", 4, 0)};
  p.split.cpu_layers = 1;
  p.split.device_layers = {3};
  p.split.rpc_nodes = {"box-b"};
  const auto j = status_info_from_plan(p, nodes(), 4);
  ASSERT_EQ(j["nodes"].size(), 3u);
  EXPECT_EQ(j["n_layer"], 4);
  EXPECT_EQ(j["nodes"][0]["role"], "head");
  EXPECT_EQ(j["nodes"][0]["layers"], 1);
  EXPECT_EQ(j["nodes"][1]["first_layer"], 1);
  EXPECT_EQ(j["nodes"][1]["layers"], 3);
  EXPECT_EQ(j["nodes"][1]["address"], "10.0.0.2:7070");
  EXPECT_EQ(j["nodes"][1]["devices"][0]["need_bytes"], 100);
  EXPECT_EQ(j["nodes"][1]["devices"][0]["free_bytes"], 1000);
  EXPECT_EQ(j["nodes"][2]["layers"], 0);
}

// A hand split is sized by the planner like its own split, so the page shows what it needs.
TEST(StatusPageInfo, ASplitByHandShowsLayersAndTheMemoryItNeeds) {
  plan::Plan p;
  p.devices = {device("head", 0, 4), device("box-b", 4, 0), device("box-c", 4, 0)};
  p.split.cpu_layers = 2;  // --layers 2,1,1
  p.split.device_layers = {1, 1};
  p.split.rpc_nodes = {"box-b", "box-c"};
  const auto j = status_info_from_plan(p, nodes(), 4);
  EXPECT_EQ(j["nodes"][0]["layers"], 2);
  EXPECT_EQ(j["nodes"][1]["first_layer"], 2);
  EXPECT_EQ(j["nodes"][2]["first_layer"], 3);
  EXPECT_EQ(j["nodes"][0]["devices"][0]["need_bytes"], 100);
  EXPECT_EQ(j["nodes"][0]["devices"][0]["free_bytes"], 1000);
}

}  // namespace
}  // namespace tandem::gateway
