// This machine's devices with the system memory counted once: ggml's CPU device reports its total
// as free and an integrated GPU (GB10) reports MemAvailable, so side by side they showed the pool
// twice. Device lists are injected, as ggml gives them on the boxes named.
#include "cluster/devices.h"

#include <filesystem>

#include <gtest/gtest.h>

#include "common/units.h"
#include "test_util.h"

namespace tandem::cluster {
namespace {

constexpr uint64_t kGiB = uint64_t{1} << 30;
constexpr uint64_t kMiB = uint64_t{1} << 20;

// /proc/meminfo of an idle GB10 as the issue measured it: 115.85 GiB available.
constexpr uint64_t kGb10Total = 125'520'128ull * 1024;  // kB as the kernel writes them
constexpr uint64_t kGb10Available = 121'478'758ull * 1024;

std::string gb10_meminfo() {
  return "MemTotal:       125520128 kB\nMemFree:        98765432 kB\nMemAvailable:   121478758 kB\n"
         "Buffers:           12345 kB\nCached:         20000000 kB\n";
}

// What ggml lists on a GB10: the integrated GPU (MemAvailable as free, cudaMemGetInfo's total)
// and the CPU (its total as free).
std::vector<DeviceInfo> gb10_raw(uint64_t gpu_free = kGb10Available) {
  return {{"CUDA0", "NVIDIA GB10", "igpu", gpu_free, kGb10Total, false},
          {"CPU", "ARM Cortex-X925", "cpu", kGb10Total, kGb10Total, false}};
}

TEST(Devices, MeminfoGivesTotalAndAvailable) {
  const HostMemory m = parse_meminfo(gb10_meminfo());
  ASSERT_TRUE(m.known);
  EXPECT_EQ(m.total, kGb10Total);
  EXPECT_EQ(m.available, kGb10Available);
  EXPECT_NEAR(static_cast<double>(m.available) / kGiB, 115.85, 0.01);
  EXPECT_FALSE(parse_meminfo("MemTotal: 1 kB\n").known) << "no MemAvailable line";
  EXPECT_FALSE(parse_meminfo("").known);
}

TEST(Devices, TheCpuReportsMemAvailableAndTheIntegratedGpuSharesIt) {
  const HostMemory host = parse_meminfo(gb10_meminfo());
  // The GPU reported a little more than MemAvailable is now (it was read a moment earlier).
  const auto d = normalise_devices(gb10_raw(kGb10Available + 512 * kMiB), host);
  ASSERT_EQ(d.size(), 2u);
  EXPECT_TRUE(d[0].shares_host_memory);
  EXPECT_EQ(d[0].free_bytes, kGb10Available) << "never more than the system has available";
  EXPECT_TRUE(d[1].shares_host_memory);
  EXPECT_EQ(d[1].free_bytes, kGb10Available) << "ggml's CPU figure was its total";
  EXPECT_EQ(d[1].total_bytes, kGb10Total);
}

TEST(Devices, ADiscreteGpuKeepsItsOwnFiguresAndAGpuThatReportedNothingKeepsZero) {
  const HostMemory host = parse_meminfo(gb10_meminfo());
  std::vector<DeviceInfo> h200 = {{"CUDA0", "NVIDIA H200", "gpu", 140 * kGiB, 141 * kGiB, false},
                                  {"CPU", "Xeon", "cpu", 2000 * kGiB, 2000 * kGiB, false}};
  const auto d = normalise_devices(h200, host);
  EXPECT_FALSE(d[0].shares_host_memory);
  EXPECT_EQ(d[0].free_bytes, 140 * kGiB);
  EXPECT_EQ(d[1].free_bytes, kGb10Available);

  // ggml's 0/0 when cudaMemGetInfo fails (seen on GB10): not replaced by a guess.
  const auto failed = normalise_devices(gb10_raw(0), host);
  EXPECT_EQ(failed[0].free_bytes, 0u);
  EXPECT_TRUE(failed[0].shares_host_memory);

  // Without /proc/meminfo only the marks change.
  const auto unknown = normalise_devices(gb10_raw(), HostMemory{});
  EXPECT_EQ(unknown[1].free_bytes, kGb10Total);
  EXPECT_TRUE(unknown[1].shares_host_memory);
}

size_t count(const std::string& text, const std::string& what) {
  size_t n = 0;
  for (size_t at = text.find(what); at != std::string::npos; at = text.find(what, at + 1)) ++n;
  return n;
}

TEST(Devices, TheTableShowsTheSystemMemoryOnce) {
  const auto gb10 = normalise_devices(gb10_raw(), parse_meminfo(gb10_meminfo()));
  const std::string t = format_devices(gb10);
  EXPECT_EQ(count(t, format_bytes(kGb10Available)), 1u) << t;
  EXPECT_EQ(count(t, format_bytes(kGb10Total)), 1u) << t;
  EXPECT_NE(t.find("shared with CUDA0"), std::string::npos) << t;
  EXPECT_NE(t.find("uses the system memory shown for CPU"), std::string::npos) << t;
  std::string cuda_row = t.substr(t.find("\nCUDA0"));
  cuda_row = cuda_row.substr(1, cuda_row.find('\n', 1));
  EXPECT_EQ(count(cuda_row, "shared"), 2u) << cuda_row;

  // A discrete GPU has memory of its own: both shown.
  std::vector<DeviceInfo> h200 = {{"CUDA0", "NVIDIA H200", "gpu", 140 * kGiB, 141 * kGiB, false},
                                  {"CPU", "Xeon", "cpu", 1800 * kGiB, 2000 * kGiB, true}};
  const std::string d = format_devices(h200);
  EXPECT_NE(d.find(format_bytes(140 * kGiB)), std::string::npos) << d;
  EXPECT_NE(d.find(format_bytes(1800 * kGiB)), std::string::npos) << d;
  EXPECT_EQ(d.find("shared"), std::string::npos) << d;

  // An integrated GPU that reported 0/0 shows its own row and says so.
  const std::string failed = format_devices(normalise_devices(gb10_raw(0), parse_meminfo(gb10_meminfo())));
  EXPECT_NE(failed.find("reported no free memory"), std::string::npos) << failed;
  EXPECT_EQ(failed.find("shared with"), std::string::npos) << failed;
}

void write(const std::string& path, const std::string& text) { tandem::testing::write_file(path, text); }

TEST(Devices, MemoryHoldersAreTheLargestProcessesByResidentMemory) {
  tandem::testing::ScratchDir dir;
  auto proc = [&](const std::string& pid, const std::string& comm, const std::string& status) {
    std::filesystem::create_directories(dir.file(pid));
    write(dir.file(pid + "/comm"), comm + "\n");
    write(dir.file(pid + "/status"), status);
  };
  proc("1", "systemd", "Name:\tsystemd\nVmRSS:\t   12000 kB\n");
  proc("812", "python3", "Name:\tpython3\nVmRSS:\t63123456 kB\n");
  proc("90", "tandem-engine", "Name:\ttandem-engine\nVmRSS:\t 1153434 kB\n");
  proc("2", "kthreadd", "Name:\tkthreadd\n");  // a kernel thread: no VmRSS
  std::filesystem::create_directories(dir.file("self"));
  const auto h = memory_holders(2, dir.file(""));
  ASSERT_EQ(h.size(), 2u);
  EXPECT_EQ(h[0].pid, 812);
  EXPECT_EQ(h[0].name, "python3");
  EXPECT_EQ(h[0].bytes, 63123456ull * 1024);
  EXPECT_EQ(h[1].name, "tandem-engine");
  EXPECT_EQ(format_holders(h), "python3 (pid 812) " + format_bytes(63123456ull * 1024) + ", tandem-engine (pid 90) " +
                                   format_bytes(1153434ull * 1024));
  EXPECT_EQ(memory_holders(10, dir.file("")).size(), 3u);
  EXPECT_TRUE(memory_holders(3, dir.file("missing")).empty());
  // This machine's own: at least this test.
  EXPECT_FALSE(memory_holders(3).empty());
}

}  // namespace
}  // namespace tandem::cluster
