// Test support for the data path: a small graph that reads a step input through several views (as
// MiniMax-M3's sparse layers read their masks), run by a real ggml scheduler, and ggml's RPC server
// on the CPU in a child process as a worker: ggml's own, or tandem's RPC child, which takes the
// head's markers.
#pragma once

#include <gtest/gtest.h>

#include <arpa/inet.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <csignal>
#include <cstdio>
#include <cstring>
#include <memory>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "datapath/head_session.h"
#include "datapath/self_check.h"
#include "ggml-alloc.h"
#include "ggml-backend.h"
#include "ggml-rpc.h"
#include "ggml.h"

namespace tandem::datapath::test_support {

inline constexpr int kFullViews = 6, kHalfViews = 2;

// A head session with `o` (datapath/head_session.h), as an engine opens one per model; nullptr,
// failing the test, when it cannot open.
inline std::unique_ptr<HeadSession> open_session(const HeadOptions& o = {}) {
  auto s = HeadSession::open(o);
  EXPECT_TRUE(s.is_ok()) << s.status().message();
  return s.is_ok() ? std::move(s.value()) : nullptr;
}

// The options of a session that queues its writes to RPC servers (RpcWrites' arguments).
inline HeadOptions rpc_writes(std::set<std::string> reuse = {}, uint64_t slot_bytes = 0,
                              std::set<std::string> runs = {}) {
  HeadOptions o;
  o.async_rpc_writes = true;
  o.reuse_endpoints = std::move(reuse);
  o.worker_slot_bytes = slot_bytes;
  o.runs_endpoints = std::move(runs);
  return o;
}

// The options of a session that queues the copies into the head's GPUs (LocalInputs' argument).
inline HeadOptions local_inputs(uint64_t slot_bytes = 0) {
  HeadOptions o;
  o.queue_local_inputs = true;
  o.local_slot_bytes = slot_bytes;
  return o;
}

inline ggml_backend_dev_t first_gpu() {
  for (size_t i = 0; i < ggml_backend_dev_count(); ++i) {
    ggml_backend_dev_t d = ggml_backend_dev_get(i);
    if (ggml_backend_dev_type(d) == GGML_BACKEND_DEVICE_TYPE_GPU) return d;
  }
  return nullptr;
}

// acc = w + x (read kFullViews times, each through a view of its own) + x's second half (kHalfViews
// times, broadcast over both halves); w is a weight on `dev`, which pulls the additions there.
// With `worker` (an RPC device), w starts as u + x, computed there from a weight u it holds; with
// `views_of_result` too, the views are of that u + x instead of x (as MiniMax-M3's sparse layers
// each read a view of a mask the worker's first one made).
class ViewsOfAnInput {
 public:
  ViewsOfAnInput(ggml_backend_dev_t dev, int64_t n, ggml_backend_dev_t worker = nullptr, bool views_of_result = false)
      : n_(n), worker_(worker != nullptr), views_of_result_(views_of_result && worker != nullptr) {
    w_values_ = weights(n, 101);
    w_ = weight(dev, &wctx_, &wbuf_, w_values_);
    if (worker_) {
      u_values_ = weights(n, 37);
      u_ = weight(worker, &uctx_, &ubuf_, u_values_);
    }

    ggml_init_params gp{ggml_tensor_overhead() * 64 + ggml_graph_overhead(), nullptr, true};
    gctx_ = ggml_init(gp);
    x_ = ggml_new_tensor_1d(gctx_, GGML_TYPE_F32, n);
    ggml_set_input(x_);
    ggml_tensor* acc = w_;
    ggml_tensor* viewed = x_;
    if (worker_) {
      ggml_tensor* ux = ggml_add(gctx_, u_, ggml_view_1d(gctx_, x_, n, 0));
      if (views_of_result_) {
        viewed = ux;
      } else {
        acc = ggml_add(gctx_, w_, ux);
      }
    }
    for (int i = 0; i < kFullViews; ++i) acc = ggml_add(gctx_, acc, ggml_view_1d(gctx_, viewed, n, 0));
    for (int i = 0; i < kHalfViews; ++i)
      acc = ggml_add(gctx_, acc, ggml_view_1d(gctx_, viewed, n / 2, sizeof(float) * (n / 2)));
    ggml_set_output(acc);
    out_ = acc;
    graph_ = ggml_new_graph(gctx_);
    ggml_build_forward_expand(graph_, out_);

    backends_.push_back(ggml_backend_dev_init(dev, nullptr));
    if (worker_) backends_.push_back(ggml_backend_dev_init(worker, nullptr));
    if (ggml_backend_dev_type(dev) != GGML_BACKEND_DEVICE_TYPE_CPU) {
      backends_.push_back(ggml_backend_dev_init(ggml_backend_dev_by_type(GGML_BACKEND_DEVICE_TYPE_CPU), nullptr));
    }
    // As every engine load does: the proof that ggml reaches the interposers.
    const Status hooks = check_interposition();
    EXPECT_TRUE(hooks.is_ok()) << hooks.message();
    sched_ = ggml_backend_sched_new(backends_.data(), nullptr, static_cast<int>(backends_.size()),
                                    GGML_DEFAULT_GRAPH_SIZE, false, true);
  }
  ~ViewsOfAnInput() {
    ggml_backend_sched_free(sched_);
    for (ggml_backend_t b : backends_) ggml_backend_free(b);
    ggml_backend_buffer_free(wbuf_);
    if (ubuf_ != nullptr) ggml_backend_buffer_free(ubuf_);
    ggml_free(gctx_);
    ggml_free(wctx_);
    if (uctx_ != nullptr) ggml_free(uctx_);
  }

