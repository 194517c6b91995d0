// Before the engine starts again after a crash, the memory the plan counted on must be free again:
// which device is short, by how much, and what holds memory there.
#include "gateway/restart_memory.h"

#include <gtest/gtest.h>

#include "common/units.h"

namespace tandem::gateway {
namespace {

constexpr uint64_t kGiB = uint64_t{1} << 30;

plan::DeviceAssignment placed(const std::string& node, const std::string& dev, uint64_t free, uint64_t weights,
                              int layers, bool host = false) {
  plan::DeviceAssignment d;
  d.node = node;
  d.device = dev;
  d.free_bytes = free;
  d.margin = 2 * kGiB;
  d.weights = weights;
  d.n_layers = layers;
  d.host = host;
  return d;
}

TEST(RestartMemory, ThePlanNeedsWhatItCountedOnWhereItPlacedSomething) {
  plan::Plan p;
  p.devices.push_back(placed("box-a", "CUDA0", 115 * kGiB, 100 * kGiB, 28, true));
  p.devices.push_back(placed("box-b", "CUDA0", 115 * kGiB, 105 * kGiB, 32));
  p.devices.push_back(placed("box-c", "CUDA0", 115 * kGiB, 0, 0));  // left out of the plan
  p.devices[1].reserve = {4 * kGiB, kGiB, kGiB};
  const auto needs = memory_needs(p);
  ASSERT_EQ(needs.size(), 2u);
  EXPECT_EQ(needs[0].node, "box-a");
  EXPECT_EQ(needs[0].bytes, 102 * kGiB);  // the weights and the margin
  EXPECT_EQ(needs[1].node, "box-b");
  EXPECT_EQ(needs[1].bytes, 113 * kGiB);  // with the unified node's reserve
  // A plan that fits only just (no headroom) needs all the free memory it saw.
  p.devices[1].weights = 120 * kGiB;
  EXPECT_EQ(memory_needs(p)[1].bytes, 115 * kGiB);
}

NodeMemory now(const std::string& node, const std::string& dev, uint64_t free, bool unified,
               const std::string& holders = "") {
  NodeMemory n;
  n.node = node;
  plan::DeviceSpec d;
  d.name = dev;
  d.free_bytes = free;
  d.hardware = "gpu";
  d.unified_memory = unified;
  n.devices.push_back(d);
  n.holders = holders;
  return n;
}

TEST(RestartMemory, AShortDeviceIsNamedWithWhatHoldsMemoryThere) {
  const std::vector<MemoryNeed> needs = {{"box-a", "CUDA0", 102 * kGiB}, {"box-b", "CUDA0", 113 * kGiB}};
  EXPECT_EQ(check_memory(needs, {now("box-a", "CUDA0", 110 * kGiB, true), now("box-b", "CUDA0", 113 * kGiB, true)}),
            "");
  const std::string why = check_memory(
      needs, {now("box-a", "CUDA0", 110 * kGiB, true),
              now("box-b", "CUDA0", 40 * kGiB, true, "tandem-worker (pid 77) 72.0 GiB, sshd (pid 1) 10.0 MiB")});
  EXPECT_EQ(why, "box-b/CUDA0 has " + format_bytes(40 * kGiB) + " free, the plan needs " + format_bytes(113 * kGiB) +
                     " there: short by " + format_bytes(73 * kGiB) +
                     "; holding the most memory on box-b: tandem-worker (pid 77) 72.0 GiB, sshd (pid 1) 10.0 MiB");
  // A discrete GPU's memory is not in any process's resident set: say where to look.
  const std::string discrete = check_memory(needs, {now("box-a", "CUDA0", 10 * kGiB, false, "x (pid 2) 1 GiB")});
  EXPECT_NE(discrete.find("box-a/CUDA0 has"), std::string::npos) << discrete;
  EXPECT_NE(discrete.find("nvidia-smi"), std::string::npos) << discrete;
  // A device that reports 0 (its driver could not be asked) is short too, and says why.
  const std::string zero = check_memory(needs, {now("box-a", "CUDA0", 0, true)});
  EXPECT_NE(zero.find("box-a/CUDA0 reports 0 bytes free"), std::string::npos) << zero;
  // A node that could not be asked is left to the heartbeats and the load.
  NodeMemory unreachable;
  unreachable.node = "box-b";
  unreachable.error = "connection refused";
  EXPECT_EQ(check_memory(needs, {now("box-a", "CUDA0", 110 * kGiB, true), unreachable}), "");
}

TEST(RestartMemory, TheHeadIsAskedLocallyWithoutItsCap) {
  config::Config c;
  c.cluster.head_name = "here";
  c.cluster.head_memory = 1024;  // a cap far below what this machine has: not what is free
  const auto nodes = memory_now(c, nullptr, {{"here", "CPU", 1}});
  ASSERT_EQ(nodes.size(), 1u);
  ASSERT_FALSE(nodes[0].devices.empty());
  EXPECT_GT(nodes[0].devices[0].free_bytes, 1024u);
  EXPECT_FALSE(nodes[0].holders.empty()) << "at least this test holds memory";
  EXPECT_TRUE(memory_now(c, nullptr, {}).empty()) << "no node asked that the plan does not use";
}

}  // namespace
}  // namespace tandem::gateway
