// The token embedding on the worker that runs the first layers.
//
// libllama keeps the token embedding in the head's host memory: the head's CPU gathers a batch's
// rows, and ggml's scheduler sends them to the device of layer 0, 4 × n_embd bytes per token
// (12.6 MB per 512-token chunk of MiniMax-M3) before that device can start, every chunk. When
// that device is a worker's, the engine moves the table there once, right after the load (from
// the worker's cache when it holds it); the scheduler runs an op where its weight lives, so it
// then sends the worker the token ids (4 bytes per token) and the worker gathers the rows. No
// tensor override is involved, so libllama keeps pipeline parallelism. The planner counts the
// table on that worker (plan/solver.cpp).
#pragma once

#include <cstdint>
#include <string>

#include "common/status.h"

struct ggml_tensor;
struct ggml_backend_device;
struct ggml_backend_buffer;

namespace tandem::datapath {

struct EmbeddingMove {
  bool moved = false;
  std::string why_not;  // when not moved: why (a model without it, a type the device cannot gather, ...)
  uint64_t bytes = 0;   // the table's size
  // When moved: the worker buffer that now holds the table, the caller's to free once the model
  // that owns the tensor is freed.
  ggml_backend_buffer* buffer = nullptr;
};

// Moves a model's token embedding `table` (its token_embd.weight, in the head's host memory) into
// a weight buffer on `device`, an RPC device, uploading its bytes (through the tensor-set hooks: a
// cached load sends a marker). Not moved, with the reason, when the model has no output head of
// its own (`has_output` false: libllama then reads the table for the logits too) or the table's
// type is one a worker may not gather; an error when the worker cannot hold it (the table then
// stays as loaded and usable).
Result<EmbeddingMove> move_embedding_to_worker(ggml_tensor* table, bool has_output, ggml_backend_device* device);

}  // namespace tandem::datapath
