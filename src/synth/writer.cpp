#include "synth/writer.h"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <deque>
#include <fstream>
#include <future>
#include <sstream>
#include <thread>
#include <vector>

#include "ggml.h"
#include "gguf.h"
#include "plan/model_info.h"
#include "synth/vocab.h"

namespace tandem::synth {
namespace {

constexpr size_t kChunkBytes = 32u << 20;  // generated and written per step

struct GgmlCtxDeleter {
  void operator()(ggml_context* c) const { ggml_free(c); }
};

class File {
 public:
  ~File() {
    if (fd_ >= 0) ::close(fd_);
  }
  Status open(const std::string& path) {
    path_ = path;
    fd_ = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (fd_ < 0) return Status::invalid_argument(path + ": cannot create: " + std::strerror(errno));
    return Status::ok();
  }
  Status write(const void* data, size_t n) {
    const auto* p = static_cast<const uint8_t*>(data);
    while (n > 0) {
      const ssize_t w = ::write(fd_, p, n);
      if (w < 0) {
        if (errno == EINTR) continue;
        return Status::resource_exhausted(path_ + ": write failed after " + std::to_string(written_) +
                                          " bytes: " + std::strerror(errno));
      }
      p += w;
      n -= static_cast<size_t>(w);
      written_ += static_cast<uint64_t>(w);
    }
    return Status::ok();
  }
  Status pad_to(size_t alignment) {
    static const uint8_t zeros[64] = {};
    const size_t pad = (alignment - written_ % alignment) % alignment;
    return write(zeros, pad);
  }
  Status sync_and_close() {
    if (::fdatasync(fd_) != 0)
      return Status::resource_exhausted(path_ + ": flushing to disk failed: " + std::strerror(errno));
    const int fd = fd_;
    fd_ = -1;
    if (::close(fd) != 0) return Status::resource_exhausted(path_ + ": close failed: " + std::strerror(errno));
    return Status::ok();
  }
  uint64_t written() const { return written_; }

