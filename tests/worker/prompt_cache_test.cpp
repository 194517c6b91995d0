// The prompt cache over a split (engine/worker_shares.h, datapath/kv_shares.h): with a tandem worker behind a forwarder,
// each saved state's worker layers stay in the worker's memory, so a save or a restore moves a few
// markers over the link instead of that KV; a returning conversation restores its prefix and gets
// the tokens its first, freshly evaluated turn got. Through a stock RPC path (no shares) the same
// states cross the link whole: the control that shows what the shares spare.
#include <gtest/gtest.h>

#include <chrono>
#include <memory>
#include <nlohmann/json.hpp>
#include <thread>

#include "engine/event_collector.h"
#include "engine/model_loader.h"
#include "engine/scheduler.h"
#include "engine/worker_shares.h"
#include "synth/presets.h"
#include "synth/writer.h"
#include "worker_env.h"

namespace tandem::engine {
namespace {

using namespace tandem::testing;
using json = nlohmann::json;

EngineEvent run(Scheduler& s, const std::string& id, const std::string& prompt) {
  const json body = {
      {"prompt", prompt}, {"max_tokens", 8}, {"temperature", 0}, {"ignore_eos", true}, {"return_tokens", true}};
  auto c = std::make_shared<engine::testing::EventCollector>();
  const Status st = s.submit(id, RequestKind::completion, body.dump(), [c](const EngineEvent& e) { (*c)(e); });
  EXPECT_TRUE(st.is_ok()) << st.to_string();
  if (!st.is_ok() || !c->wait()) return {};
  return c->final_event();
}

// The counts once the decode thread has saved the slot that went idle (right after a request).
PromptCacheStats settled(Scheduler& s, uint64_t saves) {
  for (int i = 0; i < 500 && s.stats().prompt_cache.saves < saves; ++i)
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  return s.stats().prompt_cache;
}

uint64_t link_bytes(const link::Forwarder& f) {
  const auto st = f.stats();
  return st.bytes_to_worker + st.bytes_from_worker;
}

class PromptCacheSplit : public ::testing::Test {
 protected:
  void SetUp() override {
    model_ = dir_.file("tiny.gguf");
    ASSERT_TRUE(synth::write_model(synth::preset("tiny").value(), model_, {}).is_ok());
    for (int i = 0; i < 40; ++i) a_ += " the quick brown fox jumps", b_ += " a lazy dog sleeps all day";
    a_ = "Alice asks:" + a_;
    b_ = "Bob says:" + b_;
  }

  // Loads the model with its first layer on this process's CPU and the other three on the worker
  // behind `f` (the prompt cache's shares there only with `shares`), and runs conversation a, then b, then a again on one slot, measuring the link
  // around b's turn (with the save of its state, once the slot idles) and a's return (which
  // restores a's state).
  void take_turns(const link::Forwarder& f, bool shares) {
    LoadOptions lo;
    lo.model = model_;
    lo.placement.rpc_servers = {"127.0.0.1:" + std::to_string(f.port())};
    lo.placement.tandem_workers = {lo.placement.rpc_servers[0]};  // the same data path either way
    lo.placement.cpu_layers = 1;
    lo.placement.device_layers = {3};
    lo.placement.cpu_weight_repack = false;  // the worker's CPU backend never repacks
    auto model = load_model(lo);
    ASSERT_TRUE(model.is_ok()) << model.status().to_string();
    std::unique_ptr<WorkerShares> on_workers;
    if (shares) on_workers = std::make_unique<WorkerShares>(lo.placement.tandem_workers);
    SchedulerOptions so;
    so.parallel = 1;
    so.context = 1024;
    so.threads = 1;
    so.max_prompt_chunk = 32;  // batch-independent sums on the CPU (docs/engine-protocol.md)
    so.prompt_cache_bytes = 64 << 20;
    auto s = Scheduler::create(model->get(), so, on_workers.get());
    ASSERT_TRUE(s.is_ok()) << s.status().to_string();
    Scheduler& sched = *s.value();

    first_ = run(sched, "a1", a_);
    ASSERT_EQ(first_.type, EngineEvent::Type::done) << first_.message;
    ASSERT_GT(first_.usage.prompt_tokens, 200);
    after_a_ = settled(sched, 1);
    // b's request and its state's save, which starts as soon as the request ends.
    const uint64_t before_b = link_bytes(f);
    ASSERT_EQ(run(sched, "b1", b_).type, EngineEvent::Type::done);
    after_b_ = settled(sched, 2);
    b_bytes_ = link_bytes(f) - before_b;
    const auto restored_so_far = [&] { return on_workers ? on_workers->stats().restored_bytes : 0; };
    const uint64_t restored_before = restored_so_far();
    const uint64_t before_return = link_bytes(f);
    again_ = run(sched, "a2", a_);
    return_bytes_ = link_bytes(f) - before_return;
    restored_ = restored_so_far() - restored_before;
    final_ = settled(sched, 3);  // a's state saved again once a2 ended
    // The same request once more: the slot holds a already, so nothing is restored; what it moves
    // is the request's own (its last prompt token, 8 decode steps).
    const uint64_t before_same = link_bytes(f);
    ASSERT_EQ(run(sched, "a3", a_).type, EngineEvent::Type::done);
    same_bytes_ = link_bytes(f) - before_same;
    s.value().reset();
  }

