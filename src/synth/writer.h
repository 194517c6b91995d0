// Writes a synthetic model GGUF to disk, streaming tensor data as it is generated.
#pragma once

#include <cstdint>
#include <functional>
#include <string>

#include "common/status.h"
#include "synth/model_spec.h"

namespace tandem::synth {

struct SynthOptions {
  std::string models_dir;  // llama.cpp's models/ folder (vocabularies, templates/); "" = built-in path
  int threads = 0;         // generator threads; 0 = hardware concurrency
  // Called now and then with bytes written so far and the total; may be empty.
  std::function<void(uint64_t done, uint64_t total)> progress;
};

struct SynthResult {
  std::string path;
  uint64_t file_bytes = 0;
  uint64_t n_params = 0;
  uint64_t active_bytes_per_token = 0;
  double seconds = 0;  // wall time of the whole write, flushed to disk
  double bytes_per_s = 0;
};

// Writes `spec` to `path`. The data goes to "<path>.part" first and is renamed into place only
// when complete and flushed, so an interrupted run never leaves a file that looks whole.
// Errors name the vocabulary or template that is missing, or the I/O call that failed and why.
Result<SynthResult> write_model(const ModelSpec& spec, const std::string& path, const SynthOptions& options);

// llama.cpp's models/ folder as found at build time.
std::string default_models_dir();

}  // namespace tandem::synth