  // Runs the graph on x = `seed`-derived values; true when the result is what the host computes.
  ::testing::AssertionResult run(int seed) {
    // Allocated once and reused, as libllama reuses a graph (the scheduler rewrites its inputs).
    if (!allocated_ && !ggml_backend_sched_alloc_graph(sched_, graph_)) {
      return ::testing::AssertionFailure() << "allocating the graph failed";
    }
    allocated_ = true;
    std::vector<float> x(n_);
    for (int64_t j = 0; j < n_; ++j) x[j] = static_cast<float>((seed * 7 + j) % 89);
    ggml_backend_tensor_set(x_, x.data(), 0, sizeof(float) * n_);
    if (ggml_backend_sched_graph_compute(sched_, graph_) != GGML_STATUS_SUCCESS) {
      return ::testing::AssertionFailure() << "computing failed";
    }
    std::vector<float> got(n_);
    ggml_backend_tensor_get(out_, got.data(), 0, sizeof(float) * n_);
    for (int64_t j = 0; j < n_; ++j) {
      float want = w_values_[j];
      if (views_of_result_) {
        const int64_t h = n_ / 2 + j % (n_ / 2);
        want += kFullViews * (u_values_[j] + x[j]) + kHalfViews * (u_values_[h] + x[h]);
      } else {
        want += kFullViews * x[j] + kHalfViews * x[n_ / 2 + j % (n_ / 2)];
        if (worker_) want += u_values_[j] + x[j];
      }
      if (got[j] != want) {
        return ::testing::AssertionFailure()
               << "seed " << seed << ": element " << j << " is " << got[j] << ", not " << want;
      }
    }
    return ::testing::AssertionSuccess();
  }
  int splits() const { return ggml_backend_sched_get_n_splits(sched_); }

