// A fake of the prompt cache's StateShares (engine/prompt_cache.h): one node, "fake:1", that keeps
// the first `keep` bytes of every state. A save moves them out of the head's buffer (a hole there,
// overwritten so that a restore without them could not pass), a restore puts them back before
// llama.cpp reads; what it holds, drops and spills is there for a test to see. Any thread.
#pragma once

#include <algorithm>
#include <cstdint>
#include <map>
#include <mutex>
#include <vector>

#include "engine/prompt_cache.h"

namespace tandem::engine::testing {

class FakeShares final : public StateShares {
 public:
  explicit FakeShares(uint64_t keep = 0) : keep_(keep) {}

  Status save(SavedState& s, const std::function<void()>& write) override {
    write();
    std::lock_guard<std::mutex> lock(mutex_);
    ++saves_;
    const uint64_t n = std::min<uint64_t>(keep_, s.size);
    if (n == 0) return Status::ok();
    held_[s.key].assign(s.buffer->data(), s.buffer->data() + n);
    std::fill(s.buffer->data(), s.buffer->data() + n, uint8_t{0xee});
    s.holes.push_back({0, n});
    s.shares.push_back({"fake:1", n, nullptr});
    return Status::ok();
  }

  Status restore(const SavedState& s, const std::function<void()>& read) override {
    std::unique_lock<std::mutex> lock(mutex_);
    ++restores_;
    std::vector<uint8_t> part;
    if (!s.shares.empty()) {
      const auto it = held_.find(s.key);
      if (it == held_.end()) return Status::unavailable("fake:1 holds nothing of state " + std::to_string(s.key));
      part = it->second;
    }
    lock.unlock();
    std::copy(part.begin(), part.end(), s.buffer->data());
    read();
    std::fill(s.buffer->data(), s.buffer->data() + part.size(), uint8_t{0xee});
    return Status::ok();
  }

  void drop(const SavedState& s) override {
    std::lock_guard<std::mutex> lock(mutex_);
    dropped_.push_back(s.key);
    held_.erase(s.key);
  }
  void spill(const SavedState& s) override {
    std::lock_guard<std::mutex> lock(mutex_);
    spilled_.push_back(s.key);
  }

  // As a node that restarted: what it held of `key` is gone.
  void forget(uint64_t key) {
    std::lock_guard<std::mutex> lock(mutex_);
    held_.erase(key);
  }

  uint64_t saves() const {
    std::lock_guard<std::mutex> lock(mutex_);
    return saves_;
  }
  uint64_t restores() const {
    std::lock_guard<std::mutex> lock(mutex_);
    return restores_;
  }
  size_t held() const {
    std::lock_guard<std::mutex> lock(mutex_);
    return held_.size();
  }
  std::vector<uint64_t> dropped() const {
    std::lock_guard<std::mutex> lock(mutex_);
    return dropped_;
  }
  std::vector<uint64_t> spilled() const {
    std::lock_guard<std::mutex> lock(mutex_);
    return spilled_;
  }

 private:
  const uint64_t keep_;
  mutable std::mutex mutex_;
  uint64_t saves_ = 0, restores_ = 0;
  std::map<uint64_t, std::vector<uint8_t>> held_;
  std::vector<uint64_t> dropped_, spilled_;
};

}  // namespace tandem::engine::testing
