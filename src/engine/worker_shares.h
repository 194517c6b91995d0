// The prompt cache's StateShares (engine/prompt_cache.h) on the tandem workers: each state's regions
// in a worker's KV stay in that worker's memory, through the head's data path (datapath/kv_shares.h).
// One at a time in a process (the data path's first hooks are the process's); while another holds
// them, states move whole. Private to the engine.
#pragma once

#include <set>
#include <string>

#include "datapath/kv_shares.h"
#include "engine/prompt_cache.h"

namespace tandem::engine {

class WorkerShares final : public StateShares {
 public:
  // `endpoints`: the placement's tandem workers ("host:port"), never a stock RPC server.
  explicit WorkerShares(std::set<std::string> endpoints) : shares_(std::move(endpoints)) {}

  Status save(SavedState& state, const std::function<void()>& write) override;
  Status restore(const SavedState& state, const std::function<void()>& read) override;
  void drop(const SavedState& state) override { shares_.drop(state.key, state.shares); }
  void spill(const SavedState& state) override { shares_.spill(state.key, state.shares); }

  // What the shares did since this object was made.
  datapath::KvShareStats stats() const { return shares_.stats(); }

 private:
  datapath::KvShares shares_;
};

}  // namespace tandem::engine
