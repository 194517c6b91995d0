#include "synth/vocab.h"

#include <unistd.h>

#include <string>
#include <vector>

#include "gguf.h"

namespace tandem::synth {

Result<Vocab> open_vocab(const std::string& name, const std::string& models_dir) {
  std::string path = name;
  if (name.find('/') == std::string::npos) path = models_dir + "/" + name;
  if (::access(path.c_str(), R_OK) != 0) {
    return Status::not_found("tokenizer vocabulary '" + name + "' not found (looked for " + path +
                             "); pass --vocab with a vocabulary GGUF such as ggml-vocab-llama-spm.gguf");
  }
  auto g = plan::open_gguf_header(path);
  if (!g.is_ok()) return g.status();
  Vocab v;
  v.path = path;
  v.gguf = std::move(g.value());
  const int64_t id = gguf_find_key(v.gguf.get(), "tokenizer.ggml.tokens");
  if (id < 0 || gguf_get_kv_type(v.gguf.get(), id) != GGUF_TYPE_ARRAY) {
    return Status::invalid_argument(path + ": no tokenizer.ggml.tokens array: not a vocabulary file");
  }
  v.n_tokens = static_cast<uint32_t>(gguf_get_arr_n(v.gguf.get(), id));
  if (v.n_tokens == 0) return Status::invalid_argument(path + ": the vocabulary is empty");
  return v;
}

namespace {

// Appends `extra` entries to the array `key` of `g` (token_type: UNUSED = 5; scores: 0).
void pad_array(gguf_context* g, const char* key, size_t n_old, size_t n_new) {
  const int64_t id = gguf_find_key(g, key);
  if (id < 0 || gguf_get_kv_type(g, id) != GGUF_TYPE_ARRAY || gguf_get_arr_n(g, id) != n_old) return;
  const enum gguf_type type = gguf_get_arr_type(g, id);
  if (type == GGUF_TYPE_STRING) {
    std::vector<std::string> owned;
    owned.reserve(n_new);
    for (size_t i = 0; i < n_old; ++i) owned.emplace_back(gguf_get_arr_str(g, id, i));
    for (size_t i = n_old; i < n_new; ++i) owned.push_back("[PAD" + std::to_string(i) + "]");
    std::vector<const char*> ptrs;
    ptrs.reserve(n_new);
    for (const auto& s : owned) ptrs.push_back(s.c_str());
    gguf_set_arr_str(g, key, ptrs.data(), ptrs.size());
  } else if (type == GGUF_TYPE_INT32) {
    std::vector<int32_t> v(static_cast<const int32_t*>(gguf_get_arr_data(g, id)),
                           static_cast<const int32_t*>(gguf_get_arr_data(g, id)) + n_old);
    v.resize(n_new, 5);
    gguf_set_arr_data(g, key, GGUF_TYPE_INT32, v.data(), v.size());
  } else if (type == GGUF_TYPE_FLOAT32) {
    std::vector<float> v(static_cast<const float*>(gguf_get_arr_data(g, id)),
                         static_cast<const float*>(gguf_get_arr_data(g, id)) + n_old);
    v.resize(n_new, 0.0f);
    gguf_set_arr_data(g, key, GGUF_TYPE_FLOAT32, v.data(), v.size());
  }
}

}  // namespace

void copy_tokenizer(const Vocab& vocab, gguf_context* dst, uint32_t n_vocab) {
  plan::GgufPtr tmp(gguf_init_empty());
  gguf_set_kv(tmp.get(), vocab.gguf.get());
  for (int64_t i = gguf_get_n_kv(tmp.get()) - 1; i >= 0; --i) {
    const std::string key = gguf_get_key(tmp.get(), i);
    if (key.rfind("tokenizer.", 0) != 0) gguf_remove_key(tmp.get(), key.c_str());
  }
  if (n_vocab > vocab.n_tokens) {
    for (const char* key : {"tokenizer.ggml.tokens", "tokenizer.ggml.token_type", "tokenizer.ggml.scores"}) {
      pad_array(tmp.get(), key, vocab.n_tokens, n_vocab);
    }
  }
  gguf_set_kv(dst, tmp.get());
}

}  // namespace tandem::synth
