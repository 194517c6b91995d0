#include "worker/rpc_server.h"

#include <malloc.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <limits>
#include <thread>

#include "common/cpu_cores.h"
#include "common/log.h"
#include "common/units.h"
#include "datapath/rpc_child_session.h"
#include "worker/cache_loader.h"

#include "ggml-backend.h"
#include "ggml-rpc.h"

namespace tandem::worker {
namespace {

bool is_rpc(ggml_backend_dev_t dev) {
  ggml_backend_reg_t reg = ggml_backend_dev_backend_reg(dev);
  return reg != nullptr && std::strcmp(ggml_backend_reg_name(reg), "RPC") == 0;
}

Result<std::vector<ggml_backend_dev_t>> pick(const std::vector<std::string>& names) {
  std::vector<ggml_backend_dev_t> out;
  for (const auto& n : names) {
    ggml_backend_dev_t dev = ggml_backend_dev_by_name(n.c_str());
    if (dev == nullptr || is_rpc(dev)) {
      std::string avail;
      for (size_t i = 0; i < ggml_backend_dev_count(); ++i) {
        ggml_backend_dev_t d = ggml_backend_dev_get(i);
        if (!is_rpc(d)) avail += std::string(avail.empty() ? "" : ", ") + ggml_backend_dev_name(d);
      }
      return Status::invalid_argument("unknown device '" + n + "' (this machine has: " + avail + ")");
    }
    out.push_back(dev);
  }
  if (out.empty()) {  // as ggml-rpc-server: the accelerators, else the CPU
    for (size_t i = 0; i < ggml_backend_dev_count(); ++i) {
      ggml_backend_dev_t d = ggml_backend_dev_get(i);
      const auto t = ggml_backend_dev_type(d);
      if (!is_rpc(d) && (t == GGML_BACKEND_DEVICE_TYPE_GPU || t == GGML_BACKEND_DEVICE_TYPE_IGPU)) out.push_back(d);
    }
  }
  if (out.empty()) {
    ggml_backend_dev_t cpu = ggml_backend_dev_by_type(GGML_BACKEND_DEVICE_TYPE_CPU);
    if (cpu != nullptr) out.push_back(cpu);
  }
  if (out.empty()) return Status::not_found("no compute device found");
  return out;
}

// ggml's RPC server prints to stdout and stderr itself ("Accepted client connection"). With JSON
// logs, both go into a pipe instead, and a thread turns each line into a record on the original
// stderr, so that the worker's whole output stays one JSON object per line.
void relay_output_as_records() {
  int p[2];
  const int original = ::dup(STDERR_FILENO);
  if (original < 0 || ::pipe(p) != 0) return;
  std::fflush(stdout);
  std::fflush(stderr);
  ::dup2(p[1], STDOUT_FILENO);
  ::dup2(p[1], STDERR_FILENO);
  ::close(p[1]);
  std::setvbuf(stdout, nullptr, _IOLBF, 0);
  // The child's own log lines (the cache loader's) are records already and pass unchanged.
  log::relay_lines_as_records(p[0], original, "rpc-server");
}

// ggml's RPC server reads every weight it is sent into a fresh std::vector. glibc maps blocks that
// large anew for each allocation and unmaps them when freed, so each weight first costs a page
// fault per 4 KiB (reading files into vectors ran at 0.36-0.88 GB/s that way on a 2-core VM,
// 1.5-2.4 GB/s with large blocks kept in the heap). Kept blocks are reused from one weight to the
// next; a session's freed memory goes back to the system when the worker signals the session's
// end (the planner reads the worker's free memory), as do the cache loader's staging buffers.
std::atomic<bool> release_requested{false};
// The head session that had just ended when the signal came: its reuse slots go, a newer one's stay.
std::atomic<uint64_t> released_session{0};
std::atomic<uint64_t> released_share_session{0};  // the same, for the prompt cache's shares
// The child's data path, open for the life of the RPC server (run_rpc_server); the signal handler
// reads which head session it serves.
std::atomic<datapath::RpcChildSession*> child_session{nullptr};

void on_release_signal(int) {
  if (datapath::RpcChildSession* s = child_session.load()) {
    released_session = s->input_writes().session();
    released_share_session = s->kv_shares().session();
  }
  release_requested = true;
}

void keep_large_blocks_in_heap() {
  ::mallopt(M_MMAP_MAX, 0);
  ::mallopt(M_TRIM_THRESHOLD, std::numeric_limits<int>::max());
  struct sigaction sa {};
  sa.sa_handler = on_release_signal;
  sa.sa_flags = SA_RESTART;
  ::sigaction(kReleaseMemorySignal, &sa, nullptr);
  std::thread([] {
    for (;;) {
      std::this_thread::sleep_for(std::chrono::milliseconds(200));
      if (!release_requested.exchange(false)) continue;
      release_cache_loader();
      datapath::RpcChildSession* session = child_session.load();
      datapath::KvShareStoreStats shares;
      if (session != nullptr) {
        session->input_writes().release(released_session.load());
        shares = session->kv_shares().release(released_share_session.load());
      }
      ::malloc_trim(0);
      char line[200];
      if (shares.shares > 0) {
        log::info("rpc-server", "prompt cache: dropped the ended session's " + std::to_string(shares.shares) +
                                    " shares (" + format_bytes(shares.bytes) + " in memory" +
                                    (shares.disk_bytes > 0 ? ", " + format_bytes(shares.disk_bytes) + " on disk" : "") +
                                    ")");
      }
      const datapath::StepWork w = session != nullptr ? session->input_writes().take_step_work() : datapath::StepWork{};
      if (w.graphs > 0) {
        // Against the head's wait for this worker (its one-shot profile), this says what the
        // device's work was and what the hand-over cost.
        std::snprintf(line, sizeof line,
                      "the session's steps: %llu graphs computed in %.2f s (%.2f ms each), "
                      "%llu step inputs placed in %.3f s (%llu expanded from runs)",
                      static_cast<unsigned long long>(w.graphs), w.graph_s,
                      w.graph_s * 1e3 / static_cast<double>(w.graphs), static_cast<unsigned long long>(w.writes),
                      w.write_s, static_cast<unsigned long long>(w.runs));
        log::info("rpc-server", line);
      }
      const CacheLoaderStats st = take_cache_loader_stats();
      if (st.weights == 0) continue;
      std::snprintf(line, sizeof line, "loaded %llu cached weights (%s) in %.2f s (%.2f GB/s)",
                    static_cast<unsigned long long>(st.weights), format_bytes(st.bytes).c_str(), st.seconds,
                    st.seconds > 0 ? static_cast<double>(st.bytes) / st.seconds / 1e9 : 0.0);
      log::info("rpc-server", line);
    }
  }).detach();
}

}  // namespace

Result<std::vector<std::string>> resolve_devices(const std::vector<std::string>& names) {
  auto devs = pick(names);
  if (!devs.is_ok()) return devs.status();
  std::vector<std::string> out;
  for (auto* d : devs.value()) out.emplace_back(ggml_backend_dev_name(d));
  return out;
}

Status run_rpc_server(const RpcServerOptions& o) {
  keep_large_blocks_in_heap();
  auto devs = pick(o.devices);
  if (!devs.is_ok()) return devs.status();
  const char* cache = nullptr;
  if (!o.cache_dir.empty()) {
    std::error_code ec;
    std::filesystem::create_directories(o.cache_dir, ec);
    if (ec) return Status::invalid_argument("cache folder " + o.cache_dir + ": " + ec.message());
    cache = o.cache_dir.c_str();
    CacheLoaderOptions lo;
    lo.cache_dir = o.cache_dir;
    TANDEM_RETURN_IF_ERROR(install_cache_loader(lo));
  }
  datapath::RpcChildOptions co;
  co.queue_input_writes = o.async_input_writes;
  // The prompt cache's states the head spills to disk go beside the weight cache (never counted
  // in it: its files are named by hash).
  co.spill_dir = o.cache_dir.empty() ? "" : o.cache_dir + "/prompt-cache";
  auto session = datapath::RpcChildSession::open(co);
  if (!session.is_ok()) return session.status();
  child_session = session->get();
  if (log::format() == log::Format::json) relay_output_as_records();
  const size_t threads = o.threads > 0 ? static_cast<size_t>(o.threads) : static_cast<size_t>(physical_cores());
  ggml_backend_rpc_start_server(o.endpoint.c_str(), cache, threads, devs->size(), devs->data());
  // The release thread may still use it: the session lives on with the process.
  static_cast<void>(session.value().release());
  return Status::unavailable("ggml's RPC server stopped");
}

}  // namespace tandem::worker
