// The token embedding moved to a worker (datapath/worker_embedding.h), to ggml's RPC server on the
// CPU in a child process: the table then lives in a weight buffer there with the same bytes, and
// the worker gathers a batch's rows from it; a table that may not move stays as it was, saying why.
#include "datapath/worker_embedding.h"

#include <gtest/gtest.h>

#include <cstdint>
#include <cstring>
#include <vector>

#include "datapath/views_of_an_input.h"
#include "ggml-cpu.h"

namespace tandem::datapath {
namespace {

using namespace test_support;

constexpr int64_t kEmbd = 64, kVocab = 100;

// A token embedding of `type` in the head's host memory.
struct HostTable {
  explicit HostTable(ggml_type type) {
    ggml_init_params p{ggml_tensor_overhead() * 2, nullptr, true};
    ctx = ggml_init(p);
    table = ggml_new_tensor_2d(ctx, type, kEmbd, kVocab);
    buffer = ggml_backend_alloc_ctx_tensors_from_buft(ctx, ggml_backend_cpu_buffer_type());
    bytes.resize(ggml_nbytes(table));
    if (type == GGML_TYPE_F32) {
      std::vector<float> v(kEmbd * kVocab);
      for (size_t i = 0; i < v.size(); ++i) v[i] = static_cast<float>(i % 251) * 0.125f;
      std::memcpy(bytes.data(), v.data(), bytes.size());
    }
    ggml_backend_tensor_set(table, bytes.data(), 0, bytes.size());
  }
  ~HostTable() {
    ggml_backend_buffer_free(buffer);
    ggml_free(ctx);
  }
  ggml_context* ctx = nullptr;
  ggml_tensor* table = nullptr;
  ggml_backend_buffer_t buffer = nullptr;
  std::vector<uint8_t> bytes;
};

// Rows `ids` of `table`, gathered by `backend`.
std::vector<float> gather(ggml_backend_t backend, ggml_tensor* table, const std::vector<int32_t>& ids) {
  ggml_init_params p{ggml_tensor_overhead() * 4 + ggml_graph_overhead(), nullptr, true};
  ggml_context* ctx = ggml_init(p);
  ggml_tensor* rows = ggml_new_tensor_1d(ctx, GGML_TYPE_I32, static_cast<int64_t>(ids.size()));
  ggml_tensor* out = ggml_get_rows(ctx, table, rows);
  ggml_cgraph* graph = ggml_new_graph(ctx);
  ggml_build_forward_expand(graph, out);
  ggml_backend_buffer_t buffer = ggml_backend_alloc_ctx_tensors(ctx, backend);
  ggml_backend_tensor_set(rows, ids.data(), 0, ggml_nbytes(rows));
  std::vector<float> v;
  if (ggml_backend_graph_compute(backend, graph) == GGML_STATUS_SUCCESS) {
    v.resize(ggml_nelements(out));
    ggml_backend_tensor_get(out, v.data(), 0, ggml_nbytes(out));
  }
  ggml_backend_buffer_free(buffer);
  ggml_free(ctx);
  return v;
}

TEST(WorkerEmbedding, TheTableMovesToAWeightBufferOnTheWorkerWhichGathersItsRows) {
  CpuRpcServer server;
  ggml_backend_dev_t worker = rpc_worker(server);
  ASSERT_NE(worker, nullptr) << "ggml's RPC server did not start on " << server.endpoint();
  HostTable host(GGML_TYPE_F32);
  auto moved = move_embedding_to_worker(host.table, /*has_output=*/true, worker);
  ASSERT_TRUE(moved.is_ok()) << moved.status().message();
  ASSERT_TRUE(moved->moved) << moved->why_not;
  EXPECT_EQ(moved->bytes, host.bytes.size());
  ASSERT_NE(moved->buffer, nullptr);
  EXPECT_EQ(host.table->buffer, moved->buffer);
  EXPECT_FALSE(ggml_backend_buffer_is_host(moved->buffer));
  EXPECT_EQ(ggml_backend_buffer_get_usage(moved->buffer), GGML_BACKEND_BUFFER_USAGE_WEIGHTS);
  std::vector<uint8_t> there(host.bytes.size());
  ggml_backend_tensor_get(host.table, there.data(), 0, there.size());
  EXPECT_EQ(there, host.bytes);

  ggml_backend_t backend = ggml_backend_dev_init(worker, nullptr);
  const std::vector<int32_t> ids = {7, 0, 99, 7};
  const std::vector<float> rows = gather(backend, host.table, ids);
  ASSERT_EQ(rows.size(), ids.size() * kEmbd);
  for (size_t r = 0; r < ids.size(); ++r) {
    EXPECT_EQ(
        std::memcmp(rows.data() + r * kEmbd, host.bytes.data() + ids[r] * kEmbd * sizeof(float), kEmbd * sizeof(float)),
        0)
        << "row " << r << " (token " << ids[r] << ")";
  }
  ggml_backend_free(backend);
  // The caller owns the buffer (engine::ModelDeleter frees it after the model): the table goes
  // back to the head's buffer before this test frees both.
  ggml_backend_buffer_free(moved->buffer);
  host.table->buffer = host.buffer;
}

TEST(WorkerEmbedding, ATableThatMayNotMoveStaysWhereItIsSayingWhy) {
  CpuRpcServer server;
  ggml_backend_dev_t worker = rpc_worker(server);
  ASSERT_NE(worker, nullptr) << "ggml's RPC server did not start on " << server.endpoint();
  struct Case {
    ggml_type type;
    bool has_output;
    const char* why;
  };
  for (const Case& c : {Case{GGML_TYPE_F32, false, "output head is its token embedding"},
                        Case{GGML_TYPE_IQ4_NL, true, "may not gather rows of type iq4_nl"}}) {
    HostTable host(c.type);
    void* data = host.table->data;
    auto moved = move_embedding_to_worker(host.table, c.has_output, worker);
    ASSERT_TRUE(moved.is_ok()) << moved.status().message();
    EXPECT_FALSE(moved->moved);
    EXPECT_NE(moved->why_not.find(c.why), std::string::npos) << moved->why_not;
    EXPECT_EQ(moved->buffer, nullptr);
    EXPECT_EQ(host.table->buffer, host.buffer);
    EXPECT_EQ(host.table->data, data);
  }
  auto none = move_embedding_to_worker(nullptr, true, worker);
  ASSERT_TRUE(none.is_ok());
  EXPECT_FALSE(none->moved);
  EXPECT_NE(none->why_not.find("no single token_embd.weight"), std::string::npos) << none->why_not;
}

}  // namespace
}  // namespace tandem::datapath
