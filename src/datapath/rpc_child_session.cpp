#include "datapath/rpc_child_session.h"

#include "datapath/self_check.h"

namespace tandem::datapath {

Result<std::unique_ptr<RpcChildSession>> RpcChildSession::open(const RpcChildOptions& options) {
  TANDEM_RETURN_IF_ERROR(check_interposition());
  std::unique_ptr<RpcChildSession> s(new RpcChildSession(options.queue_input_writes));
  auto shares = ShareStore::open(options.spill_dir, s->writes_);
  if (!shares.is_ok()) return shares.status();
  s->shares_ = std::move(shares.value());
  if (!set_device_fence_hooks(s.get())) {
    return Status::internal("an RPC child's data-path session is already open in this process");
  }
  s->fence_installed_ = true;
  if (!set_first_hooks(s.get())) {
    return Status::internal("the prompt cache's hooks are taken in this process (a head's shares, or another child)");
  }
  s->first_installed_ = true;
  return s;
}

RpcChildSession::~RpcChildSession() {
  if (first_installed_) set_first_hooks(nullptr);
  if (fence_installed_) set_device_fence_hooks(nullptr);
}

}  // namespace tandem::datapath
