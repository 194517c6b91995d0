// The worker's RPC child's data path: what it does with the head's step inputs and markers
// (datapath/input_writes.h) and the prompt cache's shares it keeps (datapath/kv_share_store.h),
// owning all their state for the life of the RPC server.
//
// While the session lives it is the device fence of datapath/interpose.h (every ggml call that
// reads, runs on or releases device memory first waits for the queued writes; a tensor set after
// the tensor-set hooks goes to the input writes) and its first hooks (the shares' markers, before
// any other hook sees them). One per process at a time: the hook table is the process's.
#pragma once

#include <memory>
#include <string>

#include "common/status.h"
#include "datapath/input_writes.h"
#include "datapath/interpose.h"
#include "datapath/kv_share_store.h"

namespace tandem::datapath {

struct RpcChildOptions {
  // false leaves the step's writes to ggml (one wait each) and handles only the markers.
  bool queue_input_writes = true;
  // Where the prompt cache's spilled shares go ("" = none: a spilled share is dropped); created and
  // emptied of an earlier process's files.
  std::string spill_dir;
};

class RpcChildSession final : public DeviceFenceHooks, public FirstHooks {
 public:
  // Proves that ggml's calls reach tandem's definitions (datapath/self_check.h), then installs the
  // fence and the first hooks. Errors: the proof failed, the spill folder cannot be made, or
  // another child session (or the head's shares) holds the hooks.
  static Result<std::unique_ptr<RpcChildSession>> open(const RpcChildOptions& options);
  // Uninstalls the hooks, then frees the slots, shares and queues.
  ~RpcChildSession();
  RpcChildSession(const RpcChildSession&) = delete;
  RpcChildSession& operator=(const RpcChildSession&) = delete;

  InputWrites& input_writes() { return writes_; }
  ShareStore& kv_shares() { return *shares_; }

  // DeviceFenceHooks and FirstHooks (datapath/interpose.h), for the interposers.
  void fence() override { writes_.flush(); }
  enum ggml_status graph(ggml_backend_t backend, ggml_cgraph* graph, LaunchFn real) override {
    return writes_.run_graph(backend, graph, real);
  }
  bool tensor_set(ggml_tensor* tensor, const void* data, size_t offset, size_t size) override {
    return writes_.place(tensor, data, offset, size);
  }
  bool set(ggml_tensor* tensor, const void* data, size_t offset, size_t size) override {
    return shares_->on_set(tensor, data, offset, size);
  }
  bool get(const ggml_tensor* tensor, void* data, size_t offset, size_t size) override {
    return shares_->on_get(tensor, data, offset, size);
  }

 private:
  explicit RpcChildSession(bool queue) : writes_(queue) {}

  InputWrites writes_;
  std::unique_ptr<ShareStore> shares_;
  bool fence_installed_ = false, first_installed_ = false;
};

}  // namespace tandem::datapath
