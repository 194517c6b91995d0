// Real tokenizers for synthetic models, taken from the vocabulary GGUFs in llama.cpp's tree.
#pragma once

#include <cstdint>
#include <string>

#include "common/status.h"
#include "plan/gguf_file.h"

namespace tandem::synth {

struct Vocab {
  std::string path;
  plan::GgufPtr gguf;
  uint32_t n_tokens = 0;
};

// Opens `name` (a path, or a file name inside `models_dir`). The error lists where it looked.
Result<Vocab> open_vocab(const std::string& name, const std::string& models_dir);

// Copies every tokenizer.* key of `vocab` into `dst`. When `n_vocab` exceeds the vocabulary, the
// token list is padded with unused "[PAD<i>]" tokens (as conversions pad real models), so the
// embedding and output matrices can take a real model's row count.
void copy_tokenizer(const Vocab& vocab, gguf_context* dst, uint32_t n_vocab);

}  // namespace tandem::synth
