// tandem's EAGLE3 drafter, fed by the tap, proposes the tokens llama.cpp's own EAGLE3 driver
// proposes from its own route's states: two speculators over one qwen3moe target (whose graph
// records its layer inputs, so both routes run), each with its own copy of the draft's context,
// checked step by step through a greedy generation.
#include "engine/eagle3_drafter.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "eagle3_models.h"
#include "engine/eagle3_tap.h"
#include "engine/scheduler.h"
#include "engine/speculation.h"
#include "event_collector.h"
#include "test_util.h"

namespace tandem::engine {
namespace {

using tandem::testing::ScratchDir;
using testing::argmax;
using testing::ContextPtr;
using testing::Eagle3Pair;
using testing::scheduler_like_params;
using testing::write_eagle3_pair;

// Sequences generating together with drafts from two speculators at once; a step keeps a number
// of draft tokens that cycles through 0..4 (whatever the target says: the drafters are compared,
// not the text), so that every way a draft can be cut is taken.
class TwoRoutes {
 public:
  TwoRoutes(llama_context* ctx, Speculator* own, Speculator* tapped, int n_seq)
      : ctx_(ctx), own_(own), tapped_(tapped), held_(static_cast<size_t>(n_seq)), next_(static_cast<size_t>(n_seq)) {}

  // Reads one prompt per sequence, all in one batch; false when a decode failed.
  bool read(const std::vector<std::vector<llama_token>>& prompts) {
    llama_batch batch = llama_batch_init(64, 0, 1);
    std::vector<int> last;
    for (size_t seq = 0; seq < prompts.size(); ++seq) {
      for (Speculator* s : {own_, tapped_}) s->begin(static_cast<int>(seq), {});
      for (size_t i = 0; i < prompts[seq].size(); ++i) {
        if (i + 1 == prompts[seq].size()) last.push_back(batch.n_tokens);
        common_batch_add(batch, prompts[seq][i], static_cast<llama_pos>(i), {static_cast<llama_seq_id>(seq)},
                         i + 1 == prompts[seq].size());
      }
      held_[seq] = prompts[seq];
    }
    const bool ok = decode(batch);
    llama_batch_free(batch);
    for (size_t seq = 0; ok && seq < prompts.size(); ++seq) next_[seq] = argmax(ctx_, last[seq]);
    return ok;
  }

  // One step of every sequence: both speculators draft, the drafts are compared, the target
  // decodes them. Adds the tokens drafted to *drafted; false when a decode failed.
  bool step(int n_step, int* drafted) {
    const size_t n_seq = held_.size();
    std::vector<std::vector<int>> held(n_seq), a(n_seq), b(n_seq);
    for (size_t seq = 0; seq < n_seq; ++seq) {
      held[seq].assign(held_[seq].begin(), held_[seq].end());
      const int pos = static_cast<int>(held[seq].size());
      own_->want_draft(static_cast<int>(seq), &held[seq], next_[seq], pos, 4, &a[seq]);
      tapped_->want_draft(static_cast<int>(seq), &held[seq], next_[seq], pos, 4, &b[seq]);
    }
    own_->draft_all();
    tapped_->draft_all();
    llama_batch batch = llama_batch_init(64, 0, 1);
    std::vector<int> first;
    for (size_t seq = 0; seq < n_seq; ++seq) {
      EXPECT_EQ(a[seq], b[seq]) << "sequence " << seq << " at position " << held[seq].size();
      *drafted += static_cast<int>(a[seq].size());
      const int pos = static_cast<int>(held[seq].size());
      first.push_back(batch.n_tokens);
      common_batch_add(batch, next_[seq], pos, {static_cast<llama_seq_id>(seq)}, true);
      for (size_t i = 0; i < a[seq].size(); ++i)
        common_batch_add(batch, a[seq][i], pos + 1 + static_cast<int>(i), {static_cast<llama_seq_id>(seq)}, true);
    }
    const bool ok = decode(batch);
    llama_batch_free(batch);
    for (size_t seq = 0; ok && seq < n_seq; ++seq)
      keep(static_cast<int>(seq), a[seq], first[seq], (n_step + static_cast<int>(seq)) % 5);
    return ok;
  }

 private:
  bool decode(const llama_batch& batch) {
    if (llama_decode(ctx_, batch) != 0) return false;
    const bool a = own_->process(batch), b = tapped_->process(batch);
    EXPECT_TRUE(a && b);
    return a && b;
  }

  // Keeps `want` of `seq`'s draft (at most all of it) and the target's token after them.
  void keep(int seq, const std::vector<int>& draft, int first, int want) {
    const int accepted = std::min(want, static_cast<int>(draft.size()));
    std::vector<llama_token>& held = held_[static_cast<size_t>(seq)];
    held.push_back(next_[static_cast<size_t>(seq)]);
    held.insert(held.end(), draft.begin(), draft.begin() + accepted);
    for (Speculator* s : {own_, tapped_}) s->accept(seq, accepted);
    llama_memory_seq_rm(llama_get_memory(ctx_), seq, static_cast<llama_pos>(held.size()), -1);
    for (Speculator* s : {own_, tapped_}) s->cut(seq, static_cast<int>(held.size()));
    next_[static_cast<size_t>(seq)] = argmax(ctx_, first + accepted);
  }

