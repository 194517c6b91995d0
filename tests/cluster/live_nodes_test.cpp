// A worker's report as the planner reads it: whether its GPU shares the box's memory (said by the
// worker, or by ggml's type from a worker that does not say), and a device that reported 0 bytes
// free refused by name.
#include "cluster/live_nodes.h"

#include <gtest/gtest.h>

#include "plan/cluster.h"

namespace tandem::cluster {
namespace {

constexpr uint64_t kGiB = uint64_t{1} << 30;

config::WorkerConfig worker(const std::string& name) {
  config::WorkerConfig w;
  w.name = name;
  w.address = "10.0.0.2:7070";
  return w;
}

nlohmann::json device(const std::string& name, const std::string& type, uint64_t free, bool with_flag, bool shares) {
  nlohmann::json d = {
      {"name", name}, {"description", "x"}, {"type", type}, {"free_bytes", free}, {"total_bytes", free}};
  if (with_flag) d["shares_host_memory"] = shares;
  return d;
}

TEST(LiveNodes, AWorkerSaysWhetherItsGpuSharesItsMemory) {
  // A GB10 worker of this version: the GPU and the CPU both share the system memory; the GPU is offered.
  auto gb10 = node_from_status(worker("box-b"),
                               {{"devices", nlohmann::json::array({device("CUDA0", "igpu", 115 * kGiB, true, true),
                                                                   device("CPU", "cpu", 115 * kGiB, true, true)})}});
  ASSERT_EQ(gb10.devices.size(), 1u);
  EXPECT_EQ(gb10.devices[0].name, "CUDA0");
  EXPECT_TRUE(gb10.devices[0].unified_memory);
  EXPECT_TRUE(gb10.devices[0].reported);

  // An earlier worker that sends only ggml's type: "igpu" is an integrated GPU.
  auto older = node_from_status(
      worker("box-b"), {{"devices", nlohmann::json::array({device("CUDA0", "igpu", 115 * kGiB, false, false)})}});
  EXPECT_TRUE(older.devices[0].unified_memory);

  // A discrete GPU is not, unless the head's file says the box is one ([[worker]] unified_memory).
  auto h200 = node_from_status(worker("box-b"),
                               {{"devices", nlohmann::json::array({device("CUDA0", "gpu", 140 * kGiB, true, false)})}});
  EXPECT_FALSE(h200.devices[0].unified_memory);
  auto declared = worker("box-b");
  declared.unified_memory = true;
  EXPECT_TRUE(node_from_status(declared,
                               {{"devices", nlohmann::json::array({device("CUDA0", "gpu", 140 * kGiB, true, false)})}})
                  .devices[0]
                  .unified_memory);

  // A CPU worker's layers sit in its memory beside everything else: no unified-memory reserve.
  auto cpu =
      node_from_status(declared, {{"devices", nlohmann::json::array({device("CPU", "cpu", 20 * kGiB, true, true)})}});
  EXPECT_FALSE(cpu.devices[0].unified_memory);
}

TEST(LiveNodes, ACapLimitsTheReportedFigureAndAZeroStaysZero) {
  auto w = worker("box-b");
  w.memory = 100 * kGiB;
  auto capped =
      node_from_status(w, {{"devices", nlohmann::json::array({device("CUDA0", "igpu", 115 * kGiB, true, true)})}});
  EXPECT_EQ(capped.devices[0].free_bytes, 100 * kGiB);

  // ggml's 0/0 when cudaMemGetInfo fails: the cap does not turn it into 100 GiB, and the planner
  // refuses the device by name.
  auto failed = node_from_status(w, {{"devices", nlohmann::json::array({device("CUDA0", "igpu", 0, true, true)})}});
  EXPECT_EQ(failed.devices[0].free_bytes, 0u);
  plan::NodeSpec head;
  head.name = "box-a";
  head.devices.push_back(plan::DeviceSpec{"CUDA0", plan::DeviceKind::gpu, 115 * kGiB});
  const Status s = plan::validate_nodes({head, failed});
  ASSERT_FALSE(s.is_ok());
  EXPECT_NE(s.message().find("device CUDA0 on box-b reports 0 bytes free"), std::string::npos) << s.message();
  EXPECT_NE(s.message().find("cudaMemGetInfo"), std::string::npos) << s.message();
  EXPECT_NE(s.code(), StatusCode::invalid_argument) << "not a usage error: the device failed";
}

}  // namespace
}  // namespace tandem::cluster