  ScratchDir dir_;
  std::string model_, a_, b_;
  EngineEvent first_, again_;
  PromptCacheStats after_a_, after_b_, final_;
  uint64_t b_bytes_ = 0, return_bytes_ = 0, same_bytes_ = 0, restored_ = 0, b_worker_ = 0;
};

TEST_F(PromptCacheSplit, AWorkersShareStaysOnTheWorkerAndARestoreGivesTheTokensOfAFreshPrefill) {
  const link::Secret secret = make_secret(dir_.file("cluster.key"));
  WorkerProcess w(dir_, "box-b", dir_.file("cluster.key"));
  ASSERT_TRUE(w.up()) << w.log();
  {
    auto f = forward_to(w, secret);
    take_turns(*f, /*shares=*/true);
    ASSERT_EQ(again_.type, EngineEvent::Type::done) << again_.message << "\n" << w.log();
    EXPECT_EQ(again_.tokens, first_.tokens) << "a restored state gave other tokens than its fresh prefill";
    EXPECT_EQ(again_.usage.cached_tokens, first_.usage.prompt_tokens - 1);
    EXPECT_EQ(final_.hits, 1u);
    EXPECT_EQ(final_.failed_restores, 0u);
    b_worker_ = after_b_.saved_worker_bytes - after_a_.saved_worker_bytes;
    EXPECT_EQ(after_b_.per_worker.at("127.0.0.1:" + std::to_string(f->port())), after_b_.saved_worker_bytes)
        << "a's and b's shares, both on the worker";
  }
  // b's state: three of four layers' KV on the worker, which kept it.
  EXPECT_GT(b_worker_, 100000u);
  EXPECT_EQ(after_b_.worker_bytes, after_b_.saved_worker_bytes);
  EXPECT_GT(after_b_.bytes, 0u) << "the head keeps its own layer's KV";
  // a's state came back from the worker's memory: what a2 moved beyond a3 (the same request
  // without a restore) is the restore's markers, not a's KV.
  const uint64_t a_worker = restored_;
  EXPECT_GT(a_worker, 100000u);
  EXPECT_LT(return_bytes_, same_bytes_ + a_worker / 20)
      << "the restore moved " << return_bytes_ - same_bytes_ << " bytes for " << a_worker << " bytes of worker KV";
  const uint64_t b_with_shares = b_bytes_, a_with_shares = return_bytes_;

  // The control: the same data path without shares, as through a stock RPC server: the same
  // states cross the link whole, and the tokens are the same.
  const std::vector<int32_t> tokens = first_.tokens;
  auto f = forward_to(w, secret);
  take_turns(*f, /*shares=*/false);
  ASSERT_EQ(again_.type, EngineEvent::Type::done) << again_.message;
  EXPECT_EQ(first_.tokens, tokens);
  EXPECT_EQ(again_.tokens, tokens);
  EXPECT_EQ(after_b_.worker_bytes, 0u);
  EXPECT_GT(b_bytes_, b_with_shares + b_worker_ * 9 / 10) << "b's worker layers were not read over the link";
  EXPECT_GT(return_bytes_, a_with_shares + a_worker * 9 / 10) << "a's worker layers were not written over the link";
}

}  // namespace
}  // namespace tandem::engine
