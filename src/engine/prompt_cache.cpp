#include "engine/prompt_cache.h"

#include <algorithm>

namespace tandem::engine {
namespace {

size_t common_prefix(const std::vector<int32_t>& a, const std::vector<int32_t>& b) {
  const auto end =
      std::mismatch(a.begin(), a.begin() + static_cast<std::ptrdiff_t>(std::min(a.size(), b.size())), b.begin());
  return static_cast<size_t>(end.first - a.begin());
}

}  // namespace

void PromptCache::put(std::vector<int32_t> tokens, std::vector<uint8_t> state) {
  if (!enabled() || tokens.empty()) return;
  for (auto it = entries_.begin(); it != entries_.end();) {
    if (it->tokens.size() <= tokens.size() && common_prefix(it->tokens, tokens) == it->tokens.size()) {
      stats_.bytes -= it->state.size();
      it = entries_.erase(it);
    } else {
      ++it;
    }
  }
  if (state.size() > max_bytes_) {
    ++stats_.evictions;
    return;
  }
  evict_to(max_bytes_ - state.size());
  stats_.bytes += state.size();
  entries_.push_front({std::move(tokens), std::move(state)});
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
  stats_.bytes -= best->state.size();
  out->tokens = std::move(best->tokens);
  out->state = std::move(best->state);
  out->prefix = best_prefix;
  entries_.erase(best);
  return true;
}

void PromptCache::evict_to(uint64_t bytes) {
  while (stats_.bytes > bytes && !entries_.empty()) {
    stats_.bytes -= entries_.back().state.size();
    entries_.pop_back();
    ++stats_.evictions;
  }
}

PromptCacheStats PromptCache::stats() const {
  PromptCacheStats s = stats_;
  s.max_bytes = max_bytes_;
  s.entries = entries_.size();
  return s;
}

}  // namespace tandem::engine
