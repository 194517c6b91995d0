// The scheduler on the tiny synthetic model, CPU: exactness under continuous batching, limits,
// stop strings, cancellation, sampling and errors.
#include "engine/scheduler.h"

#include <gtest/gtest.h>

#include <memory>
#include <nlohmann/json.hpp>
#include <thread>

#include "engine/model_loader.h"
#include "event_collector.h"
#include "synth/presets.h"
#include "synth/writer.h"
#include "test_util.h"

namespace tandem::engine {
namespace {

using json = nlohmann::json;
using testing::EventCollector;

class SchedulerTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    dir_ = new std::string(std::string(TANDEM_TEST_TMP) + "/SchedulerTest");
    std::filesystem::create_directories(*dir_);
    model_path_ = new std::string(*dir_ + "/tiny.gguf");
    ASSERT_TRUE(synth::write_model(synth::preset("tiny").value(), *model_path_, {}).is_ok());
    LoadOptions lo;
    lo.model = *model_path_;
    // Repacked CPU kernels switch between gemm and gemv by row count, so only file-layout weights
    // give results independent of the batch (docs/engine-protocol.md, exactness).
    lo.placement.cpu_weight_repack = false;
    auto m = load_model(lo);
    ASSERT_TRUE(m.is_ok()) << m.status().to_string();
    model_ = m.value().release();
  }
  static void TearDownTestSuite() {
    ModelDeleter()(model_);
    std::filesystem::remove_all(*dir_);
    delete dir_;
    delete model_path_;
  }

  static std::unique_ptr<Scheduler> make(int parallel, int context = 256) {
    SchedulerOptions o;
    o.parallel = parallel;
    o.context = context;
    o.threads = 2;
    o.max_prompt_chunk = 32;  // below flash attention's 64-row tile: see docs/engine-protocol.md
    auto s = Scheduler::create(model_, o);
    EXPECT_TRUE(s.is_ok()) << s.status().to_string();
    return s.is_ok() ? std::move(s.value()) : nullptr;
  }

  // Runs one request to its end and returns the final event; text into *text when given.
  static EngineEvent run(Scheduler& s, const std::string& id, RequestKind kind, const json& body, std::string* text = nullptr) {
    auto c = std::make_shared<EventCollector>();
    Status st = s.submit(id, kind, body.dump(), [c](const EngineEvent& e) { (*c)(e); });
    EXPECT_TRUE(st.is_ok()) << st.to_string();
    if (!st.is_ok()) return {};
    EXPECT_TRUE(c->wait());
    if (text) *text = c->text();
    return c->final_event();
  }

  static json greedy(const std::string& prompt, int n) {
    return {{"prompt", prompt}, {"max_tokens", n}, {"temperature", 0}, {"ignore_eos", true}, {"return_tokens", true}};
  }

  static std::string* dir_;
  static std::string* model_path_;
  static llama_model* model_;
};
std::string* SchedulerTest::dir_ = nullptr;
std::string* SchedulerTest::model_path_ = nullptr;
llama_model* SchedulerTest::model_ = nullptr;

TEST_F(SchedulerTest, GreedyDecodingIsDeterministic) {
  auto s = make(1);
  std::string a_text, b_text;
  EngineEvent a = run(*s, "a", RequestKind::completion, greedy("The cable between the two boxes", 24), &a_text);
  EngineEvent b = run(*s, "b", RequestKind::completion, greedy("The cable between the two boxes", 24), &b_text);
  ASSERT_EQ(a.type, EngineEvent::Type::done) << a.message;
  EXPECT_EQ(a.tokens.size(), 24u);
  EXPECT_EQ(a.tokens, b.tokens);
  EXPECT_EQ(a_text, b_text);
  EXPECT_EQ(a.finish_reason, "length");
  EXPECT_EQ(a.usage.completion_tokens, 24);
  EXPECT_GT(a.usage.prompt_tokens, 3);
  // The second run reuses the first one's prompt from the slot's cache.
  EXPECT_EQ(b.usage.cached_tokens, b.usage.prompt_tokens - 1);
}

TEST_F(SchedulerTest, EightConcurrentRequestsGetTheTokensTheyGetAlone) {
  auto s = make(8);
  std::vector<json> bodies;
  for (int i = 0; i < 8; ++i) {
    std::string prompt = "Request number " + std::to_string(i) + ":";
    for (int w = 0; w < i * 7; ++w) prompt += " word" + std::to_string(w);
    bodies.push_back(greedy(prompt, 8 + 5 * i));
  }
  std::vector<std::vector<int32_t>> alone;
  for (int i = 0; i < 8; ++i) {
    EngineEvent e = run(*s, "alone" + std::to_string(i), RequestKind::completion, bodies[i]);
    ASSERT_EQ(e.type, EngineEvent::Type::done) << e.message;
    alone.push_back(e.tokens);
  }
  // A fresh scheduler, so no prompt is served from a cache filled by the runs above.
  s = make(8);
  std::vector<std::shared_ptr<EventCollector>> collectors;
  for (int i = 0; i < 8; ++i) {
    auto c = std::make_shared<EventCollector>();
    ASSERT_TRUE(s->submit("c" + std::to_string(i), RequestKind::completion, bodies[i].dump(), [c](const EngineEvent& e) { (*c)(e); }).is_ok());
    collectors.push_back(c);
  }
  for (int i = 0; i < 8; ++i) {
    ASSERT_TRUE(collectors[i]->wait());
    EngineEvent e = collectors[i]->final_event();
    ASSERT_EQ(e.type, EngineEvent::Type::done) << e.message;
    EXPECT_EQ(e.tokens, alone[i]) << "request " << i;
  }
}

}  // namespace
}  // namespace tandem::engine
