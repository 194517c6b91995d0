// The scheduler tests' fixture (scheduler_test.cpp, speculation_test.cpp): the tiny synthetic
// model loaded once per process, CPU, with file-layout weights, and helpers that run requests.
#pragma once

#include <gtest/gtest.h>

#include <filesystem>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <thread>
#include <vector>

#include <unistd.h>

#include "engine/model_loader.h"
#include "engine/scheduler.h"
#include "event_collector.h"
#include "ggml.h"
#include "synth/presets.h"
#include "synth/writer.h"

namespace tandem::engine {

class SchedulerTest : public ::testing::Test {
 protected:
  using json = nlohmann::json;
  using EventCollector = tandem::engine::testing::EventCollector;

  static void SetUpTestSuite() {
    // One folder per process: ctest runs each test in its own process, two at a time.
    dir_ = new std::string(std::string(TANDEM_TEST_TMP) + "/SchedulerTest." + std::to_string(::getpid()));
    std::filesystem::create_directories(*dir_);
    model_path_ = new std::string(*dir_ + "/tiny.gguf");
    // IQ4_XS rather than tiny's Q4_K: with i8mm (GB10's cores) ggml's arm64 CPU backend computes
    // Q4_0, Q4_1, Q8_0, Q4_K and Q6_K two rows at a time when the micro-batch has an even row
    // count, and so rounds a row differently alone than among others; IQ4_XS is one row at a time
    // on both architectures (docs/engine-protocol.md, exactness).
    synth::ModelSpec spec = synth::preset("tiny").value();
    spec.type = GGML_TYPE_IQ4_XS;
    ASSERT_TRUE(synth::write_model(spec, *model_path_, {}).is_ok());
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

  static std::unique_ptr<Scheduler> make(int parallel, int context = 256, bool warm_up = true,
                                         uint64_t prompt_cache_bytes = 0, StateShares* shares = nullptr,
                                         SpeculationOptions speculation = {}) {
    SchedulerOptions o;
    o.speculation = std::move(speculation);
    o.prompt_cache_bytes = prompt_cache_bytes;
    o.parallel = parallel;
    o.context = context;
    o.warm_up = warm_up;
    o.threads = 1;            // the test machine's two cores are shared: spinning thread pools would crawl
    o.max_prompt_chunk = 32;  // below flash attention's 64-row tile: see docs/engine-protocol.md
    auto s = Scheduler::create(model_, o, shares);
    EXPECT_TRUE(s.is_ok()) << s.status().to_string();
    return s.is_ok() ? std::move(s.value()) : nullptr;
  }

  // Runs one request to its end and returns the final event; text into *text when given.
  static EngineEvent run(Scheduler& s, const std::string& id, RequestKind kind, const json& body,
                         std::string* text = nullptr) {
    auto c = std::make_shared<EventCollector>();
    Status st = s.submit(id, kind, body.dump(), [c](const EngineEvent& e) { (*c)(e); });
    EXPECT_TRUE(st.is_ok()) << st.to_string();
    if (!st.is_ok()) return {};
    EXPECT_TRUE(c->wait());
    if (text) *text = c->text();
    return c->final_event();
  }

  // Submits every body at once and returns their final events, in order.
  static std::vector<EngineEvent> run_together(Scheduler& s, const std::vector<json>& bodies) {
    std::vector<std::shared_ptr<EventCollector>> collectors;
    for (size_t i = 0; i < bodies.size(); ++i) {
      auto c = std::make_shared<EventCollector>();
      const Status st = s.submit("c" + std::to_string(i), RequestKind::completion, bodies[i].dump(),
                                 [c](const EngineEvent& e) { (*c)(e); });
      EXPECT_TRUE(st.is_ok()) << st.to_string();
      collectors.push_back(c);
    }
    std::vector<EngineEvent> out;
    for (auto& c : collectors) {
      EXPECT_TRUE(c->wait());
      out.push_back(c->final_event());
    }
    return out;
  }

  static json greedy(const std::string& prompt, int n) {
    return {{"prompt", prompt}, {"max_tokens", n}, {"temperature", 0}, {"ignore_eos", true}, {"return_tokens", true}};
  }

  static inline std::string* dir_ = nullptr;
  static inline std::string* model_path_ = nullptr;
  static inline llama_model* model_ = nullptr;
};

// The prompt cache's counts once the decode thread has saved what it saves while idle (it does
// so right after a request ends, so a test reads them after waiting for `saves`).
inline PromptCacheStats settled(Scheduler& s, uint64_t saves) {
  for (int i = 0; i < 200 && s.stats().prompt_cache.saves < saves; ++i)
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  return s.stats().prompt_cache;
}

}  // namespace tandem::engine
