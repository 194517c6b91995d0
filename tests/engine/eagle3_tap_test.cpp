// The EAGLE3 tap: on a qwen3moe target (whose graph records its layer inputs) the states it
// captures through the graph's callback are, bit for bit, those llama.cpp's own route extracts;
// on a minimax-m3 target (whose graph does not) it captures every tapped layer; and what it costs
// a decode step on the CPU.
#include "engine/eagle3_tap.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstring>
#include <string>
#include <vector>

#include "../src/llama-ext.h"  // llama.cpp's own route: llama_{set,get}_embeddings_layer_inp
#include "eagle3_models.h"
#include "test_util.h"

namespace tandem::engine {
namespace {

using tandem::testing::ScratchDir;
using testing::add_token;
using testing::ContextPtr;
using testing::Eagle3Pair;
using testing::scheduler_like_params;
using testing::write_eagle3_pair;

// One decode: `runs` of (seq, first position, tokens), logits on the last token of the first run
// only (llama.cpp reorders its layer-input rows by output when outputs come out of order, which
// would garble its own route's rows beyond the order of its micro-batches).
struct TokenRun {
  llama_seq_id seq;
  llama_pos pos;
  int n;
};

bool decode(llama_context* ctx, const std::vector<TokenRun>& runs) {
  llama_batch batch = llama_batch_init(64, 0, 1);
  for (size_t r = 0; r < runs.size(); ++r) {
    for (int i = 0; i < runs[r].n; ++i) {
      add_token(batch, 100 + 7 * (runs[r].pos + i) + 13 * runs[r].seq, runs[r].pos + i, runs[r].seq,
                r == 0 && i + 1 == runs[r].n);
    }
  }
  const bool ok = llama_decode(ctx, batch) == 0;
  llama_batch_free(batch);
  return ok;
}

int total(const std::vector<TokenRun>& runs) {
  int n = 0;
  for (const TokenRun& r : runs) n += r.n;
  return n;
}

// The tapped rows of the last decode equal llama.cpp's layer-input rows, bit for bit.
void expect_same_rows(llama_context* ctx, Eagle3Tap& tap, const std::vector<int32_t>& layers, int n_tokens) {
  std::vector<float> features;
  const Status st = tap.take(n_tokens, &features);
  ASSERT_TRUE(st.is_ok()) << st.to_string();
  const size_t n_embd = static_cast<size_t>(tap.n_embd()), n_taps = layers.size();
  ASSERT_EQ(features.size(), static_cast<size_t>(n_tokens) * n_taps * n_embd);
  for (size_t k = 0; k < n_taps; ++k) {
    const float* own = llama_get_embeddings_layer_inp(ctx, static_cast<uint32_t>(layers[k]));
    ASSERT_NE(own, nullptr);
    for (size_t i = 0; i < static_cast<size_t>(n_tokens); ++i) {
      EXPECT_EQ(std::memcmp(features.data() + (i * n_taps + k) * n_embd, own + i * n_embd, n_embd * sizeof(float)), 0)
          << "layer " << layers[k] << ", row " << i;
    }
  }
}

TEST(Eagle3Tap, CapturesTheStatesLlamaCppsOwnRouteGivesOnAQwen3moeTarget) {
  ScratchDir dir;
  Eagle3Pair p = write_eagle3_pair(dir.file(""), "tiny-qwen3moe", 4);
  ASSERT_TRUE(p.model);
  Eagle3Tap tap;
  llama_context_params cp = scheduler_like_params(2);
  tap.install(&cp);
  ContextPtr ctx(llama_init_from_model(p.model.get(), cp));
  ASSERT_TRUE(ctx);
  // Layer 0's input (the embedding), a middle one and the last one: every kind of name.
  const std::vector<int32_t> layers = {0, 2, 3, 2};
  ASSERT_TRUE(tap.watch(layers, 4, llama_model_n_embd(p.model.get())).is_ok());
  for (int32_t il : {0, 2, 3}) llama_set_embeddings_layer_inp(ctx.get(), static_cast<uint32_t>(il), true);
  // A prompt, one token, a verify step, and two sequences with unequal runs, which llama.cpp
  // computes in two micro-batches (its per-stream KV splits them "equally").
  const std::vector<std::vector<TokenRun>> steps = {{{0, 0, 20}}, {{0, 20, 1}}, {{0, 21, 5}}, {{0, 26, 5}, {1, 0, 3}}};
  for (const auto& runs : steps) {
    ASSERT_TRUE(decode(ctx.get(), runs));
    expect_same_rows(ctx.get(), tap, layers, total(runs));
  }
  EXPECT_EQ(tap.stats().decodes, steps.size());
  EXPECT_EQ(tap.stats().multi_ubatch, 1u) << "the last step came in two micro-batches";
  EXPECT_EQ(tap.stats().observed, 3u * (steps.size() + 1)) << "three distinct tensors per micro-batch";
}

TEST(Eagle3Tap, CapturesEveryTappedLayerOfAMinimaxM3Target) {
  ScratchDir dir;
  Eagle3Pair p = write_eagle3_pair(dir.file(""), "tiny", 4);
  ASSERT_TRUE(p.model);
  EXPECT_FALSE(graph_records_layer_inputs("minimax-m3"));
  // The draft's file asks for a tap on this target, and for none on qwen3moe.
  EXPECT_NE(Eagle3Tap::for_draft(p.draft, p.model.get()), nullptr);
  EXPECT_EQ(Eagle3Tap::for_draft(p.target, p.model.get()), nullptr) << "not an EAGLE3 draft";
  Eagle3Tap tap;
  llama_context_params cp = scheduler_like_params(1);
  tap.install(&cp);
  ContextPtr ctx(llama_init_from_model(p.model.get(), cp));
  ASSERT_TRUE(ctx);
  const int n_embd = llama_model_n_embd(p.model.get());
  ASSERT_TRUE(tap.watch({0, 2, 3}, 4, n_embd).is_ok());
  ASSERT_TRUE(decode(ctx.get(), {{0, 0, 12}}));
  std::vector<float> f;
  ASSERT_TRUE(tap.take(12, &f).is_ok());
  ASSERT_EQ(f.size(), 12u * 3u * static_cast<size_t>(n_embd));
  EXPECT_TRUE(std::all_of(f.begin(), f.end(), [](float v) { return std::isfinite(v); }));
  // Each layer's input is its own: the three taps of a row differ.
  EXPECT_NE(std::memcmp(f.data(), f.data() + n_embd, n_embd * sizeof(float)), 0);
  EXPECT_NE(std::memcmp(f.data() + n_embd, f.data() + 2 * n_embd, n_embd * sizeof(float)), 0);
  // The final hidden state is not a layer input the graph keeps whole.
  EXPECT_FALSE(tap.watch({0, 2, 4}, 4, n_embd).is_ok());
  // Nothing taken twice: a second take has no rows.
  EXPECT_FALSE(tap.take(1, &f).is_ok());
}

// The median time of `n` decode steps of `tokens` tokens each, continuing sequence 0 at `*pos`.
double median_step_ms(llama_context* ctx, Eagle3Tap* tap, int n, int tokens, llama_pos* pos) {
  std::vector<double> ms;
  std::vector<float> f;
  for (int i = 0; i < n; ++i) {
    const auto t0 = std::chrono::steady_clock::now();
    EXPECT_TRUE(decode(ctx, {{0, *pos, tokens}}));
    ms.push_back(std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count());
    if (tap != nullptr) {
      EXPECT_TRUE(tap->take(tokens, &f).is_ok());
    }
    *pos += tokens;
  }
  std::sort(ms.begin(), ms.end());
  return ms[ms.size() / 2];
}

// What the tap costs a decode step of the tiny minimax-m3 on the CPU: the same steps without a
// callback, with the callback watching nothing (the scheduler's per-split wait only) and with
// three taps. Recorded as test properties; no bound is asserted (timing on a shared machine).
TEST(Eagle3Tap, CostPerDecodeStepOnTheCpu) {
  ScratchDir dir;
  Eagle3Pair p = write_eagle3_pair(dir.file(""), "tiny", 4);
  ASSERT_TRUE(p.model);
  const int n_embd = llama_model_n_embd(p.model.get());
  for (int tokens : {1, 5}) {
    double ms[3] = {0, 0, 0};
    for (int mode = 0; mode < 3; ++mode) {  // no callback, callback watching nothing, three taps
      Eagle3Tap tap;
      llama_context_params cp = scheduler_like_params(1);
      if (mode > 0) tap.install(&cp);
      ContextPtr ctx(llama_init_from_model(p.model.get(), cp));
      ASSERT_TRUE(ctx);
      if (mode == 2) {
        ASSERT_TRUE(tap.watch({0, 2, 3}, 4, n_embd).is_ok());
      }
      llama_pos pos = 0;
      median_step_ms(ctx.get(), mode == 2 ? &tap : nullptr, 5, 32, &pos);  // a prompt first, and warm
      ms[mode] = median_step_ms(ctx.get(), mode == 2 ? &tap : nullptr, 40, tokens, &pos);
      if (mode == 2) {
        EXPECT_EQ(tap.stats().bytes, (5u * 32u + 40u * tokens) * 3u * n_embd * sizeof(float));
      }
    }
    const std::string key = "tokens" + std::to_string(tokens);
    ::testing::Test::RecordProperty(key + "_ms_plain", std::to_string(ms[0]));
    ::testing::Test::RecordProperty(key + "_ms_callback", std::to_string(ms[1]));
    ::testing::Test::RecordProperty(key + "_ms_tapped", std::to_string(ms[2]));
    std::printf("tiny minimax-m3, %d-token steps, CPU 1 thread: %.3f ms plain, %.3f ms callback only, %.3f ms tapped\n",
                tokens, ms[0], ms[1], ms[2]);
  }
}

}  // namespace
}  // namespace tandem::engine
