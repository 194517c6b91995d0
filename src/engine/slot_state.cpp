// Saving and restoring a slot's sequence state for the prompt cache.
#include "common/host_memory.h"
#include "engine/slot.h"
#include "llama.h"

namespace tandem::engine {

SavedState Slot::save_state(llama_context* ctx, uint64_t key, StateShares& shares, std::string* why) const {
  if (cache_.empty()) return {};
  const size_t size = llama_state_seq_get_size(ctx, seq_id_);
  auto buf = std::make_unique<StateBuffer>(size);
  if (buf->data() == nullptr) {
    if (why != nullptr) *why = "no address space for a state of " + std::to_string(size) + " bytes";
    return {};
  }
  SavedState out;
  out.key = key;
  out.size = size;
  out.buffer = std::move(buf);
  size_t n = 0;
  const Status kept = shares.save(out, [&] { n = llama_state_seq_get_data(ctx, out.buffer->data(), size, seq_id_); });
  if (n == 0 || !kept.is_ok()) {
    shares.drop(out);
    if (why != nullptr) *why = n == 0 ? "llama.cpp could not serialise the sequence" : kept.message();
    return {};
  }
  out.size = n;
  return out;
}

bool Slot::restore_state(llama_context* ctx, std::vector<llama_token> tokens, const SavedState& state,
                         StateShares& shares, std::string* why) {
  llama_memory_t mem = llama_get_memory(ctx);
  llama_memory_seq_rm(mem, seq_id_, -1, -1);
  cache_.clear();
  saved_ = false;
  const auto fail = [&](const std::string& reason) {
    llama_memory_seq_rm(mem, seq_id_, -1, -1);
    if (why != nullptr) *why = reason;
    return false;
  };
  if (tokens.size() > static_cast<size_t>(n_ctx_)) return fail("the state is longer than a slot's context");
  if (state.buffer == nullptr || state.buffer->size() < state.size) return fail("the state has no bytes");
  bool read = false;
  size_t n = 0;
  const Status restored = shares.restore(state, [&] {
    read = true;
    n = llama_state_seq_set_data(ctx, state.buffer->data(), state.size, seq_id_);
  });
  // A node no longer holds its part: nothing was read.
  if (!read) return fail(restored.is_ok() ? "the state was not read" : restored.message());
  if (n != state.size) return fail("llama.cpp refused the state");
  if (!restored.is_ok()) return fail(restored.message());
  cache_ = std::move(tokens);
  return true;
}

}  // namespace tandem::engine
