#include "engine/prompt_cache.h"

#include <sys/mman.h>

#include <algorithm>

namespace tandem::engine {
namespace {

size_t common_prefix(const std::vector<int32_t>& a, const std::vector<int32_t>& b) {
  const auto end =
      std::mismatch(a.begin(), a.begin() + static_cast<std::ptrdiff_t>(std::min(a.size(), b.size())), b.begin());
  return static_cast<size_t>(end.first - a.begin());
}

}  // namespace

StateBuffer::StateBuffer(size_t size) : size_(size), data_(nullptr) {
  // MAP_NORESERVE: the holes' pages are never touched, so they must not count against overcommit.
  void* p = size > 0 ? ::mmap(nullptr, size, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0)
                     : MAP_FAILED;
  if (p != MAP_FAILED) data_ = static_cast<uint8_t*>(p);
}

StateBuffer::~StateBuffer() {
  if (data_ != nullptr) ::munmap(data_, size_);
}

uint64_t SavedState::head_bytes() const {
  uint64_t n = size;
  for (const auto& h : holes) n -= h.bytes;
  return n;
}

uint64_t SavedState::worker_bytes() const {
  uint64_t n = 0;
  for (const auto& s : shares) n += s.bytes;
  return n;
}

PromptCache::~PromptCache() { clear(); }

void PromptCache::clear() {
  for (auto& e : entries_) {
    account(e.state, false);
    drop(e.state);
  }
  entries_.clear();
}

void PromptCache::drop(SavedState& s) {
  if (on_drop_) on_drop_(s);
}

void PromptCache::account(const SavedState& s, bool add) {
  const auto apply = [&](uint64_t& total, uint64_t n) { total = add ? total + n : total - n; };
  apply(stats_.bytes, s.head_bytes());
  for (const auto& w : s.shares) {
    apply(stats_.per_worker[w.endpoint], w.bytes);
    apply(stats_.worker_bytes, w.bytes);
  }
}

// Whether some node would hold more than the bound with `extra` added (the others hold it already).
bool PromptCache::over(const SavedState& extra) const {
  if (stats_.bytes + extra.head_bytes() > max_bytes_) return true;
  for (const auto& w : extra.shares) {
    const auto it = stats_.per_worker.find(w.endpoint);
    if ((it != stats_.per_worker.end() ? it->second : 0) + w.bytes > max_bytes_) return true;
  }
  return false;
}

void PromptCache::put(std::vector<int32_t> tokens, SavedState state) {
  if (!enabled() || tokens.empty()) return drop(state);
  for (auto it = entries_.begin(); it != entries_.end();) {
    if (it->tokens.size() <= tokens.size() && common_prefix(it->tokens, tokens) == it->tokens.size()) {
      account(it->state, false);
      drop(it->state);
      it = entries_.erase(it);
    } else {
      ++it;
    }
  }
  bool fits = state.head_bytes() <= max_bytes_;
  for (const auto& w : state.shares) fits = fits && w.bytes <= max_bytes_;
  if (!fits) {
    ++stats_.evictions;
    return drop(state);
  }
  while (over(state) && evict_one()) {}
  ++stats_.saves;
  stats_.saved_bytes += state.size;
  stats_.saved_worker_bytes += state.worker_bytes();
  account(state, true);
  entries_.push_front({std::move(tokens), std::move(state)});
}

bool PromptCache::evict_one() {
  if (entries_.empty()) return false;
  account(entries_.back().state, false);
  drop(entries_.back().state);
  entries_.pop_back();
  ++stats_.evictions;
  return true;
}

bool PromptCache::take(const std::vector<int32_t>& prompt, size_t at_least, Taken* out) {
  if (!enabled()) return false;
  auto best = entries_.end();
  size_t best_prefix = at_least;
  for (auto it = entries_.begin(); it != entries_.end(); ++it) {
    const size_t p = common_prefix(it->tokens, prompt);
    if (p > best_prefix) best = it, best_prefix = p;
  }
  if (best == entries_.end()) {
    ++stats_.misses;
    return false;
  }
  ++stats_.hits;
  account(best->state, false);
  out->tokens = std::move(best->tokens);
  out->state = std::move(best->state);
  out->prefix = best_prefix;
  entries_.erase(best);
  return true;
}

PromptCacheStats PromptCache::stats() const {
  PromptCacheStats s = stats_;
  s.max_bytes = max_bytes_;
  s.entries = entries_.size();
  for (auto it = s.per_worker.begin(); it != s.per_worker.end();) it = it->second == 0 ? s.per_worker.erase(it) : ++it;
  return s;
}

}  // namespace tandem::engine