  llama_context* ctx_;
  Speculator *own_, *tapped_;
  std::vector<std::vector<llama_token>> held_;
  std::vector<llama_token> next_;
};

// Two routes over one qwen3moe target of `n_seq` slots, through `steps` steps; the tokens drafted.
int draft_both_ways(const Eagle3Pair& p, int n_seq, int steps) {
  auto tap = std::make_unique<Eagle3Tap>();
  llama_context_params cp = scheduler_like_params(n_seq);
  tap->install(&cp);
  ContextPtr ctx(llama_init_from_model(p.model.get(), cp));
  EXPECT_TRUE(ctx);
  const SpeculationOptions o{"draft", p.draft, 4};
  auto own = Speculator::create(o, ctx.get(), n_seq);  // llama.cpp's driver, its own route's states
  EXPECT_TRUE(own.is_ok()) << own.status().to_string();
  auto tapped = Speculator::create(o, ctx.get(), n_seq, std::move(tap));  // tandem's drafter, the tap's
  EXPECT_TRUE(tapped.is_ok()) << tapped.status().to_string();
  if (!ctx || !own.is_ok() || !tapped.is_ok()) return 0;
  TwoRoutes routes(ctx.get(), own.value().get(), tapped.value().get(), n_seq);
  std::vector<std::vector<llama_token>> prompts(static_cast<size_t>(n_seq));
  for (int seq = 0; seq < n_seq; ++seq) {
    for (int i = 0; i < 24; ++i) prompts[static_cast<size_t>(seq)].push_back(200 + (i * 37 + seq * 11) % 500);
  }
  EXPECT_TRUE(routes.read(prompts));
  int drafted = 0;
  for (int step = 0; step < steps; ++step) {
    if (!routes.step(step, &drafted)) return drafted;
  }
  return drafted;
}

TEST(Eagle3Drafter, DraftsWhatLlamaCppsDriverDraftsFromTheSameStates) {
  ScratchDir dir;
  Eagle3Pair p = write_eagle3_pair(dir.file(""), "tiny-qwen3moe", 4);
  ASSERT_TRUE(p.model);
  EXPECT_EQ(draft_both_ways(p, 1, 12), 12 * 4) << "every step drafts its 4 tokens";
  // Two slots stepping together (one micro-batch a step: their runs are the same length).
  EXPECT_EQ(draft_both_ways(p, 2, 8), 2 * 8 * 4);
}

// The tokens of `prompts` decoded greedily, together on `parallel` slots of a scheduler.
std::vector<std::vector<int32_t>> greedy_together(llama_model* model, int parallel, const SpeculationOptions& spec,
                                                  const std::vector<std::string>& prompts, int n) {
  SchedulerOptions o;
  o.parallel = parallel;
  o.context = 512;
  o.threads = 1;
  o.max_prompt_chunk = 32;
  o.speculation = spec;
  auto s = Scheduler::create(model, o);
  EXPECT_TRUE(s.is_ok()) << s.status().to_string();
  if (!s.is_ok()) return {};
  std::vector<std::shared_ptr<testing::EventCollector>> events;
  for (size_t i = 0; i < prompts.size(); ++i) {
    const nlohmann::json body = {
        {"prompt", prompts[i]}, {"max_tokens", n}, {"temperature", 0}, {"ignore_eos", true}, {"return_tokens", true}};
    events.push_back(std::make_shared<testing::EventCollector>());
    auto c = events.back();
    EXPECT_TRUE(s.value()
                    ->submit("r" + std::to_string(i), RequestKind::completion, body.dump(),
                             [c](const EngineEvent& e) { (*c)(e); })
                    .is_ok());
  }
  std::vector<std::vector<int32_t>> tokens;
  for (auto& c : events) {
    EXPECT_TRUE(c->wait());
    EXPECT_EQ(c->final_event().type, EngineEvent::Type::done) << c->final_event().message;
    tokens.push_back(c->final_event().tokens);
  }
  if (!spec.draft_model.empty()) EXPECT_GT(s.value()->stats().speculation.drafted, 0u);
  return tokens;
}

// Two slots of a minimax-m3 target with EAGLE3 drafts through the tap: prompts of different
// lengths, so that llama.cpp splits some steps into several micro-batches; each request keeps the
// tokens it gets alone without speculation.
TEST(Eagle3Drafter, TwoSlotsOfAMinimaxM3TargetKeepTheirGreedyTokens) {
  ScratchDir dir;
  Eagle3Pair p = write_eagle3_pair(dir.file(""), "tiny", 4);
  ASSERT_TRUE(p.model);
  const std::vector<std::string> prompts = {"Copy the list: alpha beta gamma delta alpha beta gamma delta",
                                            "Two boxes joined by one cable share one model"};
  std::vector<std::vector<int32_t>> alone;
  for (const std::string& prompt : prompts) {
    auto one = greedy_together(p.model.get(), 1, {}, {prompt}, 20);
    ASSERT_EQ(one.size(), 1u);
    alone.push_back(one[0]);
  }
  const auto together = greedy_together(p.model.get(), 2, {"draft", p.draft, 3}, prompts, 20);
  EXPECT_EQ(together, alone);
}

}  // namespace
}  // namespace tandem::engine