 private:
  std::string path_;
  int fd_ = -1;
  uint64_t written_ = 0;
};

Result<std::string> read_text_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return Status::not_found(path + ": cannot read chat template");
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

// llama_ftype of a model whose matrices are all `type` (llama.h: ALL_F32 0, MOSTLY_F16 1,
// MOSTLY_Q8_0 7, MOSTLY_Q4_K_S 14, MOSTLY_IQ4_XS 30).
uint32_t llama_file_type(int type) {
  switch (static_cast<ggml_type>(type)) {
    case GGML_TYPE_F32:
      return 0;
    case GGML_TYPE_F16:
      return 1;
    case GGML_TYPE_Q8_0:
      return 7;
    case GGML_TYPE_Q4_K:
      return 14;
    case GGML_TYPE_IQ4_XS:
      return 30;
    default:
      return 0;
  }
}

void set_arch_kv(gguf_context* g, const ModelSpec& s, uint32_t n_vocab) {
  const std::string a = s.arch + ".";
  auto u32 = [&](const std::string& k, uint32_t v) { gguf_set_val_u32(g, (a + k).c_str(), v); };
  auto f32 = [&](const std::string& k, float v) { gguf_set_val_f32(g, (a + k).c_str(), v); };
  gguf_set_val_str(g, "general.architecture", s.arch.c_str());
  gguf_set_val_str(g, "general.type", "model");
  gguf_set_val_str(g, "general.name", s.name.c_str());
  gguf_set_val_u32(g, "general.quantization_version", 2);
  gguf_set_val_u32(g, "general.file_type", llama_file_type(s.type));
  u32("vocab_size", n_vocab);
  u32("context_length", s.n_ctx_train);
  u32("embedding_length", s.n_embd);
  u32("block_count", s.n_layer);
  u32("feed_forward_length", s.n_ff);
  if (s.arch != "qwen3" && s.arch != "eagle3") {  // the drafts are dense
    u32("expert_feed_forward_length", s.n_ff_exp);
    u32("expert_count", s.n_expert);
    u32("expert_used_count", s.n_expert_used);
  }
  if (s.arch == "eagle3") {
    gguf_set_arr_data(g, (a + "target_layers").c_str(), GGUF_TYPE_INT32, s.target_layers.data(),
                      s.target_layers.size());
    u32("target_hidden_size", s.target_embd);
  }
  u32("attention.head_count", s.n_head);
  u32("attention.head_count_kv", s.n_head_kv);
  u32("attention.key_length", s.head_dim);
  u32("attention.value_length", s.head_dim);
  f32("attention.layer_norm_rms_epsilon", s.rms_eps);
  u32("rope.dimension_count", s.n_rot);
  f32("rope.freq_base", s.rope_theta);
  if (s.arch == "minimax-m3" || s.arch == "glm4moe") {
    u32("leading_dense_block_count", s.n_layer_dense_lead);
    u32("expert_shared_count", s.n_expert_shared);
    f32("expert_weights_scale", s.expert_weights_scale);
    gguf_set_val_bool(g, (a + "expert_weights_norm").c_str(), s.expert_weights_norm);
    u32("expert_gating_func", 2);  // sigmoid
  }
  if (s.arch == "glm4moe") u32("nextn_predict_layers", 0);  // no multi-token prediction layers
  if (s.arch == "minimax-m3") {
    u32("attention.indexer.head_count", s.n_head_kv);
    u32("attention.indexer.key_length", s.indexer_head_size);
    u32("attention.indexer.top_k", s.indexer_top_k);
    u32("attention.indexer.block_size", s.indexer_block_size);
    u32("attention.indexer.local_blocks", s.indexer_local_blocks);
  }
}

struct Chunk {
  size_t tensor;
  int64_t row0, rows;
  uint64_t stream;
};

}  // namespace

std::string default_models_dir() { return TANDEM_LLAMA_MODELS_DIR; }

Result<SynthResult> write_model(const ModelSpec& spec, const std::string& path, const SynthOptions& options) {
  const auto t0 = std::chrono::steady_clock::now();
  TANDEM_RETURN_IF_ERROR(validate_spec(spec));
  const std::string models_dir = options.models_dir.empty() ? default_models_dir() : options.models_dir;

  auto vocab = open_vocab(spec.vocab, models_dir);
  if (!vocab.is_ok()) return vocab.status();
  const uint32_t n_vocab = spec.n_vocab ? spec.n_vocab : vocab->n_tokens;
  if (n_vocab < vocab->n_tokens) {
    return Status::invalid_argument("vocabulary size " + std::to_string(n_vocab) + " is smaller than the tokenizer's " +
                                    std::to_string(vocab->n_tokens) + " tokens (" + vocab->path + ")");
  }
  auto table = tensor_table(spec, n_vocab);
  if (!table.is_ok()) return table.status();
  const std::vector<TensorSpec>& tensors = table.value();

  plan::GgufPtr g(gguf_init_empty());
  copy_tokenizer(vocab.value(), g.get(), n_vocab);
  if (!spec.chat_template.empty()) {
    auto tmpl = read_text_file(models_dir + "/templates/" + spec.chat_template);
    if (!tmpl.is_ok()) return tmpl.status();
    gguf_set_val_str(g.get(), "tokenizer.chat_template", tmpl->c_str());
  }
  set_arch_kv(g.get(), spec, n_vocab);
  gguf_set_val_u64(g.get(), "tandem.synth.seed", spec.seed);
  if (spec.header_only) gguf_set_val_bool(g.get(), "tandem.header_only", true);

  ggml_init_params ip{tensors.size() * ggml_tensor_overhead(), nullptr, /*no_alloc=*/true};
  std::unique_ptr<ggml_context, GgmlCtxDeleter> meta(ggml_init(ip));
  uint64_t total = 0;
  for (const TensorSpec& t : tensors) {
    ggml_tensor* x = ggml_new_tensor(meta.get(), static_cast<ggml_type>(t.type), 4, t.ne);
    ggml_set_name(x, t.name.c_str());
    gguf_add_tensor(g.get(), x);
    total += ggml_nbytes(x);
  }

  const std::string part = path + ".part";
  File file;
  TANDEM_RETURN_IF_ERROR(file.open(part));
  std::vector<uint8_t> header(gguf_get_meta_size(g.get()));
  gguf_get_meta_data(g.get(), header.data());
  Status s = file.write(header.data(), header.size());
  if (s.is_ok() && !spec.header_only) {
    // Chunks are generated by a pool of threads, a few ahead of the writer, and written in order.
    std::vector<Chunk> chunks;
    for (size_t i = 0; i < tensors.size(); ++i) {
      const TensorSpec& t = tensors[i];
      const int64_t rows = t.ne[1] * t.ne[2] * t.ne[3];
      const size_t row_bytes = ggml_row_size(static_cast<ggml_type>(t.type), t.ne[0]);
      const int64_t per = std::max<int64_t>(1, static_cast<int64_t>(kChunkBytes / row_bytes));
      for (int64_t r = 0, c = 0; r < rows; r += per, ++c) {
        chunks.push_back({i, r, std::min(per, rows - r), (static_cast<uint64_t>(i) << 32) | static_cast<uint64_t>(c)});
      }
    }
    const int threads = options.threads > 0 ? options.threads : std::max(1u, std::thread::hardware_concurrency());
    auto generate = [&](const Chunk& c) {
      const TensorSpec& t = tensors[c.tensor];
      std::vector<uint8_t> buf(ggml_row_size(static_cast<ggml_type>(t.type), t.ne[0]) * c.rows);
      fill_rows(t.type, t.fill, t.scale, t.ne[0], c.rows, spec.seed, c.stream, buf.data());
      return buf;
    };
    std::deque<std::future<std::vector<uint8_t>>> ahead;
    size_t next = 0, current_tensor = 0;
    uint64_t done = 0;
    while (s.is_ok() && (next < chunks.size() || !ahead.empty())) {
      while (next < chunks.size() && ahead.size() < static_cast<size_t>(threads) + 1) {
        ahead.push_back(std::async(std::launch::async, generate, chunks[next++]));
      }
      const size_t index = next - ahead.size();
      std::vector<uint8_t> buf = ahead.front().get();
      ahead.pop_front();
      if (chunks[index].tensor != current_tensor) {
        s = file.pad_to(gguf_get_alignment(g.get()));
        current_tensor = chunks[index].tensor;
      }
      if (s.is_ok()) s = file.write(buf.data(), buf.size());
      done += buf.size();
      if (options.progress) options.progress(done, total);
    }
    if (s.is_ok()) s = file.pad_to(gguf_get_alignment(g.get()));
  }
  if (s.is_ok()) s = file.sync_and_close();
  if (s.is_ok() && std::rename(part.c_str(), path.c_str()) != 0) {
    s = Status::invalid_argument(path + ": cannot move " + part + " into place: " + std::strerror(errno));
  }
  if (!s.is_ok()) {
    std::remove(part.c_str());
    return s;
  }
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();

  auto info = plan::read_model_info(path);
  if (!info.is_ok()) return info.status().with_context("reading back the written model");
  SynthResult r;
  r.path = path;
  r.file_bytes = info->file_bytes;
  r.n_params = info->n_params;
  r.active_bytes_per_token = info->active_bytes_per_token();
  r.seconds = seconds;
  r.bytes_per_s = seconds > 0 ? static_cast<double>(r.file_bytes) / seconds : 0;
  return r;
}

}  // namespace tandem::synth