 private:
  static std::vector<float> weights(int64_t n, int mod) {
    std::vector<float> v(n);
    for (int64_t j = 0; j < n; ++j) v[j] = static_cast<float>(j % mod);
    return v;
  }
  // A weight tensor holding `values`, in its own buffer on `dev`.
  static ggml_tensor* weight(ggml_backend_dev_t dev, ggml_context** ctx, ggml_backend_buffer_t* buf,
                             const std::vector<float>& values) {
    ggml_init_params p{ggml_tensor_overhead() * 2, nullptr, true};
    *ctx = ggml_init(p);
    ggml_tensor* t = ggml_new_tensor_1d(*ctx, GGML_TYPE_F32, static_cast<int64_t>(values.size()));
    *buf = ggml_backend_alloc_ctx_tensors_from_buft(*ctx, ggml_backend_dev_buffer_type(dev));
    ggml_backend_buffer_set_usage(*buf, GGML_BACKEND_BUFFER_USAGE_WEIGHTS);
    ggml_backend_tensor_set(t, values.data(), 0, sizeof(float) * values.size());
    return t;
  }

  int64_t n_;
  bool worker_, views_of_result_;
  bool allocated_ = false;
  ggml_context *wctx_ = nullptr, *uctx_ = nullptr, *gctx_ = nullptr;
  ggml_tensor *w_ = nullptr, *u_ = nullptr, *x_ = nullptr, *out_ = nullptr;
  ggml_backend_buffer_t wbuf_ = nullptr, ubuf_ = nullptr;
  std::vector<float> w_values_, u_values_;
  ggml_cgraph* graph_ = nullptr;
  std::vector<ggml_backend_t> backends_;
  ggml_backend_sched_t sched_ = nullptr;
};

// A port nothing listens on now.
inline int free_port() {
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof(a);
  if (fd < 0 || ::bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof(a)) != 0 ||
      ::getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len) != 0) {
    return -1;
  }
  ::close(fd);
  return ntohs(a.sin_port);
}

inline bool accepts(int port) {
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_port = htons(static_cast<uint16_t>(port));
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  const bool ok = fd >= 0 && ::connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof(a)) == 0;
  if (fd >= 0) ::close(fd);
  return ok;
}

// ggml's RPC server on the CPU, in a child process, as a worker; with `tandem_child`, tandem's own
// RPC child (`tandem worker rpc-server`, which installs datapath/input_writes.h and so takes the
// head's markers).
class CpuRpcServer {
 public:
  explicit CpuRpcServer(bool tandem_child = false) {
    port_ = free_port();
    if (port_ < 0) return;
    endpoint_ = "127.0.0.1:" + std::to_string(port_);
    pid_ = ::fork();
    if (pid_ == 0) {
      ggml_backend_dev_t cpu = ggml_backend_dev_by_type(GGML_BACKEND_DEVICE_TYPE_CPU);
      if (tandem_child) {
        ::execl(TANDEM_BINARY, TANDEM_BINARY, "worker", "rpc-server", "--endpoint", endpoint_.c_str(), "--threads", "1",
                static_cast<char*>(nullptr));
        std::fprintf(stderr, "cannot run %s: %s\n", TANDEM_BINARY, std::strerror(errno));
        ::_exit(3);
      }
      ggml_backend_rpc_start_server(endpoint_.c_str(), nullptr, 1, 1, &cpu);
      ::_exit(0);
    }
    for (int i = 0; i < 100 && !accepts(port_); ++i) std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  ~CpuRpcServer() {
    if (pid_ > 0) {
      ::kill(pid_, SIGKILL);
      ::waitpid(pid_, nullptr, 0);
    }
  }
  const std::string& endpoint() const { return endpoint_; }
  bool up() const { return pid_ > 0 && accepts(port_); }

 private:
  int port_ = -1;
  pid_t pid_ = -1;
  std::string endpoint_;
};

// The RPC device of ggml's RPC server on the CPU in a child process (`server`); nullptr when it fails.
inline ggml_backend_dev_t rpc_worker(const CpuRpcServer& server) {
  if (!server.up()) return nullptr;
  ggml_backend_reg_t reg = ggml_backend_rpc_add_server(server.endpoint().c_str());
  return reg != nullptr && ggml_backend_reg_dev_count(reg) >= 1 ? ggml_backend_reg_dev_get(reg, 0) : nullptr;
}

}  // namespace tandem::datapath::test_support
