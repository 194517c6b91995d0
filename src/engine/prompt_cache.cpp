#include "engine/prompt_cache.h"

#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <filesystem>

#include "common/log.h"

namespace tandem::engine {
namespace {

size_t common_prefix(const std::vector<int32_t>& a, const std::vector<int32_t>& b) {
  const auto end =
      std::mismatch(a.begin(), a.begin() + static_cast<std::ptrdiff_t>(std::min(a.size(), b.size())), b.begin());
  return static_cast<size_t>(end.first - a.begin());
}

// Calls `fn(at, bytes)` for each stretch of the state outside its holes, in order: the head's part.
template <typename Fn>
bool outside_holes(const SavedState& s, Fn fn) {
  uint64_t at = 0;
  for (const auto& h : s.holes) {
    if (h.at > at && !fn(at, h.at - at)) return false;
    at = h.at + h.bytes;
  }
  return s.size <= at || fn(at, s.size - at);
}

bool write_head_part(const std::string& path, const SavedState& s) {
  std::FILE* f = std::fopen(path.c_str(), "wb");
  if (f == nullptr) return false;
  const bool written =
      outside_holes(s, [&](uint64_t at, uint64_t n) { return std::fwrite(s.buffer->data() + at, 1, n, f) == n; });
  const bool closed = std::fclose(f) == 0;
  if (!written || !closed) std::remove(path.c_str());
  return written && closed;
}

// The head's part back into a fresh buffer of the state's size, its holes untouched.
bool read_head_part(const std::string& path, SavedState& s) {
  auto buffer = std::make_unique<StateBuffer>(s.size);
  std::FILE* f = std::fopen(path.c_str(), "rb");
  if (f == nullptr || buffer->data() == nullptr) {
    if (f != nullptr) std::fclose(f);
    return false;
  }
  const bool read =
      outside_holes(s, [&](uint64_t at, uint64_t n) { return std::fread(buffer->data() + at, 1, n, f) == n; });
  const bool at_end = std::fgetc(f) == EOF;
  std::fclose(f);
  if (!read || !at_end) return false;
  s.buffer = std::move(buffer);
  return true;
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

Result<std::unique_ptr<PromptCache>> PromptCache::create(PromptCacheOptions options) {
  if (!options.disk_dir.empty() && options.max_bytes > 0) {
    std::error_code ec;
    std::filesystem::create_directories(options.disk_dir, ec);
    if (ec) return Status::invalid_argument("prompt-cache folder " + options.disk_dir + ": " + ec.message());
    // An earlier engine's states: their workers' parts went with its session.
    for (const auto& e : std::filesystem::directory_iterator(options.disk_dir, ec)) {
      if (e.path().extension() == ".state") std::filesystem::remove(e.path(), ec);
    }
  }
  return std::unique_ptr<PromptCache>(new PromptCache(std::move(options)));
}

PromptCache::PromptCache(uint64_t max_bytes, StateShares* shares)
    : PromptCache(PromptCacheOptions{max_bytes, "", 0, shares}) {}

PromptCache::PromptCache(PromptCacheOptions options)
    : o_(std::move(options)), shares_(o_.shares != nullptr ? o_.shares : &whole_) {}

PromptCache::~PromptCache() { clear(); }

void PromptCache::clear() {
  while (!entries_.empty()) release(entries_.begin());
}

std::string PromptCache::path(const SavedState& s) const {
  return o_.disk_dir + "/" + std::to_string(::getpid()) + "-" + std::to_string(s.key) + ".state";
}

void PromptCache::account(const SavedState& s, bool on_disk, bool add) {
  const auto apply = [&](uint64_t& total, uint64_t n) { total = add ? total + n : total - n; };
  apply(on_disk ? stats_.disk_bytes : stats_.bytes, s.head_bytes());
  for (const auto& w : s.shares) {
    apply((on_disk ? stats_.per_worker_disk : stats_.per_worker)[w.endpoint], w.bytes);
    apply(on_disk ? stats_.worker_disk_bytes : stats_.worker_bytes, w.bytes);
  }
}

// Whether some node's tier would hold more than its bound with `extra` added.
bool PromptCache::over(const SavedState& extra, bool on_disk) const {
  const uint64_t bound = on_disk ? o_.disk_max_bytes : o_.max_bytes;
  const auto& workers = on_disk ? stats_.per_worker_disk : stats_.per_worker;
  if ((on_disk ? stats_.disk_bytes : stats_.bytes) + extra.head_bytes() > bound) return true;
  for (const auto& w : extra.shares) {
    const auto it = workers.find(w.endpoint);
    if ((it != workers.end() ? it->second : 0) + w.bytes > bound) return true;
  }
  return false;
}

bool PromptCache::fits_alone(const SavedState& s, uint64_t bound) const {
  bool fits = s.head_bytes() <= bound;
  for (const auto& w : s.shares) fits = fits && w.bytes <= bound;
  return fits;
}

void PromptCache::release(Iter it) {
  account(it->state, it->on_disk, false);
  if (it->on_disk) std::remove(path(it->state).c_str());
  shares_->drop(it->state);
  entries_.erase(it);
}

void PromptCache::put(std::vector<int32_t> tokens, SavedState state) {
  if (!enabled() || tokens.empty() || !fits_alone(state, o_.max_bytes)) {
    if (enabled() && !tokens.empty()) ++stats_.evictions;
    shares_->drop(state);
    return;
  }
  for (auto it = entries_.begin(); it != entries_.end();) {
    const auto next = std::next(it);
    if (it->tokens.size() <= tokens.size() && common_prefix(it->tokens, tokens) == it->tokens.size()) release(it);
    it = next;
  }
  while (over(state, false) && evict_one()) {}
  ++stats_.saves;
  stats_.saved_bytes += state.size;
  stats_.saved_worker_bytes += state.worker_bytes();
  account(state, false, true);
  entries_.push_front({std::move(tokens), std::move(state), false});
}

bool PromptCache::evict_one() {
  auto last = std::find_if(entries_.rbegin(), entries_.rend(), [](const Entry& e) { return !e.on_disk; });
  if (last == entries_.rend()) return false;
  const Iter it = std::prev(last.base());  // stays valid while spill() drops other entries
  if (spill(*it)) return true;
  ++stats_.evictions;
  release(it);
  return true;
}

// Moves `e` (in memory) to disk, dropping the least recently used states there to make room;
// false when there is no disk tier, the state is larger than its bound, or its file cannot be written.
bool PromptCache::spill(Entry& e) {
  if (o_.disk_dir.empty() || !fits_alone(e.state, o_.disk_max_bytes) || e.state.buffer == nullptr) return false;
  while (over(e.state, true)) {
    auto last = std::find_if(entries_.rbegin(), entries_.rend(), [](const Entry& x) { return x.on_disk; });
    if (last == entries_.rend()) return false;
    ++stats_.evictions;
    release(std::prev(last.base()));
  }
  if (!write_head_part(path(e.state), e.state)) {
    log::warn("engine", "prompt cache: could not write a state to " + o_.disk_dir + "; it is dropped instead");
    return false;
  }
  shares_->spill(e.state);
  account(e.state, false, false);
  account(e.state, true, true);
  e.state.buffer.reset();
  e.on_disk = true;
  ++stats_.spills;
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
  if (best->on_disk && !read_head_part(path(best->state), best->state)) {
    log::warn("engine", "prompt cache: a state's file in " + o_.disk_dir + " could not be read back; it is dropped");
    ++stats_.misses;
    ++stats_.failed_restores;
    release(best);
    return false;
  }
  ++stats_.hits;
  account(best->state, best->on_disk, false);
  if (best->on_disk) std::remove(path(best->state).c_str());
  out->tokens = std::move(best->tokens);
  out->state = std::move(best->state);
  out->prefix = best_prefix;
  entries_.erase(best);
  return true;
}

PromptCacheStats PromptCache::stats() const {
  PromptCacheStats s = stats_;
  s.max_bytes = o_.max_bytes;
  s.max_disk_bytes = o_.disk_dir.empty() ? 0 : o_.disk_max_bytes;
  s.entries = entries_.size();
  for (auto* m : {&s.per_worker, &s.per_worker_disk}) {
    for (auto it = m->begin(); it != m->end();) it = it->second == 0 ? m->erase(it) : std::next(it);
  }
  return s;
}

}  // namespace tandem::engine
