#include "engine/generate.h"

#include <algorithm>
#include <chrono>
#include <memory>

#include <nlohmann/json.hpp>

#include "common/cpu_cores.h"
#include "datapath/head_session.h"
#include "datapath/worker_embedding.h"
#include "engine/llama_log.h"
#include "llama.h"

namespace tandem::engine {
namespace {

using Clock = std::chrono::steady_clock;
double since(Clock::time_point t) { return std::chrono::duration<double>(Clock::now() - t).count(); }

struct ContextDeleter {
  void operator()(llama_context* c) const { llama_free(c); }
};
struct SamplerDeleter {
  void operator()(llama_sampler* s) const { llama_sampler_free(s); }
};

std::string piece(const llama_vocab* vocab, llama_token token) {
  char buf[256];
  const int n = llama_token_to_piece(vocab, token, buf, sizeof buf, 0, false);
  return n > 0 ? std::string(buf, n) : std::string();
}

}  // namespace

Result<GenerateResult> generate(const GenerateOptions& o) {
  if (o.n_predict < 1)
    return Status::invalid_argument("n_predict must be at least 1, got " + std::to_string(o.n_predict));
  if (o.n_ctx < 8) return Status::invalid_argument("context size must be at least 8, got " + std::to_string(o.n_ctx));
  llama_backend_init();
  take_last_llama_error();
  GenerateResult r;

  auto t = Clock::now();
  LoadOptions lo;
  lo.model = o.model;
  lo.placement = o.placement;
  auto loaded = load_model(lo);
  if (!loaded.is_ok()) return loaded.status();
  ModelPtr model = std::move(loaded.value());
  r.load_s = since(t);

  const int threads = o.threads > 0 ? o.threads : physical_cores();
  llama_context_params cp = llama_context_default_params();
  cp.n_ctx = static_cast<uint32_t>(o.n_ctx);
  cp.n_batch = static_cast<uint32_t>(o.n_ctx);
  cp.n_seq_max = 1;
  cp.n_threads = threads;
  cp.n_threads_batch = threads;
  cp.no_perf = true;
  auto session = open_head_session(o.placement, model.get(), cp.n_ctx, cp.n_seq_max, cp.n_ubatch);
  if (!session.is_ok()) return session.status();
  const std::unique_ptr<datapath::HeadSession> datapath = std::move(session.value());
  r.embedding_on_worker = model.get_deleter().worker_embedding != nullptr;
  std::unique_ptr<llama_context, ContextDeleter> ctx(llama_init_from_model(model.get(), cp));
  if (!ctx)
    return Status::resource_exhausted(
        with_llama_reason(o.model + ": creating a context of " + std::to_string(o.n_ctx) + " tokens failed"));

  const llama_vocab* vocab = llama_model_get_vocab(model.get());
  std::vector<llama_token> prompt(o.prompt.size() + 8);
  int n = llama_tokenize(vocab, o.prompt.data(), static_cast<int32_t>(o.prompt.size()), prompt.data(),
                         static_cast<int32_t>(prompt.size()), /*add_special=*/true, /*parse_special=*/true);
  if (n < 0) return Status::internal("tokenizing the prompt failed");
  prompt.resize(n);
  if (prompt.empty()) return Status::invalid_argument("the prompt is empty after tokenization");
  if (static_cast<int>(prompt.size()) + o.n_predict > o.n_ctx) {
    return Status::invalid_argument("prompt (" + std::to_string(prompt.size()) + " tokens) plus " +
                                    std::to_string(o.n_predict) + " generated tokens exceed the context of " +
                                    std::to_string(o.n_ctx) + " tokens");
  }
  r.n_prompt_tokens = static_cast<int>(prompt.size());

  std::unique_ptr<llama_sampler, SamplerDeleter> sampler(
      llama_sampler_chain_init(llama_sampler_chain_default_params()));
  if (o.greedy) {
    llama_sampler_chain_add(sampler.get(), llama_sampler_init_greedy());
  } else {
    llama_sampler_chain_add(sampler.get(), llama_sampler_init_temp(o.temperature));
    llama_sampler_chain_add(sampler.get(), llama_sampler_init_dist(o.seed));
  }

  t = Clock::now();
  datapath::SplitProfile mark = datapath->stats().profile;
  llama_batch batch = llama_batch_get_one(prompt.data(), static_cast<int32_t>(prompt.size()));
  if (int rc = llama_decode(ctx.get(), batch); rc != 0) {
    return Status::internal(
        with_llama_reason("decoding the prompt failed (llama_decode returned " + std::to_string(rc) + ")"));
  }
  Clock::time_point first_token, chunk_start;
  for (int i = 0; i < o.n_predict; ++i) {
    llama_token token = llama_sampler_sample(sampler.get(), ctx.get(), -1);
    if (o.chunk_tokens > 0 && i > 0 && i % o.chunk_tokens == 0) {
      r.chunk_tps.push_back(o.chunk_tokens / std::max(since(chunk_start), 1e-9));
      chunk_start = Clock::now();
    }
    if (i == 0) {
      r.prefill_s = since(t);
      first_token = chunk_start = Clock::now();
      r.prefill_profile = datapath->stats().profile - mark;
      mark = datapath->stats().profile;
    }
    if (!o.ignore_eos && llama_vocab_is_eog(vocab, token)) break;
    r.tokens.push_back(token);
    r.text += piece(vocab, token);
    if (i + 1 == o.n_predict) break;
    batch = llama_batch_get_one(&token, 1);
    if (int rc = llama_decode(ctx.get(), batch); rc != 0) {
      return Status::internal(with_llama_reason("decoding token " + std::to_string(i + 1) +
                                                " failed (llama_decode returned " + std::to_string(rc) + ")"));
    }
  }
  if (!r.tokens.empty()) {
    r.decode_s = since(first_token);
    r.decode_profile = datapath->stats().profile - mark;
    if (r.tokens.size() > 1 && r.decode_s > 0) r.decode_tps = (r.tokens.size() - 1) / r.decode_s;
  }
  if (r.prefill_s > 0) r.prefill_tps = r.n_prompt_tokens / r.prefill_s;
  r.datapath = datapath->stats();
  return r;
}

namespace {

nlohmann::json profile_json(const datapath::SplitProfile& p) {
  return {{"runs", p.runs},
          {"run_s", p.run_s},
          {"to_workers_s", p.to_workers_s},
          {"from_workers_s", p.from_workers_s},
          {"to_local_s", p.to_local_s},
          {"launches", p.launches},
          {"launch_s", p.launch_s},
          {"sync_s", p.sync_s}};
}

}  // namespace

std::string generate_result_json(const GenerateResult& r) {
  const datapath::HeadStats& d = r.datapath;
  const nlohmann::json j = {{"text", r.text},
                            {"tokens", r.tokens},
                            {"n_prompt_tokens", r.n_prompt_tokens},
                            {"load_s", r.load_s},
                            {"prefill_tps", r.prefill_tps},
                            {"decode_tps", r.decode_tps},
                            {"chunk_tps", r.chunk_tps},
                            {"input_copies", d.rpc.reused_writes},
                            {"overlapped_reduce_copies", d.overlapped_reduce_copies},
                            {"input_copies_identified", d.rpc.identified_writes},
                            {"input_bytes_not_sent", d.rpc.bytes_not_sent},
                            {"slotted_inputs", d.rpc.slotted_inputs},
                            {"slot_bytes_not_sent", d.rpc.slot_bytes_not_sent},
                            {"local_inputs_staged", d.local.staged},
                            {"local_inputs_repeated", d.local.repeated},
                            {"local_input_bytes_not_copied", d.local.bytes_not_copied},
                            {"worker_results_repeated", d.local.results_repeated},
                            {"worker_result_bytes_not_read", d.local.result_bytes_not_read},
                            {"relayed_results", d.rpc.relayed_results},
                            {"relayed_bytes_not_read", d.rpc.relayed_bytes_not_read},
                            {"worker_embeddings", r.embedding_on_worker ? 1 : 0},
                            {"local_casts", d.local_casts},
                            {"local_cast_bytes", d.local_cast_bytes},
                            {"run_inputs", d.rpc.run_inputs},
                            {"run_bytes_not_sent", d.rpc.run_bytes_not_sent},
                            {"prefill_profile", profile_json(r.prefill_profile)},
                            {"decode_profile", profile_json(r.decode_profile)}};
  // Generated text may end inside a UTF-8 sequence: replace, never throw.
  return j.dump(2, ' ', false, nlohmann::json::error_handler_t::replace);
}

}  // namespace tandem::engine
