// The prompt cache's figures: conversations that take turns on the server's slots.
#include <chrono>
#include <thread>

#include "bench/client.h"

namespace tandem::bench {
namespace {

using nlohmann::json;

// What tandem's /health says about the link and the prompt cache; all zero for a server without
// them (llama-server), where `known` stays false.
struct Counters {
  bool known = false, caching = false;
  uint64_t link_bytes = 0;  // both ways, every worker
  uint64_t saves = 0, saved_bytes = 0, saved_worker_bytes = 0;
};

Counters read_counters(Client& client) {
  Counters c;
  const auto h = client.health();
  if (!h || !h->contains("prompt_cache") || !h->contains("nodes")) return c;
  c.known = true;
  for (const json& n : (*h)["nodes"]) {
    c.link_bytes += n.value("bytes_to_worker", uint64_t{0}) + n.value("bytes_from_worker", uint64_t{0});
  }
  const json& pc = (*h)["prompt_cache"];
  c.caching = pc.value("max_bytes_per_node", uint64_t{0}) > 0;
  c.saves = pc.value("saves", uint64_t{0});
  c.saved_bytes = pc.value("saved_bytes", uint64_t{0});
  c.saved_worker_bytes = pc.value("saved_worker_bytes", uint64_t{0});
  return c;
}

// tandem saves a slot's state as soon as its request ends (the gateway learns of it within a
// second): waits, bounded, until one more save than `before` shows.
Counters after_save(Client& client, const Counters& before) {
  Counters now = read_counters(client);
  for (int i = 0; i < 100 && now.caching && now.saves <= before.saves; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
    now = read_counters(client);
  }
  // The link counts come from the forwarders at once, the save count with the engine's next
  // status: read the link again once the save is known.
  return read_counters(client);
}

// `n` tokens to append to a conversation: a word other than the prompts' own, so that no two
// turns merge into one token at their seam.
std::string turn_text(int n) {
  std::string t;
  for (int i = 0; i < n; ++i) t += " and";
  return t;
}

}  // namespace

Status conversation_figures(Client& client, const BenchOptions& o, std::mt19937& rng, BenchResult* out) {
  std::vector<std::string> prompts;
  std::vector<double> cold, returning, continuing, restore_bytes, continue_bytes, save_bytes, state, worker;
  const auto turn = [&](const std::string& prompt, std::vector<double>* ttft, std::vector<double>* link) -> Status {
    const Counters before = read_counters(client);
    auto s = client.stream(prompt, 2);
    if (!s.is_ok()) return s.status();
    ttft->push_back(s->ttft_s * 1000);
    const Counters served = read_counters(client);
    if (link != nullptr && before.known) link->push_back(static_cast<double>(served.link_bytes - before.link_bytes));
    // tandem keeps no state of 64 tokens or fewer (docs/serve.md): nothing to wait for then.
    const Counters saved = s->prompt_tokens > 64 ? after_save(client, served) : served;
    if (saved.known && saved.saves > served.saves) {
      save_bytes.push_back(static_cast<double>(saved.link_bytes - served.link_bytes));
      state.push_back(static_cast<double>(saved.saved_bytes - served.saved_bytes) / (saved.saves - served.saves));
      worker.push_back(static_cast<double>(saved.saved_worker_bytes - served.saved_worker_bytes) /
                       (saved.saves - served.saves));
    }
    return Status::ok();
  };
  for (int c = 0; c < o.conversations; ++c) {
    prompts.push_back(prompt_of(o.conversation_tokens, rng));
    if (Status s = turn(prompts.back(), &cold, nullptr); !s.is_ok()) return s;
  }
  for (int t = 0; t < o.turns; ++t) {
    for (std::string& p : prompts) {
      p += turn_text(o.turn_tokens);
      if (Status s = turn(p, &returning, &restore_bytes); !s.is_ok()) return s;
    }
  }
  // The same conversation again at once: its slot still holds it, nothing is restored.
  for (int t = 0; t < o.turns; ++t) {
    prompts.back() += turn_text(o.turn_tokens);
    if (Status s = turn(prompts.back(), &continuing, &continue_bytes); !s.is_ok()) return s;
  }
  out->figures.push_back(summarize("cold_ttft_ms", "ms", cold));
  out->figures.push_back(summarize("returning_ttft_ms", "ms", returning));
  out->figures.push_back(summarize("continuing_ttft_ms", "ms", continuing));
  if (!restore_bytes.empty() && !continue_bytes.empty()) {
    out->figures.push_back(summarize("returning_link_bytes", "B", restore_bytes));
    out->figures.push_back(summarize("continuing_link_bytes", "B", continue_bytes));
    // What the restore adds to a turn's own traffic; 0 when that is within the turns' difference
    // (a returning turn's context is shorter than the continuing ones', which come last).
    const double baseline = summarize("", "", continue_bytes).median;
    std::vector<double> restore;
    for (double b : restore_bytes) restore.push_back(std::max(0.0, b - baseline));
    out->figures.push_back(summarize("link_bytes_per_restore", "B", restore));
  }
  if (!save_bytes.empty()) {
    out->figures.push_back(summarize("link_bytes_per_save", "B", save_bytes));
    out->figures.push_back(summarize("state_kv_bytes", "B", state));
    out->figures.push_back(summarize("state_worker_kv_bytes", "B", worker));
  }
  return Status::ok();
}

}  // namespace tandem::bench
