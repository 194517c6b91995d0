// The draft model of speculative decoding on the head (plan/draft.h): what it costs there, and that
// the model's layers are placed with what is left.
#include "plan/draft.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <nlohmann/json.hpp>

#include "common/units.h"
#include "ggml.h"
#include "plan/eagle3_model.h"
#include "plan/plan_config.h"
#include "plan/plan_report.h"
#include "plan/solver.h"
#include "plan/toy_model.h"

namespace tandem::plan {
namespace {

constexpr uint64_t kMiB = uint64_t{1} << 20;

using testing::Eagle3Shape;
using testing::toy_model;
using testing::write_eagle3_header;

NodeSpec node(const std::string& name, uint64_t free_mib, double bandwidth) {
  NodeSpec n;
  n.name = name;
  DeviceSpec d;
  d.name = "GPU";
  d.free_bytes = free_mib * kMiB;
  d.bandwidth = bandwidth;
  n.devices.push_back(d);
  return n;
}

// A fast head and a slow worker with room to spare: the solver puts as many layers as fit on the
// head, so whatever the head holds besides shows as layers moved to the worker.
std::vector<NodeSpec> fast_head() { return {node("a", 80, 400e9), node("b", 1024, 100e9)}; }

PlanOptions options() {
  PlanOptions o;
  o.memory.context = 256;
  o.memory.margin_fraction = 0;
  o.memory.margin_bytes = 0;
  return o;
}

PlanOptions with_draft(const ModelInfo& draft) {
  PlanOptions o = options();
  o.speculative.mode = Speculative::draft;
  o.speculative.draft = std::make_shared<const ModelInfo>(draft);
  o.memory.outputs_per_sequence = 1 + o.speculative.draft_max;
  return o;
}

// The model's share of the head: what it holds there but the draft.
uint64_t model_on_head(const Plan& p) { return p.devices[0].weights + p.devices[0].kv + p.devices[0].compute; }

std::string temp_file(const std::string& name) {
  std::filesystem::create_directories(TANDEM_TEST_TMP);
  return std::string(TANDEM_TEST_TMP) + "/" + name + "-" + std::to_string(::getpid()) + ".gguf";
}

TEST(Draft, ItsWeightsAndKvCacheAreCountedToTheByte) {
  const ModelInfo target = toy_model(10, 10);
  PlanOptions o = with_draft(toy_model(2, 10));
  o.memory.context = 512;
  o.memory.parallel = 2;
  o.memory.kv_type = GGML_TYPE_Q8_0;
  auto d = draft_cost(target, o.speculative, o.memory, /*gpu_head=*/true);
  ASSERT_TRUE(d.is_ok()) << d.status().to_string();
  // Two 10 MiB layers, a 4 MiB embedding and a 4 MiB output head, all on the head's device.
  EXPECT_EQ(d->weights, 28 * kMiB);
  // Its own cache: 2 layers x (512 x 2 cells) x (a K and a V row of one 64-wide head in q8_0).
  EXPECT_EQ(d->kv, 2 * 1024 * 2 * ggml_row_size(GGML_TYPE_Q8_0, 64));
  // Its output head's logits for a whole batch (min(512, cells) tokens) at least.
  EXPECT_GE(d->compute, uint64_t{512} * 1000 * 4);
  EXPECT_EQ(d->hidden, 0u) << "not an EAGLE3 draft";
  EXPECT_EQ(d->total(), d->weights + d->kv + d->compute);

  o.speculative.mode = Speculative::ngram;
  EXPECT_EQ(draft_cost(target, o.speculative, o.memory, true)->total(), 0u) << "ngram drafts without a model";
}

TEST(Draft, ADraftThatFitsTakesItsSizeFromTheModelsShareOfTheHead) {
  const ModelInfo target = toy_model(20, 10);
  auto alone = make_plan(target, fast_head(), options());
  auto drafted = make_plan(target, fast_head(), with_draft(toy_model(2, 10)));
  ASSERT_TRUE(alone.is_ok() && drafted.is_ok());
  ASSERT_TRUE(alone->fits) << alone->failure;
  ASSERT_TRUE(drafted->fits) << drafted->failure;
  const uint64_t draft = drafted->draft.total();
  EXPECT_GT(draft, 28 * kMiB);
  EXPECT_EQ(drafted->devices[0].draft, draft) << "held on the head's first device";
  EXPECT_EQ(drafted->devices[1].draft, 0u);
  EXPECT_GE(drafted->devices[0].headroom(), 0);
  // The head gives up as many of its layers as the draft needs room for, to the byte within a
  // layer (each 10 MiB plus its KV), and the worker takes them.
  const int moved = alone->devices[0].n_layers - drafted->devices[0].n_layers;
  EXPECT_GE(moved, 3);
  EXPECT_EQ(drafted->devices[1].n_layers - alone->devices[1].n_layers, moved);
  const int64_t given_up = static_cast<int64_t>(model_on_head(alone.value()) - model_on_head(drafted.value()));
  const int64_t layer = static_cast<int64_t>(10 * kMiB + 256 * 256);
  EXPECT_LT(std::abs(given_up - static_cast<int64_t>(draft)), layer) << "gave up " << given_up << " for " << draft;
}

TEST(Draft, ADraftThatDoesNotFitIsRefusedWithTheNumbers) {
  const ModelInfo target = toy_model(10, 10);
  const std::vector<NodeSpec> tight = {node("a", 70, 100e9), node("b", 70, 100e9)};
  auto alone = make_plan(target, tight, options());
  ASSERT_TRUE(alone.is_ok() && alone->fits) << alone->failure;
  const PlanOptions o = with_draft(toy_model(2, 10));
  auto p = make_plan(target, tight, o);
  ASSERT_TRUE(p.is_ok()) << p.status().to_string();
  EXPECT_FALSE(p->fits);
  auto room = draft_room(target, tight, o);
  ASSERT_TRUE(room.is_ok());
  // The room is at least what the model alone leaves on the head, and less than the draft needs.
  EXPECT_GE(room.value() + kMiB, static_cast<uint64_t>(alone->devices[0].headroom()));
  EXPECT_LT(room.value(), p->draft.total());
  const std::string& f = p->failure;
  EXPECT_NE(f.find("the draft model"), std::string::npos) << f;
  EXPECT_NE(f.find("needs " + format_bytes(p->draft.total()) + " on the head 'a'"), std::string::npos) << f;
  EXPECT_NE(f.find("weights " + format_bytes(p->draft.weights)), std::string::npos) << f;
  EXPECT_NE(f.find("no split of the model's layers leaves more than " + format_bytes(room.value())), std::string::npos)
      << f;
  EXPECT_NE(f.find("short by " + format_bytes(p->draft.total() - room.value())), std::string::npos) << f;
  // What would fit: no draft model, or a cluster with room for it.
  const auto& s = p->suggestions;
  auto has = [&](const std::string& part) {
    return std::any_of(s.begin(), s.end(), [&](const std::string& x) { return x.find(part) != std::string::npos; });
  };
  EXPECT_TRUE(has("--speculative ngram")) << ::testing::PrintToString(s);
  EXPECT_TRUE(has("one more node")) << ::testing::PrintToString(s);
}

TEST(Draft, AHandSplitThatLeavesTheHeadNoRoomSaysTheSplitIsWhy) {
  const ModelInfo target = toy_model(10, 10);
  PlanOptions o = with_draft(toy_model(2, 10));
  o.layers = {{5, -1}, {5, -1}};  // half each: the fast head could give layers to b, but the split says not
  auto p = make_plan(target, {node("a", 80, 100e9), node("b", 1024, 100e9)}, o);
  ASSERT_TRUE(p.is_ok()) << p.status().to_string();
  ASSERT_FALSE(p->fits);
  EXPECT_NE(p->failure.find("the split given by hand leaves"), std::string::npos) << p->failure;
  EXPECT_NE(std::find(p->suggestions.begin(), p->suggestions.end(),
                      "the planner's own split (leave [model] layers / --layers out) fits"),
            p->suggestions.end())
      << ::testing::PrintToString(p->suggestions);
}

TEST(Draft, UnderTheFfnTensorSplitTheHeadHoldsIt) {
  ModelInfo target = toy_model(4, 10, "ffn_up", WeightRole::dense_ffn);
  PlanOptions o = with_draft(toy_model(2, 10));
  o.parallelism = Parallelism::ffn_tensor;
  auto p = solve(target, {node("a", 1024, 100e9), node("b", 1024, 100e9)}, o);
  ASSERT_TRUE(p.is_ok()) << p.status().to_string();
  EXPECT_EQ(p->devices[0].draft, p->draft.total());
  EXPECT_GT(p->devices[0].draft, 28 * kMiB);
  EXPECT_EQ(p->devices[1].draft, 0u);
}

TEST(Draft, AnEagle3DraftAlsoHoldsTheHiddenStatesItReads) {
  Eagle3Shape shape;
  shape.n_embd = 256;
  shape.target_hidden = 64;  // toy_model's
  shape.n_vocab = 1000;
  const std::string path = temp_file("eagle3");
  ASSERT_TRUE(write_eagle3_header(path, shape));
  auto draft = read_draft_model(path);
  ASSERT_TRUE(draft.is_ok()) << draft.status().to_string();
  EXPECT_TRUE(is_eagle3(*draft.value()));
  EXPECT_EQ(draft.value()->target_hidden_size, 64u);
  EXPECT_EQ(draft.value()->n_target_layers, 3u);

  const ModelInfo target = toy_model(10, 10);
  PlanOptions o = options();
  o.speculative.mode = Speculative::draft;
  o.speculative.draft = draft.value();
  auto d = draft_cost(target, o.speculative, o.memory, true);
  ASSERT_TRUE(d.is_ok()) << d.status().to_string();
  EXPECT_EQ(d->weights, draft.value()->tensor_bytes);
  // One layer of 2 KV heads of 64 in f16 over 256 cells.
  EXPECT_EQ(d->kv, uint64_t{256} * 2 * 2 * 64 * 2);
  // A batch (256 tokens: the whole context here) of the model's hidden states at 3 layers, in its
  // output buffer and in the draft's input, and the draft's own hidden-state row a token, twice.
  EXPECT_EQ(d->hidden, 2 * uint64_t{256} * 3 * 64 * 4 + 2 * uint64_t{256} * 256 * 4);

  // Without its own embedding and LM head it uses the model's: lighter, the same logits.
  shape.own_embedding = shape.own_output = false;
  ASSERT_TRUE(write_eagle3_header(path, shape));
  auto shared = read_draft_model(path);
  ASSERT_TRUE(shared.is_ok()) << shared.status().to_string();
  o.speculative.draft = shared.value();
  auto s = draft_cost(target, o.speculative, o.memory, true);
  ASSERT_TRUE(s.is_ok());
  EXPECT_EQ(d->weights - s->weights, 2 * ggml_row_size(GGML_TYPE_Q8_0, 256) * 1000);
  EXPECT_EQ(s->compute, d->compute);

  // Made for a model of another hidden size: refused, with both sizes.
  shape.target_hidden = 128;
  ASSERT_TRUE(write_eagle3_header(path, shape));
  o.speculative.draft = read_draft_model(path).value();
  auto other = draft_cost(target, o.speculative, o.memory, true);
  ASSERT_FALSE(other.is_ok());
  EXPECT_NE(other.status().message().find("hidden size 128; this model's is 64"), std::string::npos)
      << other.status().message();
  std::filesystem::remove(path);
}

TEST(Draft, RequantisingShrinksTheMatricesOnly) {
  Eagle3Shape shape;
  shape.type = GGML_TYPE_F16;
  const std::string path = temp_file("eagle3-f16");
  ASSERT_TRUE(write_eagle3_header(path, shape));
  auto draft = read_draft_model(path);
  ASSERT_TRUE(draft.is_ok()) << draft.status().to_string();
  std::filesystem::remove(path);
  const ModelInfo q4 = requantized(*draft.value(), GGML_TYPE_Q4_K);
  uint64_t expected = 0;
  for (const TensorInfo& t : draft.value()->tensors) {
    const bool matrix = t.ne[1] > 1;
    expected += matrix ? ggml_row_size(GGML_TYPE_Q4_K, t.ne[0]) * t.ne[1] : t.bytes;
  }
  EXPECT_EQ(q4.tensor_bytes, expected);
  EXPECT_LT(q4.tensor_bytes, draft.value()->tensor_bytes / 3);
  // Never up: Q8_0 of a Q4_K draft is the Q4_K draft.
  EXPECT_EQ(requantized(q4, GGML_TYPE_Q8_0).tensor_bytes, q4.tensor_bytes);
}

TEST(Draft, NgramKeepsOnlyMoreRowsOfLogitsOnTheHead) {
  const ModelInfo target = toy_model(10, 10);
  config::Config c;
  c.model.context = 256;
  c.plan.margin = 0;
  c.plan.margin_bytes = 0;
  auto off = plan_options_from_config(c);
  c.model.speculative = "ngram";
  auto ngram = plan_options_from_config(c);
  ASSERT_TRUE(off.is_ok() && ngram.is_ok());
  EXPECT_EQ(off->speculative.mode, Speculative::off);
  EXPECT_EQ(off->memory.outputs_per_sequence, 1u);
  EXPECT_EQ(ngram->memory.outputs_per_sequence, 9u) << "8 drafted tokens and the one after them";
  EXPECT_EQ(ngram->speculative.draft, nullptr);
  auto a = solve(target, fast_head(), off.value());
  auto b = solve(target, fast_head(), ngram.value());
  ASSERT_TRUE(a.is_ok() && b.is_ok());
  EXPECT_EQ(b->draft.total(), 0u);
  EXPECT_EQ(b->devices[0].draft, 0u);
  // The model's logits buffer: 8 more rows of its 1000-token vocabulary, one sequence.
  EXPECT_EQ(b->devices[0].compute - a->devices[0].compute, uint64_t{8} * 1000 * 4);
  EXPECT_EQ(a->devices[0].n_layers, b->devices[0].n_layers);
  const std::string text = format_plan(b.value(), target, ngram.value());
  EXPECT_NE(text.find("draft    none: ngram"), std::string::npos) << text;
  EXPECT_EQ(format_plan(a.value(), target, off.value()).find("draft"), std::string::npos) << "off says nothing";
}

TEST(Draft, TheConfigNamesTheDraftsFileWhenItCannotBeRead) {
  config::Config c;
  c.model.speculative = "draft";
  auto none = plan_options_from_config(c);
  ASSERT_FALSE(none.is_ok());
  EXPECT_NE(none.status().message().find("needs draft_model"), std::string::npos) << none.status().message();

  c.model.draft_model = temp_file("no-such-draft");
  auto missing = plan_options_from_config(c);
  ASSERT_FALSE(missing.is_ok());
  EXPECT_EQ(missing.status().code(), StatusCode::not_found);
  EXPECT_NE(missing.status().message().find("the draft model"), std::string::npos) << missing.status().message();
  EXPECT_NE(missing.status().message().find(c.model.draft_model), std::string::npos) << missing.status().message();

  const std::string text = temp_file("not-a-gguf");
  {
    std::FILE* f = std::fopen(text.c_str(), "w");
    ASSERT_NE(f, nullptr);
    std::fputs("this is not a model\n", f);
    std::fclose(f);
  }
  c.model.draft_model = text;
  auto bad = plan_options_from_config(c);
  std::filesystem::remove(text);
  ASSERT_FALSE(bad.is_ok());
  EXPECT_NE(bad.status().message().find(text), std::string::npos) << bad.status().message();
}

TEST(Draft, TheReportShowsEachFigure) {
  const ModelInfo target = toy_model(20, 10);
  const PlanOptions o = with_draft(toy_model(2, 10));
  auto p = make_plan(target, fast_head(), o);
  ASSERT_TRUE(p.is_ok() && p->fits);
  const std::string text = format_plan(p.value(), target, o);
  auto gib = [](uint64_t b) {
    char buf[32];
    std::snprintf(buf, sizeof buf, "%.2f", static_cast<double>(b) / (1 << 30));
    return std::string(buf);
  };
  const DraftCost& d = p->draft;
  const std::string line = "draft    toy (toy, 2 layers, ?), up to 8 tokens a step, on a/GPU: " + gib(d.total()) +
                           " GiB = weights " + gib(d.weights) + " + KV " + gib(d.kv) + " + compute " + gib(d.compute);
  EXPECT_NE(text.find(line + "\n"), std::string::npos) << text;
  EXPECT_NE(text.find("headroom = free - margin - weights - KV - compute - draft"), std::string::npos) << text;
  auto j = nlohmann::json::parse(plan_to_json(p.value(), target, o));
  EXPECT_EQ(j["speculative"]["mode"], "draft");
  EXPECT_EQ(j["speculative"]["draft"]["total"].get<uint64_t>(), d.total());
  EXPECT_EQ(j["speculative"]["draft"]["weights"].get<uint64_t>(), d.weights);
  EXPECT_EQ(j["devices"][0]["draft"].get<uint64_t>(), d.total());
  EXPECT_EQ(j["devices"][1]["draft"].get<uint64_t>(), 0u);
}

}  // namespace
}  // namespace tandem::plan
