// The correctness oracle through the link: greedy tokens of a model split between this process and
// workers, reached through forwarders, equal the tokens of the same model in one process. And a
// stock llama-server pointed at a forwarder behaves as if pointed at ggml-rpc-server.
#include <gtest/gtest.h>

#include <signal.h>

#include <atomic>
#include <cctype>
#include <cstdlib>
#include <fstream>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <regex>
#include <thread>

#include "common/build_info.h"
#include "engine/generate.h"
#include "link/forwarder.h"
#include "plan/model_info.h"
#include "synth/presets.h"
#include "synth/writer.h"
#include "worker_env.h"

namespace tandem::engine {
namespace {

using namespace tandem::testing;

GenerateOptions options(const std::string& model) {
  GenerateOptions g;
  g.model = model;
  g.prompt = "Two desktop boxes joined by one cable";
  g.n_predict = 16;
  g.n_ctx = 128;
  g.threads = 2;
  g.ignore_eos = true;
  return g;
}

// ~630 tokens of prompt: two prompt chunks, sparse-attention masks of 1 MiB per layer.
GenerateOptions long_prompt_options(const std::string& model, int n_predict) {
  GenerateOptions g = options(model);
  g.prompt.clear();
  for (int i = 0; i < 45; ++i) g.prompt += "the quick brown fox jumps over the lazy dog and keeps running ";
  g.n_ctx = 1024;
  g.n_predict = n_predict;
  g.placement.cpu_weight_repack = false;
  return g;
}

std::string local(const link::Forwarder& f) { return "127.0.0.1:" + std::to_string(f.port()); }

// `base` with its first layer on the head's CPU and the other 3 on the worker behind `f`.
GenerateOptions through_worker(const GenerateOptions& base, const link::Forwarder& f) {
  GenerateOptions o = base;
  o.placement.rpc_servers = {local(f)};
  o.placement.cpu_layers = 1;
  o.placement.device_layers = {3};
  return o;
}

class Split : public ::testing::Test {
 protected:
  void SetUp() override {
    model_ = dir_.file("tiny.gguf");
    // The old SPM tokenizer: with tiny's BPE one (DeepSeek-Coder's, GPT-2's) the split's greedy
    // tokens leave the one-process ones after 13 (GPT-2: 5) of 16 tokens. Not explained yet
    // (docs/engine-protocol.md lists the kernels whose sums differ); kept visible here, not hidden.
    synth::ModelSpec spec = synth::preset("tiny").value();
    spec.vocab = "ggml-vocab-llama-spm.gguf";
    ASSERT_TRUE(synth::write_model(spec, model_, {}).is_ok());
    GenerateOptions reference = options(model_);
    reference.placement.cpu_weight_repack = false;  // the RPC server's CPU backend never repacks
    auto alone = generate(reference);
    ASSERT_TRUE(alone.is_ok()) << alone.status().to_string();
    reference_ = alone->tokens;
  }
  ScratchDir dir_;
  std::string model_;
  std::vector<int32_t> reference_;
};

TEST_F(Split, OneWorkerThroughAForwarderGivesTheTokensOfOneProcess) {
  const link::Secret secret = make_secret(dir_.file("cluster.key"));
  WorkerProcess w(dir_, "box-b", dir_.file("cluster.key"));
  ASSERT_TRUE(w.up()) << w.log();
  auto f = forward_to(w, secret);
  GenerateOptions split = through_worker(options(model_), *f);
  auto through = generate(split);
  ASSERT_TRUE(through.is_ok()) << through.status().to_string() << "\n" << w.log();
  EXPECT_EQ(through->tokens, reference_);
  EXPECT_GT(f->stats().bytes_to_worker, 1000000u);  // the weights went through the link
}

TEST_F(Split, TwoWorkersThroughForwardersGiveTheTokensOfOneProcess) {
  const link::Secret secret = make_secret(dir_.file("cluster.key"));
  WorkerProcess w1(dir_, "box-b", dir_.file("cluster.key"));
  WorkerProcess w2(dir_, "box-c", dir_.file("cluster.key"));
  ASSERT_TRUE(w1.up() && w2.up()) << w1.log() << w2.log();
  auto f1 = forward_to(w1, secret);
  auto f2 = forward_to(w2, secret);
  GenerateOptions split = options(model_);
  split.placement.rpc_servers = {local(*f1), local(*f2)};
  split.placement.cpu_layers = 1;
  split.placement.device_layers = {2, 1};
  auto through = generate(split);
  ASSERT_TRUE(through.is_ok()) << through.status().to_string();
  EXPECT_EQ(through->tokens, reference_);
}

// A long prompt's sparse-attention inputs repeat in every worker layer: to a tandem worker they
// cross the link once per step (datapath/input_reuse.h) and the tokens stay those of one process.
TEST_F(Split, RepeatedInputsCrossTheLinkOnceAndTheTokensStayTheSame) {
  const GenerateOptions longer = long_prompt_options(model_, 8);
  auto alone = generate(longer);
  ASSERT_TRUE(alone.is_ok()) << alone.status().to_string();

  const link::Secret secret = make_secret(dir_.file("cluster.key"));
  WorkerProcess w(dir_, "box-b", dir_.file("cluster.key"));
  ASSERT_TRUE(w.up()) << w.log();
  uint64_t sent[2] = {0, 0};
  for (bool reuse : {true, false}) {
    auto f = forward_to(w, secret);
    GenerateOptions split = through_worker(longer, *f);
    split.placement.tandem_workers = {local(*f)};
    split.placement.reuse_inputs = reuse;
    split.placement.worker_input_slots = false;  // the path of inputs beyond the slots
    split.placement.input_runs = false;          // the masks' bytes otherwise
    auto through = generate(split);
    ASSERT_TRUE(through.is_ok()) << through.status().to_string() << "\n" << w.log();
    EXPECT_EQ(through->tokens, alone->tokens) << (reuse ? "with" : "without") << " input reuse";
    sent[reuse] = f->stats().bytes_to_worker;
    // The scheduler's runs are seen: two prompt chunks, one per generated token after the first.
    EXPECT_EQ(through->prefill_profile.runs, 2u);
    EXPECT_EQ(through->decode_profile.runs, static_cast<uint64_t>(longer.n_predict - 1));
    EXPECT_GT(through->prefill_profile.to_workers_s, 0.0);
    if (reuse) {
      EXPECT_GE(through->datapath.rpc.reused_writes, 4u);  // mask and bias, 2 more layers, first chunk
      EXPECT_GE(through->datapath.rpc.bytes_not_sent, 2u << 20);
      // The scheduler's copies of one host tensor within a run are recognised without comparing.
      EXPECT_GE(through->datapath.rpc.identified_writes, 4u);
      EXPECT_TRUE(w.wait_log("repeated inputs copied here")) << w.log();
      // The child says what the session's steps cost it: a graph per scheduler run at least. It
      // reports what it ran since its last report whenever a session ends, and an earlier short
      // session may end while this one runs: the reports add up.
      const uint64_t want = 2u + static_cast<uint64_t>(longer.n_predict - 1);
      uint64_t graphs = 0;
      std::string log;
      for (int waited = 0; waited < 20000 && graphs < want; waited += 100) {
        log = w.log();
        graphs = 0;
        const std::regex report("the session's steps: ([0-9]+) graphs computed");
        for (auto it = std::sregex_iterator(log.begin(), log.end(), report); it != std::sregex_iterator(); ++it)
          graphs += std::stoull((*it)[1]);
        if (graphs < want) std::this_thread::sleep_for(std::chrono::milliseconds(100));
      }
      EXPECT_GE(graphs, want) << log;
    } else {
      EXPECT_EQ(through->datapath.rpc.reused_writes, 0u);
    }
  }
  EXPECT_LT(sent[1] + (2u << 20), sent[0]) << "with reuse " << sent[1] << " bytes, without " << sent[0];
}

// Input slots (datapath/rpc_writes.h, redirect_rpc_input): the worker reads a step's
// repeated inputs from one copy the head keeps on it; the tokens stay those of one process, through
// prompt chunks and decode steps whose graphs the worker keeps and runs again.
TEST_F(Split, WorkerInputSlotsGiveTheTokensOfOneProcessWithFewerBytes) {
  const GenerateOptions longer = long_prompt_options(model_, 12);
  auto alone = generate(longer);
  ASSERT_TRUE(alone.is_ok()) << alone.status().to_string();

  const link::Secret secret = make_secret(dir_.file("cluster.key"));
  WorkerProcess w(dir_, "box-b", dir_.file("cluster.key"));
  ASSERT_TRUE(w.up()) << w.log();
  uint64_t sent[2] = {0, 0};
  for (bool slots : {true, false}) {
    auto f = forward_to(w, secret);
    GenerateOptions split = through_worker(longer, *f);
    split.placement.reuse_inputs = false;  // the bytes of every copy otherwise
    split.placement.input_runs = false;
    split.placement.worker_input_slots = slots;
    auto through = generate(split);
    ASSERT_TRUE(through.is_ok()) << through.status().to_string() << "\n" << w.log();
    EXPECT_EQ(through->tokens, alone->tokens) << (slots ? "with" : "without") << " input slots";
    sent[slots] = f->stats().bytes_to_worker;
    if (slots) {
      // Every run's inputs of the worker's 3 layers: 2 prompt chunks and 11 decode steps.
      EXPECT_GE(through->datapath.rpc.slotted_inputs, 13u * 3u);
      EXPECT_GE(through->datapath.rpc.slot_bytes_not_sent, 2u << 20);
    } else {
      EXPECT_EQ(through->datapath.rpc.slotted_inputs, 0u);
    }
  }
  EXPECT_LT(sent[1] + (2u << 20), sent[0]) << "with slots " << sent[1] << " bytes, without " << sent[0];
}

// Inputs beyond the slots take the other paths in the same step: with 1 MiB of slots a prompt
// chunk's hidden state (512 KiB) fits and its masks (1.5 MiB each) go as repeated inputs, while a
// decode step's inputs all fit; the tokens stay those of one process.
TEST_F(Split, InputsBeyondTheWorkerInputSlotsTakeTheOtherPaths) {
  const GenerateOptions longer = long_prompt_options(model_, 8);
  auto alone = generate(longer);
  ASSERT_TRUE(alone.is_ok()) << alone.status().to_string();

  const link::Secret secret = make_secret(dir_.file("cluster.key"));
  WorkerProcess w(dir_, "box-b", dir_.file("cluster.key"));
  ASSERT_TRUE(w.up()) << w.log();
  auto f = forward_to(w, secret);
  GenerateOptions split = through_worker(longer, *f);
  split.placement.tandem_workers = {local(*f)};
  split.placement.input_slot_bytes = 1u << 20;
  auto through = generate(split);
  ASSERT_TRUE(through.is_ok()) << through.status().to_string() << "\n" << w.log();
  EXPECT_EQ(through->tokens, alone->tokens);
  EXPECT_GE(through->datapath.rpc.slotted_inputs, 9u * 3u);  // 2 chunks and 7 decode steps, 3 layers
  EXPECT_GE(through->datapath.rpc.reused_writes, 4u);        // masks beyond the slots, 2 more layers
}

// A prompt chunk's masks are mostly runs of one value: to a tandem worker they go as runs
// (link/protocol.h), expanded by its RPC child; the tokens stay those of one process and the
// link carries less.
TEST_F(Split, MasksGoToATandemWorkerAsRunsAndTheTokensStayTheSame) {
  const GenerateOptions longer = long_prompt_options(model_, 6);
  auto alone = generate(longer);
  ASSERT_TRUE(alone.is_ok()) << alone.status().to_string();

  const link::Secret secret = make_secret(dir_.file("cluster.key"));
  WorkerProcess w(dir_, "box-b", dir_.file("cluster.key"));
  ASSERT_TRUE(w.up()) << w.log();
  uint64_t sent[2] = {0, 0};
  for (bool runs : {true, false}) {
    auto f = forward_to(w, secret);
    GenerateOptions split = through_worker(longer, *f);
    split.placement.tandem_workers = {local(*f)};
    split.placement.input_runs = runs;
    auto through = generate(split);
    ASSERT_TRUE(through.is_ok()) << through.status().to_string() << "\n" << w.log();
    EXPECT_EQ(through->tokens, alone->tokens) << (runs ? "with" : "without") << " runs";
    sent[runs] = f->stats().bytes_to_worker;
    if (runs) {
      EXPECT_GE(through->datapath.rpc.run_inputs, 2u);  // a mask of each prompt chunk at least
      EXPECT_GE(through->datapath.rpc.run_bytes_not_sent, 1u << 20);
    } else {
      EXPECT_EQ(through->datapath.rpc.run_inputs, 0u);
    }
  }
  EXPECT_LT(sent[1] + (1u << 20), sent[0]) << "with runs " << sent[1] << " bytes, without " << sent[0];
  // The worker's RPC child says how many it expanded, per session: some, then none.
  const std::regex line("step inputs placed in [0-9.]+ s \\(([0-9]+) expanded from runs\\)");
  std::vector<uint64_t> expanded;
  for (int i = 0; i < 100 && expanded.size() < 2; ++i) {
    expanded.clear();
    const std::string log = w.log();
    for (std::sregex_iterator it(log.begin(), log.end(), line), end; it != end; ++it)
      expanded.push_back(std::stoull((*it)[1]));
    if (expanded.size() < 2) std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  ASSERT_EQ(expanded.size(), 2u) << w.log();
  EXPECT_GE(expanded[0], 2u);
  EXPECT_EQ(expanded[1], 0u);
}

// Two workers behind forwarders: the first holds the tiny model's first sparse layer (where
// MiniMax-M3 casts the step's mask to f32 once), the second the two after it, the head the dense
// layer.
struct MaskOnTheFirst {
  link::Secret secret;
  WorkerProcess w1, w2;
  std::unique_ptr<link::Forwarder> f1, f2;
  MaskOnTheFirst(const ScratchDir& dir)
      : secret(make_secret(dir.file("cluster.key"))),
        w1(dir, "box-b", dir.file("cluster.key")),
        w2(dir, "box-c", dir.file("cluster.key")) {}
  // The split of `base` through both; nullopt when a worker did not come up.
  std::optional<GenerateOptions> split(const GenerateOptions& base) {
    if (!w1.up() || !w2.up()) return std::nullopt;
    f1 = forward_to(w1, secret);
    f2 = forward_to(w2, secret);
    GenerateOptions o = base;
    o.placement.rpc_servers = {local(*f1), local(*f2)};
    o.placement.tandem_workers = {local(*f1), local(*f2)};
    o.placement.cpu_layers = 1;
    o.placement.device_layers = {1, 2};
    return o;
  }
};

// A mask the first worker made and the second worker's layers each read through a view. Read over
// the link, it crosses once per step: the head reads it from the first worker and passes it on
// (rpc_writes.h, relay_rpc_result). Made on the head from its own f16 mask (local_casts.h), it is
// not read at all: nothing relayed, and the first worker's answers shrink by at least the first
// chunk's cast (512 × 512 × 4 bytes). Either way the tokens stay those of one process.
TEST_F(Split, AMaskOneWorkerMadeCrossesOncePerStepOrIsMadeOnTheHead) {
  const GenerateOptions longer = long_prompt_options(model_, 6);
  auto alone = generate(longer);
  ASSERT_TRUE(alone.is_ok()) << alone.status().to_string();
  MaskOnTheFirst two(dir_);
  auto split = two.split(longer);
  ASSERT_TRUE(split) << two.w1.log() << two.w2.log();
  uint64_t from_first[2] = {0, 0};
  for (bool casts : {false, true}) {
    GenerateOptions run = *split;
    run.placement.local_casts = casts;  // --no-local-casts when false
    const uint64_t before = two.f1->stats().bytes_from_worker;
    auto through = generate(run);
    ASSERT_TRUE(through.is_ok()) << through.status().to_string() << "\n" << two.w1.log() << two.w2.log();
    EXPECT_EQ(through->tokens, alone->tokens) << (casts ? "made on the head" : "read from the worker");
    from_first[casts] = two.f1->stats().bytes_from_worker - before;
    if (casts) {
      EXPECT_GE(through->datapath.local_casts, 2u);  // at least one per prompt chunk
      EXPECT_EQ(through->datapath.rpc.relayed_results, 0u);
    } else {
      EXPECT_EQ(through->datapath.local_casts, 0u);
      // Per prompt chunk the second worker's two layers each copy the mask: one read, one repeat.
      EXPECT_GE(through->datapath.rpc.relayed_results, 2u);
      EXPECT_GE(through->datapath.rpc.relayed_bytes_not_read, 1u << 20);  // the first chunk's 512 × 512 × 4
    }
  }
  EXPECT_LE(from_first[1] + (1u << 20), from_first[0]) << from_first[1] << " against " << from_first[0];
}

// A worker that runs layer 0 holds the token embedding and gathers each batch's rows itself
// (datapath/worker_embedding.h): the head sends it token ids, not rows, and the tokens stay those of
// one process (the worker's CPU gathers as the head's would).
TEST_F(Split, TheWorkerRunningLayerZeroGathersTheEmbeddingRowsItself) {
  GenerateOptions longer = long_prompt_options(model_, 6);
  // As many threads as the worker's (worker_env.h): the CPU's attention over a long context sums
  // in an order that depends on them, which layer 0's full attention, here on the worker, shows.
  longer.threads = 1;
  auto alone = generate(longer);
  ASSERT_TRUE(alone.is_ok()) << alone.status().to_string();
  auto info = plan::read_model_info(model_);
  ASSERT_TRUE(info.is_ok());
  uint64_t table = 0;
  for (const auto& t : info->tensors) table += t.name == "token_embd.weight" ? t.bytes : 0;
  ASSERT_GT(table, 1u << 20);

  const link::Secret secret = make_secret(dir_.file("cluster.key"));
  WorkerProcess w(dir_, "box-b", dir_.file("cluster.key"));
  ASSERT_TRUE(w.up()) << w.log();
  uint64_t sent[2] = {0, 0};
  for (bool on : {false, true}) {
    auto f = forward_to(w, secret);
    GenerateOptions split = longer;
    split.placement.rpc_servers = {local(*f)};
    split.placement.use_local_gpus = false;
    split.placement.cpu_layers = 0;
    split.placement.device_layers = {4};
    split.placement.embedding_on_worker = on;
    auto through = generate(split);
    ASSERT_TRUE(through.is_ok()) << through.status().to_string() << "\n" << w.log();
    EXPECT_EQ(through->tokens, alone->tokens) << (on ? "rows gathered on the worker" : "rows sent by the head");
    EXPECT_EQ(through->embedding_on_worker, on);
    sent[on] = f->stats().bytes_to_worker;
  }
  // The table crossed once; every token's row (4 x n_embd bytes) did not, its id (4 bytes) did.
  const uint64_t tokens = static_cast<uint64_t>(alone->n_prompt_tokens + longer.n_predict - 1);
  const int64_t rows = static_cast<int64_t>(tokens * (info->n_embd * 4 - 4));
  const int64_t diff = static_cast<int64_t>(sent[1]) - static_cast<int64_t>(sent[0]);
  EXPECT_NEAR(static_cast<double>(diff), static_cast<double>(static_cast<int64_t>(table) - rows), 64.0 * 1024)
      << "with the table on the worker " << sent[1] << " bytes, without " << sent[0] << "; table " << table << ", rows "
      << rows;
}

// The oracle on every architecture the presets have (minimax-m3's sparse attention, qwen3moe's
// dense attention and experts without a shared one, glm4moe's attention biases and many experts
// per token): a long prompt (two chunks) and its tokens
// through one tandem worker after a head CPU layer, and through two workers holding every layer,
// with every data-path mechanism on, are those of one process.
class SplitArchitectures : public ::testing::TestWithParam<const char*> {};

TEST_P(SplitArchitectures, EveryMechanismOnGivesTheTokensOfOneProcess) {
  ScratchDir dir;
  const std::string model = dir.file(std::string(GetParam()) + ".gguf");
  synth::ModelSpec spec = synth::preset(GetParam()).value();
  spec.vocab = "ggml-vocab-llama-spm.gguf";  // as in Split, for the same reason
  ASSERT_TRUE(synth::write_model(spec, model, {}).is_ok());
  GenerateOptions longer = long_prompt_options(model, 8);
  // The workers' thread count (worker_env.h): the CPU's attention over a long context sums in an
  // order that depends on it, and every layer of qwen3moe has full attention.
  longer.threads = 1;
  auto alone = generate(longer);
  ASSERT_TRUE(alone.is_ok()) << alone.status().to_string();

  const link::Secret secret = make_secret(dir.file("cluster.key"));
  WorkerProcess w1(dir, "box-b", dir.file("cluster.key"));
  WorkerProcess w2(dir, "box-c", dir.file("cluster.key"));
  ASSERT_TRUE(w1.up() && w2.up()) << w1.log() << w2.log();
  const int layers = static_cast<int>(spec.n_layer);
  {
    auto f = forward_to(w1, secret);
    GenerateOptions split = longer;
    split.placement.rpc_servers = {local(*f)};
    split.placement.tandem_workers = {local(*f)};
    split.placement.cpu_layers = 1;
    split.placement.device_layers = {layers - 1};
    auto through = generate(split);
    ASSERT_TRUE(through.is_ok()) << through.status().to_string() << "\n" << w1.log();
    EXPECT_EQ(through->tokens, alone->tokens) << GetParam() << ": a head CPU layer, then one worker";
  }
  {
    auto f1 = forward_to(w1, secret);
    auto f2 = forward_to(w2, secret);
    GenerateOptions split = longer;
    split.placement.rpc_servers = {local(*f1), local(*f2)};
    split.placement.tandem_workers = {local(*f1), local(*f2)};
    split.placement.device_layers = {layers / 2, layers - layers / 2};
    auto through = generate(split);
    ASSERT_TRUE(through.is_ok()) << through.status().to_string() << "\n" << w1.log() << w2.log();
    EXPECT_EQ(through->tokens, alone->tokens) << GetParam() << ": two workers";
    EXPECT_TRUE(through->embedding_on_worker) << "the first worker did not gather the embedding's rows";
  }
}

INSTANTIATE_TEST_SUITE_P(Presets, SplitArchitectures, ::testing::Values("tiny", "tiny-qwen3moe", "tiny-glm4moe"),
                         [](const ::testing::TestParamInfo<const char*>& i) {
                           std::string n = i.param;
                           for (char& c : n) c = std::isalnum(static_cast<unsigned char>(c)) ? c : '_';
                           return n;
                         });

// The worker's RPC child keeps large blocks in its heap while a head loads (worker/rpc_server.cpp:
// ggml reads each weight into a fresh buffer); when the session ends it gives them back, so the
// free memory a later plan reads is really free.
TEST(WorkerMemory, TheRpcChildGivesASessionsMemoryBackWhenItEnds) {
  ScratchDir dir;
  synth::ModelSpec spec = synth::preset("tiny").value();
  spec.n_expert = 64;  // ~14 MB of experts per layer: the worker's 3 layers dwarf its idle size
  spec.n_ff_exp = 512;
  const std::string model = dir.file("wide.gguf");
  ASSERT_TRUE(synth::write_model(spec, model, {}).is_ok());
  const link::Secret secret = make_secret(dir.file("cluster.key"));
  WorkerProcess w(dir, "box-b", dir.file("cluster.key"));
  ASSERT_TRUE(w.up()) << w.log();
  const int child = child_pid_of(w.process().pid());
  ASSERT_GT(child, 0);
  const uint64_t idle = rss_kib(child);
  auto f = forward_to(w, secret);
  GenerateOptions o = through_worker(options(model), *f);
  std::atomic<bool> done{false};
  uint64_t peak = 0;
  std::thread sampler([&] {
    while (!done) {
      peak = std::max(peak, rss_kib(child));
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
    }
  });
  auto r = generate(o);
  done = true;
  sampler.join();
  ASSERT_TRUE(r.is_ok()) << r.status().to_string() << "\n" << w.log();
  EXPECT_GT(peak, idle + 30 * 1024) << "idle " << idle << " KiB";  // it held the worker's layers
  uint64_t after = rss_kib(child);
  for (int i = 0; i < 100 && after > idle + 8 * 1024; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
    after = rss_kib(child);
  }
  EXPECT_LT(after, idle + 8 * 1024) << "idle " << idle << " KiB, peak " << peak << " KiB";
}

// The same through the command line: `tandem link forward` in front of the worker, and
// `tandem engine --rpc` pointed at it.
TEST_F(Split, CommandLineForwarderServesTandemEngine) {
  make_secret(dir_.file("cluster.key"));
  WorkerProcess w(dir_, "box-b", dir_.file("cluster.key"));
  ASSERT_TRUE(w.up()) << w.log();
  const int port = free_port();
  ChildProcess fwd({TANDEM_BINARY, "link", "forward", "--to", w.endpoint(), "--listen",
                    "127.0.0.1:" + std::to_string(port), "--secret-file", dir_.file("cluster.key")},
                   dir_.file("forward.log"));
  ASSERT_TRUE(wait_for_port(port, 10000));
  auto r = run_tandem("engine -m " + model_ +
                          " -p 'Two desktop boxes joined by one cable' -n 16 -c 128 -t 2 --ignore-eos "
                          "--json --no-cpu-repack --rpc 127.0.0.1:" +
                          std::to_string(port) + " --cpu-layers 1 --layer-split 3",
                      dir_.file(""));
  ASSERT_EQ(r.exit_code, 0) << r.err;
  auto j = nlohmann::json::parse(r.out, nullptr, false);
  ASSERT_TRUE(j.is_object()) << r.out;
  EXPECT_EQ(j["tokens"].get<std::vector<int32_t>>(), reference_);
  ASSERT_TRUE(fwd.signal(SIGTERM));
  EXPECT_EQ(fwd.wait(10000), 0);
}

// TANDEM_STEP_TRACE reaches the engine and the worker's RPC child, and their lines share a clock:
// the worker's graph of a step never starts before the head's run of that step did. With the
// measurement switches for the pipeline and the overlap on, the tokens stay those of one process.
TEST_F(Split, TheStepTraceLinesUpTheHeadsRunsAndTheWorkersGraphs) {
  make_secret(dir_.file("cluster.key"));
  const std::string trace = dir_.file("trace.txt");
  ::setenv("TANDEM_STEP_TRACE", trace.c_str(), 1);  // this process decided already (SetUp ran the model)
  WorkerProcess w(dir_, "box-b", dir_.file("cluster.key"));
  const int port = free_port();
  ChildProcess fwd({TANDEM_BINARY, "link", "forward", "--to", w.endpoint(), "--listen",
                    "127.0.0.1:" + std::to_string(port), "--secret-file", dir_.file("cluster.key")},
                   dir_.file("forward.log"));
  auto r = run_tandem("engine -m " + model_ +
                          " -p 'Two desktop boxes joined by one cable' -n 16 -c 128 -t 2 --ignore-eos "
                          "--json --no-cpu-repack --no-pipeline --no-overlap --rpc 127.0.0.1:" +
                          std::to_string(port) + " --tandem-worker 127.0.0.1:" + std::to_string(port) +
                          " --cpu-layers 1 --layer-split 3",
                      dir_.file(""));
  ::unsetenv("TANDEM_STEP_TRACE");
  ASSERT_TRUE(w.up()) << w.log();
  ASSERT_EQ(r.exit_code, 0) << r.err;
  auto j = nlohmann::json::parse(r.out, nullptr, false);
  ASSERT_TRUE(j.is_object()) << r.out;
  EXPECT_EQ(j["tokens"].get<std::vector<int32_t>>(), reference_);

  std::map<int, std::map<std::string, std::vector<std::pair<uint64_t, uint64_t>>>> by_pid;
  std::ifstream in(trace);
  int pid = 0;
  std::string what;
  uint64_t t0 = 0, t1 = 0;
  for (std::string line; std::getline(in, line);) {
    std::istringstream fields(line);
    ASSERT_TRUE(fields >> pid >> what >> t0 >> t1) << "malformed trace line: " << line;
    EXPECT_LE(t0, t1) << line;
    by_pid[pid][what].emplace_back(t0, t1);
  }
  std::vector<std::pair<uint64_t, uint64_t>> runs, graphs;
  for (auto& [p, events] : by_pid) {
    if (!events["run"].empty()) {
      EXPECT_TRUE(runs.empty()) << "two processes ran the scheduler";
      runs = events["run"];
      EXPECT_EQ(events["launch-rpc"].size(), runs.size());
    }
    if (!events["graph"].empty()) graphs = events["graph"];
  }
  // The prompt's run and one per generated token after the first.
  ASSERT_EQ(runs.size(), 16u);
  ASSERT_EQ(graphs.size(), runs.size()) << "the worker's RPC child wrote no trace, or not one graph per step";
  for (size_t i = 0; i < runs.size(); ++i) EXPECT_GE(graphs[i].first, runs[i].first) << "step " << i;
  ASSERT_TRUE(fwd.signal(SIGTERM));
  EXPECT_EQ(fwd.wait(10000), 0);
}

// Runs a stock llama-server with every layer on `rpc` and returns /completion's text for a greedy
// request ("" on failure).
std::string llama_server_completion(const ScratchDir& dir, const std::string& model, const std::string& rpc,
                                    const std::string& tag) {
  const int port = free_port();
  ChildProcess server({TANDEM_LLAMA_SERVER_EXE, "-m", model, "--rpc", rpc, "-ngl", "99", "-c", "256", "-t", "2",
                       "--host", "127.0.0.1", "--port", std::to_string(port), "--no-warmup"},
                      dir.file(tag + "-server.log"));
  const std::string url = "http://127.0.0.1:" + std::to_string(port);
  bool ready = false;
  for (int i = 0; i < 300 && !ready && server.running(); ++i) {
    ready = std::system(("curl -sf -o /dev/null " + url + "/health").c_str()) == 0;
    if (!ready) std::this_thread::sleep_for(std::chrono::milliseconds(200));
  }
  if (!ready) return "";
  const std::string out = dir.file(tag + "-completion.json");
  const std::string body =
      R"({"prompt": "Two desktop boxes joined by one cable", "n_predict": 12, "temperature": 0, "cache_prompt": false})";
  const std::string cmd =
      "curl -sf -m 60 -H 'Content-Type: application/json' -d '" + body + "' " + url + "/completion -o " + out;
  if (std::system(cmd.c_str()) != 0) return "";
  std::ifstream in(out);
  std::stringstream ss;
  ss << in.rdbuf();
  auto j = nlohmann::json::parse(ss.str(), nullptr, false);
  return j.is_object() && j.contains("content") ? j["content"].get<std::string>() : "";
}

TEST_F(Split, StockLlamaServerThroughAForwarderMatchesADirectRpcServer) {
  const int direct_port = free_port();
  std::string direct;
  {
    ChildProcess rpc({TANDEM_LLAMA_RPC_SERVER_EXE, "-H", "127.0.0.1", "-p", std::to_string(direct_port), "-t", "1"},
                     dir_.file("rpc.log"));
    ASSERT_TRUE(wait_for_port(direct_port, 10000));
    direct = llama_server_completion(dir_, model_, "127.0.0.1:" + std::to_string(direct_port), "direct");
  }
  ASSERT_FALSE(direct.empty());
  const link::Secret secret = make_secret(dir_.file("cluster.key"));
  WorkerProcess w(dir_, "box-b", dir_.file("cluster.key"));
  ASSERT_TRUE(w.up()) << w.log();
  auto f = forward_to(w, secret);
  const std::string through = llama_server_completion(dir_, model_, local(*f), "forwarded");
  EXPECT_EQ(through, direct);
  EXPECT_GT(f->stats().bytes_to_worker, 1000000u);
}

}  // namespace
}  // namespace tandem::engine
