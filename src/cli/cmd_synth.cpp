#include <unistd.h>

#include <cstdio>
#include <optional>

#include "cli/commands.h"
#include "common/progress.h"
#include "common/units.h"
#include "synth/draft.h"
#include "synth/presets.h"
#include "synth/writer.h"

namespace tandem::cli {
namespace {

struct SynthArgs {
  std::string preset = "tiny";
  std::string output;
  std::optional<std::string> arch, type, vocab, chat_template;
  std::optional<uint32_t> layers, dense_layers, embd, heads, kv_heads, head_dim, ff, ff_exp, experts, experts_used,
      experts_shared, vocab_size, context;
  std::optional<uint64_t> seed;
  bool header_only = false;
  int threads = 0;
  // --draft-for: a draft model for speculative decoding of that target (synth/draft.h)
  std::string draft_for, draft_kind = "small";
  std::vector<int32_t> target_layers;
  bool own_embedding = false;
};

template <typename T>
void apply(const std::optional<T>& v, T& field) {
  if (v) field = *v;
}

synth::ModelSpec build_spec(const SynthArgs& a) {
  auto spec = synth::preset(a.preset);
  if (!spec.is_ok()) fail(spec.status().message(), 2);
  synth::ModelSpec s = spec.value();
  apply(a.arch, s.arch);
  apply(a.vocab, s.vocab);
  apply(a.chat_template, s.chat_template);
  apply(a.layers, s.n_layer);
  apply(a.dense_layers, s.n_layer_dense_lead);
  apply(a.embd, s.n_embd);
  apply(a.heads, s.n_head);
  apply(a.kv_heads, s.n_head_kv);
  // The rotary dimensions keep the preset's share of the head (all of it for qwen3moe, which
  // rotates whole heads).
  if (a.head_dim && s.head_dim > 0) s.n_rot = static_cast<uint32_t>(uint64_t{s.n_rot} * *a.head_dim / s.head_dim);
  apply(a.head_dim, s.head_dim);
  apply(a.ff, s.n_ff);
  apply(a.ff_exp, s.n_ff_exp);
  apply(a.experts, s.n_expert);
  apply(a.experts_used, s.n_expert_used);
  apply(a.experts_shared, s.n_expert_shared);
  apply(a.vocab_size, s.n_vocab);
  apply(a.context, s.n_ctx_train);
  apply(a.seed, s.seed);
  if (a.type) {
    auto t = synth::parse_weight_type(*a.type);
    if (!t.is_ok()) fail(t.status().message(), 2);
    s.type = t.value();
  }
  if (a.header_only) s.header_only = true;
  return s;
}

synth::DraftOptions build_draft_options(const SynthArgs& a) {
  synth::DraftOptions o;
  auto kind = synth::parse_draft_kind(a.draft_kind);
  if (!kind.is_ok()) fail(kind.status().message(), 2);
  o.kind = kind.value();
  if (a.type) {
    auto t = synth::parse_weight_type(*a.type);
    if (!t.is_ok()) fail(t.status().message(), 2);
    o.type = t.value();
  }
  apply(a.layers, o.n_layer);
  apply(a.embd, o.n_embd);
  apply(a.seed, o.seed);
  o.target_layers = a.target_layers;
  o.own_embedding = a.own_embedding;
  return o;
}

void print_written(const synth::SynthResult& r) {
  std::printf("wrote %s: %s (%llu bytes), %s parameters\n", r.path.c_str(), format_bytes(r.file_bytes).c_str(),
              static_cast<unsigned long long>(r.file_bytes), format_count(static_cast<double>(r.n_params)).c_str());
  std::printf("bytes read per generated token: %s (%llu)\n", format_bytes(r.active_bytes_per_token).c_str(),
              static_cast<unsigned long long>(r.active_bytes_per_token));
  std::printf("write speed: %.0f MB/s (%.1f s, flushed to disk)\n", r.bytes_per_s / 1e6, r.seconds);
}

void print_draft(const SynthArgs& a, const synth::DraftResult& r) {
  const synth::ModelSpec& s = r.spec;
  std::printf("%s draft for %s: %s, %u layer(s), hidden %u, the target's tokenizer (%u tokens)\n",
              s.arch == "eagle3" ? "eagle3" : "small", a.draft_for.c_str(), s.arch.c_str(), s.n_layer, s.n_embd,
              s.n_vocab);
  if (s.arch == "eagle3") {
    std::printf("reads target layers %d, %d, %d (hidden %u)%s\n", s.target_layers[0], s.target_layers[1],
                s.target_layers[2], s.target_embd,
                s.own_embedding ? ", own token embedding" : "; uses the target's token embedding");
  }
  print_written(r.file);
}

}  // namespace

namespace {

void register_synth(CLI::App& app) {
  std::string preset_help = "Model shape to start from:";
  for (const auto& p : synth::presets()) preset_help += "\n  " + p.name + ": " + p.summary;
  auto* cmd = app.add_subcommand(
      "synth", "Write a GGUF model with random weights and a real tokenizer (for tests and benchmarks)");
  static SynthArgs a;
  cmd->add_option("-o,--output", a.output, "Output GGUF file")->required();
  cmd->add_option("--preset", a.preset, preset_help)->capture_default_str();
  cmd->add_option("--arch", a.arch, "Architecture: minimax-m3, qwen3moe or glm4moe");
  cmd->add_option("--type", a.type, "Type of the weight matrices: F32, F16, Q8_0, Q4_K, IQ4_XS");
  cmd->add_option("--layers", a.layers, "Number of layers");
  cmd->add_option("--dense-layers", a.dense_layers, "Leading layers with a dense FFN (minimax-m3)");
  cmd->add_option("--embd", a.embd, "Hidden size");
  cmd->add_option("--heads", a.heads, "Attention query heads");
  cmd->add_option("--kv-heads", a.kv_heads, "Attention key/value heads");
  cmd->add_option("--head-dim", a.head_dim, "Attention head size");
  cmd->add_option("--ff", a.ff, "Dense FFN size");
  cmd->add_option("--ff-exp", a.ff_exp, "Expert FFN size");
  cmd->add_option("--experts", a.experts, "Routed experts per layer");
  cmd->add_option("--experts-used", a.experts_used, "Routed experts used per token");
  cmd->add_option("--experts-shared", a.experts_shared, "Shared experts per layer (minimax-m3)");
  cmd->add_option("--context", a.context, "Trained context length written to the header");
  cmd->add_option("--vocab", a.vocab,
                  "Vocabulary GGUF to take the tokenizer from (a path, or a name in llama.cpp's models/)");
  cmd->add_option("--vocab-size", a.vocab_size,
                  "Embedding rows (only with --header-only: the real model's vocabulary size)");
  cmd->add_option("--chat-template", a.chat_template, "Chat template file in llama.cpp's models/templates");
  cmd->add_option("--seed", a.seed, "Random seed of the weights");
  cmd->add_flag("--header-only", a.header_only,
                "Write the tensor table only, no data: a small file that inspect and plan read as the real model");
  cmd->add_option("--threads", a.threads, "Generator threads (0: all cores)")->capture_default_str();
  auto* draft_for = cmd->add_option(
      "--draft-for", a.draft_for,
      "Write a draft model for speculative decoding of this target GGUF instead of a preset: the target's "
      "tokenizer, random weights (docs/synth.md). Takes --layers, --embd (small), --type, --seed, --threads");
  for (const char* shaping : {"--preset", "--arch", "--dense-layers", "--heads", "--kv-heads", "--head-dim", "--ff",
                              "--ff-exp", "--experts", "--experts-used", "--experts-shared", "--context", "--vocab",
                              "--vocab-size", "--chat-template", "--header-only"}) {
    draft_for->excludes(cmd->get_option(shaping));
  }
  cmd->add_option("--draft-kind", a.draft_kind,
                  "With --draft-for: small (a 1-layer dense qwen3: llama.cpp's draft-simple) or eagle3 (llama.cpp's "
                  "eagle3 architecture, one layer reading three of the target's layers: draft-eagle3)")
      ->check(CLI::IsMember({"small", "eagle3"}))
      ->capture_default_str()
      ->needs(draft_for);
  cmd->add_option("--target-layers", a.target_layers,
                  "With --draft-kind eagle3: the three target layers whose inputs the draft reads, e.g. 2,30,57 "
                  "(default: 2, n/2, n-3 from 6 layers up, else first, middle, last)")
      ->delimiter(',')
      ->needs(draft_for);
  cmd->add_flag("--own-embedding", a.own_embedding,
                "With --draft-kind eagle3: write a token embedding of its own (default: the draft uses the target's)")
      ->needs(draft_for);
  cmd->callback([] {
    synth::SynthOptions opts;
    opts.threads = a.threads;
    ProgressMeter meter("writing " + a.output, stderr, ::isatty(STDERR_FILENO) != 0);
    opts.progress = [&](uint64_t done, uint64_t total) { meter.update(done, total); };
    if (!a.draft_for.empty()) {
      auto r = synth::write_draft(a.draft_for, a.output, build_draft_options(a), opts);
      if (!r.is_ok()) fail(r.status().message());
      meter.finish();
      print_draft(a, r.value());
      return;
    }
    const synth::ModelSpec spec = build_spec(a);
    auto r = synth::write_model(spec, a.output, opts);
    if (!r.is_ok()) fail(r.status().message());
    if (!spec.header_only) meter.finish();
    print_written(r.value());
  });
}

}  // namespace

TANDEM_COMMAND(40, register_synth);

}  // namespace tandem::cli
