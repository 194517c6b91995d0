#include "engine/worker_shares.h"

namespace tandem::engine {

Status WorkerShares::save(SavedState& state, const std::function<void()>& write) {
  datapath::KvShares::Saved saved;
  const Status kept = shares_.save(state.key, state.buffer->data(), state.size, write, &saved);
  state.holes = std::move(saved.holes);
  state.shares = std::move(saved.shares);
  return kept;
}

Status WorkerShares::restore(const SavedState& state, const std::function<void()>& read) {
  return shares_.restore(state.key, state.shares, state.buffer->data(), state.size, read);
}

}  // namespace tandem::engine
