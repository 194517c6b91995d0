// Worker results the head makes itself (datapath/local_casts.h): a worker's f32 cast of an f16 step
// input the scheduler copied to it in this run, or a view of that cast, is answered from the head's
// own bytes, converted exactly; anything else is left to the link.
#include "datapath/local_casts.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <vector>

#include "ggml-alloc.h"
#include "ggml-backend.h"
#include "ggml-cpu.h"
#include "ggml.h"

namespace tandem::datapath {
namespace {

constexpr int64_t kPositions = 64, kTokens = 8;

// A step's f16 mask in host memory, the worker's copy of it, and the worker's f32 cast of that
// copy with a view of its second half (all in CPU buffers here: only the worker's side is faked).
class AMaskAndItsCast : public ::testing::Test {
 protected:
  void SetUp() override {
    ggml_init_params p{ggml_tensor_overhead() * 16, nullptr, true};
    ctx_ = ggml_init(p);
    mask_ = ggml_new_tensor_2d(ctx_, GGML_TYPE_F16, kPositions, kTokens);
    other_ = ggml_new_tensor_2d(ctx_, GGML_TYPE_F16, kPositions, kTokens);
    f32_input_ = ggml_new_tensor_2d(ctx_, GGML_TYPE_F32, kPositions, kTokens);
    copy_ = ggml_new_tensor_2d(ctx_, GGML_TYPE_F16, kPositions, kTokens);
    other_copy_ = ggml_new_tensor_2d(ctx_, GGML_TYPE_F16, kPositions, kTokens);
    f32_copy_ = ggml_new_tensor_2d(ctx_, GGML_TYPE_F32, kPositions, kTokens);
    cast_ = ggml_cast(ctx_, copy_, GGML_TYPE_F32);
    half_ = ggml_view_1d(ctx_, cast_, kPositions * kTokens / 2, sizeof(float) * kPositions * kTokens / 2);
    other_cast_ = ggml_cast(ctx_, other_copy_, GGML_TYPE_F32);
    not_a_cast_ = ggml_scale(ctx_, f32_copy_, 2.0f);
    buffer_ = ggml_backend_alloc_ctx_tensors_from_buft(ctx_, ggml_backend_cpu_buffer_type());
    ASSERT_NE(buffer_, nullptr);
    values_.resize(kPositions * kTokens);
    std::vector<ggml_fp16_t> f16(values_.size());
    for (size_t i = 0; i < values_.size(); ++i) {
      // Values an f16 holds exactly, with the mask's -inf among them.
      values_[i] = (i % 7 == 3) ? -INFINITY : static_cast<float>(static_cast<int>(i % 97) - 48) / 16.0f;
      f16[i] = ggml_fp32_to_fp16(values_[i]);
    }
    ggml_backend_tensor_set(mask_, f16.data(), 0, ggml_nbytes(mask_));
    ggml_backend_tensor_set(other_, f16.data(), 0, ggml_nbytes(other_));
  }
  void TearDown() override {
    ggml_backend_buffer_free(buffer_);
    ggml_free(ctx_);
  }

  // What make_worker_result_here answered for `src` in `epoch`, as floats; empty when it declined.
  std::vector<float> made_here(const ggml_tensor* src, uint64_t epoch) { return made_here(casts_, src, epoch); }
  std::vector<float> made_here(LocalCasts& casts, const ggml_tensor* src, uint64_t epoch) {
    ggml_tensor out{};
    ReuseTable::Identity id;
    if (!casts.make_worker_result_here(src, epoch, &out, &id)) return {};
    EXPECT_EQ(out.buffer, nullptr);
    EXPECT_EQ(out.view_src, nullptr);
    EXPECT_EQ(out.op, GGML_OP_NONE);
    EXPECT_EQ(id.data, out.data);
    EXPECT_EQ(id.epoch, epoch);
    std::vector<float> v(ggml_nelements(src));
    std::memcpy(v.data(), out.data, ggml_nbytes(src));
    return v;
  }

  LocalCasts casts_;
  ggml_context* ctx_ = nullptr;
  ggml_backend_buffer_t buffer_ = nullptr;
  ggml_tensor *mask_ = nullptr, *other_ = nullptr, *f32_input_ = nullptr;
  ggml_tensor *copy_ = nullptr, *other_copy_ = nullptr, *f32_copy_ = nullptr;
  ggml_tensor *cast_ = nullptr, *half_ = nullptr, *other_cast_ = nullptr, *not_a_cast_ = nullptr;
  std::vector<float> values_;
};

bool same_bits(const std::vector<float>& a, const float* b, size_t n) {
  return a.size() == n && std::memcmp(a.data(), b, sizeof(float) * n) == 0;
}

TEST_F(AMaskAndItsCast, TheCastAndAViewOfItAreMadeFromTheHeadsBytesExactly) {
  casts_.note_worker_input(mask_, copy_, 5);
  const std::vector<float> whole = made_here(cast_, 5);
  EXPECT_TRUE(same_bits(whole, values_.data(), values_.size()));
  const std::vector<float> half = made_here(half_, 5);
  EXPECT_TRUE(same_bits(half, values_.data() + values_.size() / 2, values_.size() / 2));
  EXPECT_EQ(casts_.casts(), 2u);
  EXPECT_EQ(casts_.cast_bytes(), ggml_nbytes(cast_) + ggml_nbytes(half_));
}

TEST_F(AMaskAndItsCast, ANewRunForgetsTheLastRunsInputs) {
  casts_.note_worker_input(mask_, copy_, 5);
  EXPECT_FALSE(made_here(cast_, 5).empty());
  EXPECT_TRUE(made_here(cast_, 6).empty()) << "an input of run 5 answered in run 6";
  casts_.note_worker_input(other_, other_copy_, 6);
  EXPECT_TRUE(made_here(cast_, 6).empty()) << "run 6 still knew run 5's input";
  EXPECT_TRUE(same_bits(made_here(other_cast_, 6), values_.data(), values_.size()));
}

TEST_F(AMaskAndItsCast, AnythingElseIsLeftToTheLink) {
  casts_.note_worker_input(mask_, copy_, 9);
  casts_.note_worker_input(f32_input_, f32_copy_, 9);  // not f16: never noted
  EXPECT_TRUE(made_here(other_cast_, 9).empty()) << "a cast of a tensor that is no step input";
  EXPECT_TRUE(made_here(not_a_cast_, 9).empty()) << "an op that is no cast";
  EXPECT_TRUE(made_here(cast_, 0).empty()) << "outside a scheduler run";
  LocalCasts off(/*on=*/false);
  off.note_worker_input(mask_, copy_, 9);
  EXPECT_TRUE(made_here(off, cast_, 9).empty()) << "made here while turned off";
}

}  // namespace
}  // namespace tandem::datapath
