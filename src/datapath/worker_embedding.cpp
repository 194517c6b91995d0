#include "datapath/worker_embedding.h"

#include <string>

#include "common/units.h"
#include "ggml-backend.h"
#include "ggml.h"

namespace tandem::datapath {
namespace {

// Types every ggml backend a worker runs gathers rows of (ggml-cuda's GET_ROWS list; the CPU
// gathers any). IQ4_NL and MXFP4 are left out: CUDA gathers them only for some row lengths.
bool gatherable(ggml_type t) {
  switch (t) {
    case GGML_TYPE_F32:
    case GGML_TYPE_F16:
    case GGML_TYPE_BF16:
    case GGML_TYPE_Q4_0:
    case GGML_TYPE_Q4_1:
    case GGML_TYPE_Q5_0:
    case GGML_TYPE_Q5_1:
    case GGML_TYPE_Q8_0:
    case GGML_TYPE_Q2_K:
    case GGML_TYPE_Q3_K:
    case GGML_TYPE_Q4_K:
    case GGML_TYPE_Q5_K:
    case GGML_TYPE_Q6_K:
    case GGML_TYPE_IQ2_XXS:
    case GGML_TYPE_IQ2_XS:
    case GGML_TYPE_IQ2_S:
    case GGML_TYPE_IQ3_XXS:
    case GGML_TYPE_IQ3_S:
    case GGML_TYPE_IQ1_S:
    case GGML_TYPE_IQ1_M:
    case GGML_TYPE_IQ4_XS:
      return true;
    default:
      return false;
  }
}

}  // namespace

Result<EmbeddingMove> move_embedding_to_worker(ggml_tensor* table, bool has_output, ggml_backend_device* device) {
  EmbeddingMove m;
  if (table == nullptr) {
    m.why_not = "the model has no single token_embd.weight";
    return m;
  }
  // Without its own output head, libllama makes the output a second copy of the embedding under
  // the same name; that copy goes with the output device and must stay there.
  if (!has_output) {
    m.why_not = "the model's output head is its token embedding";
    return m;
  }
  m.bytes = ggml_nbytes(table);
  if (!gatherable(table->type)) {
    m.why_not = std::string("a worker may not gather rows of type ") + ggml_type_name(table->type);
    return m;
  }
  if (table->buffer == nullptr || !ggml_backend_buffer_is_host(table->buffer) || table->view_src != nullptr) {
    m.why_not = "the token embedding is not in the head's host memory";
    return m;
  }
  ggml_backend_buffer_type_t buft = ggml_backend_dev_buffer_type(device);
  const size_t size = ggml_backend_buft_get_alloc_size(buft, table);
  ggml_backend_buffer_t buffer = ggml_backend_buft_alloc_buffer(buft, size);
  if (buffer == nullptr) {
    return Status::resource_exhausted(std::string(ggml_backend_dev_name(device)) + ": cannot allocate " +
                                      format_bytes(size) + " for the token embedding");
  }
  ggml_backend_buffer_set_usage(buffer, GGML_BACKEND_BUFFER_USAGE_WEIGHTS);
  ggml_backend_buffer_t host_buffer = table->buffer;
  void* host = table->data;
  table->buffer = nullptr;
  table->data = nullptr;
  if (ggml_backend_tensor_alloc(buffer, table, ggml_backend_buffer_get_base(buffer)) != GGML_STATUS_SUCCESS) {
    table->buffer = host_buffer;
    table->data = host;
    ggml_backend_buffer_free(buffer);
    return Status::internal(std::string(ggml_backend_dev_name(device)) + ": cannot place the token embedding");
  }
  // The scheduler now gathers rows on the worker; the host bytes (libllama's mapping of the file)
  // stay where they were, unused.
  ggml_backend_tensor_set(table, host, 0, m.bytes);
  m.buffer = buffer;
  m.moved = true;
  return m;
}

}  // namespace tandem::datapath
