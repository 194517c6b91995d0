// The worker's status (link/worker_status.h): the JSON the worker writes, read back field for field.
#include "link/worker_status.h"

#include <gtest/gtest.h>

namespace tandem::link {
namespace {

// A status as workers of this build write it (key order aside, which nlohmann sorts), with a head.
const char* kWorkerAnswer = R"({
  "name": "gpu-box", "version": "0.9.0", "llama_tag": "b7000", "llama_commit": "de3ff815ea7d",
  "protocol": 3, "uptime_s": 12.5,
  "devices": [{"name": "CUDA0", "description": "NVIDIA H200", "type": "gpu", "free_bytes": 140000000000,
               "total_bytes": 150000000000, "shares_host_memory": false},
              {"name": "CPU", "description": "AMD EPYC", "type": "cpu", "free_bytes": 1000, "total_bytes": 2000,
               "shares_host_memory": true}],
  "memory_holders": [{"pid": 42, "name": "python3", "bytes": 123456789}],
  "rpc_server": {"state": "running", "pid": 4242, "restarts": 2, "last_exit": "killed by signal 9",
                 "isolated": true, "isolation": "a private network namespace", "port": 50052,
                 "cuda_graphs": false, "async_input_writes": true},
  "bytes": {"from_head": 1000000, "to_head": 2000},
  "connections": {"accepted": 7, "refused": 1},
  "cache": {"dir": "/var/cache/tandem", "entries": 9, "bytes": 4096, "max_bytes": 8192},
  "head": {"name": "head", "address": "10.0.0.1:41000", "since": "2026-12-06T07:00:00Z"},
  "last_event": "rpc child restarted"
})";

TEST(WorkerStatus, ReadsWhatTheWorkerWritesAndWritesItAgain) {
  const nlohmann::json wire = nlohmann::json::parse(kWorkerAnswer);
  const WorkerStatus s = worker_status_from(wire);
  EXPECT_EQ(s.name, "gpu-box");
  EXPECT_EQ(s.protocol, 3);
  ASSERT_EQ(s.devices.size(), 2u);
  EXPECT_EQ(s.devices[0].free_bytes, 140000000000u);
  EXPECT_TRUE(s.devices[1].shares_host_memory);
  ASSERT_EQ(s.memory_holders.size(), 1u);
  EXPECT_EQ(s.memory_holders[0], (WorkerMemoryHolder{42, "python3", 123456789}));
  EXPECT_EQ(s.rpc_server.port, 50052);
  EXPECT_EQ(s.rpc_server.restarts, 2u);
  EXPECT_FALSE(s.rpc_server.cuda_graphs);
  EXPECT_EQ(s.connections_refused, 1u);
  EXPECT_EQ(s.cache_max_bytes, 8192u);
  ASSERT_TRUE(s.head.has_value());
  EXPECT_EQ(s.head->address, "10.0.0.1:41000");
  EXPECT_EQ(s.last_event, "rpc child restarted");
  // Every field comes back: the JSON written again is the JSON read.
  EXPECT_EQ(worker_status_json(s), wire);
  EXPECT_EQ(worker_status_from(worker_status_json(s)), s);
}

TEST(WorkerStatus, AFreeWorkerNamesNoHead) {
  nlohmann::json wire = nlohmann::json::parse(kWorkerAnswer);
  wire["head"] = nullptr;
  const WorkerStatus s = worker_status_from(wire);
  EXPECT_FALSE(s.head.has_value());
  EXPECT_EQ(worker_status_json(s), wire);
}

TEST(WorkerStatus, AnEarlierWorkersDevicesShareHostMemoryWhenIntegrated) {
  const auto s = worker_status_from(
      nlohmann::json::parse(R"({"devices": [{"name": "Vulkan0", "type": "igpu"}, {"name": "CUDA0", "type": "gpu"}]})"));
  ASSERT_EQ(s.devices.size(), 2u);
  EXPECT_TRUE(s.devices[0].shares_host_memory);
  EXPECT_FALSE(s.devices[1].shares_host_memory);
}

TEST(WorkerStatus, FieldsOfAnotherTypeReadAsTheirDefaults) {
  const auto s = worker_status_from(nlohmann::json::parse(
      R"({"name": 7, "head": {"name": ["x"]}, "memory_holders": [3, {"pid": "x", "name": "a"}],
          "rpc_server": "up", "cache": {"bytes": "many"}})"));
  EXPECT_EQ(s.name, "");
  ASSERT_TRUE(s.head.has_value());
  EXPECT_EQ(s.head->name, "");
  ASSERT_EQ(s.memory_holders.size(), 1u);
  EXPECT_EQ(s.memory_holders[0].pid, 0);
  EXPECT_EQ(s.rpc_server, WorkerRpcServer{});
  EXPECT_EQ(s.cache_bytes, 0u);
  EXPECT_EQ(worker_status_from(nlohmann::json::array()), WorkerStatus{});
}

}  // namespace
}  // namespace tandem::link
