#include "synth/quant_gen.h"

#include <cmath>
#include <cstring>
#include <vector>

#include <gtest/gtest.h>

#include "ggml-cpu.h"
#include "ggml.h"

namespace tandem::synth {
namespace {

// Generates rows of `type`, decodes them with ggml's own dequantizer and checks the values.
void check_type(ggml_type type, Fill fill, float scale) {
  const int64_t row_len = 1024, rows = 64;
  std::vector<uint8_t> data(ggml_row_size(type, row_len) * rows);
  fill_rows(type, fill, scale, row_len, rows, /*seed=*/7, /*stream=*/3, data.data());
  std::vector<float> values(row_len * rows);
  const auto* traits = ggml_get_type_traits(type);
  if (type == GGML_TYPE_F32) {
    std::memcpy(values.data(), data.data(), data.size());
  } else {
    ASSERT_NE(traits->to_float, nullptr);
    traits->to_float(data.data(), values.data(), row_len * rows);
  }
  double sum = 0, sum2 = 0;
  for (float v : values) {
    ASSERT_TRUE(std::isfinite(v)) << ggml_type_name(type);
    sum += v;
    sum2 += double(v) * v;
  }
  const double n = static_cast<double>(values.size());
  const double mean = sum / n, sd = std::sqrt(sum2 / n - mean * mean);
  if (fill == Fill::random) {
    EXPECT_NEAR(mean, 0.0, scale * 0.1) << ggml_type_name(type);
    EXPECT_GT(sd, scale * 0.6) << ggml_type_name(type);
    EXPECT_LT(sd, scale * 1.6) << ggml_type_name(type);
  } else if (fill == Fill::zeros) {
    EXPECT_EQ(sd, 0.0);
    EXPECT_EQ(mean, 0.0);
  } else {
    EXPECT_NEAR(mean, 1.0, 0.01);
  }
}

TEST(QuantGen, EveryTypeDecodesToFiniteValuesOfTheRequestedSpread) {
  for (ggml_type t : {GGML_TYPE_F32, GGML_TYPE_F16, GGML_TYPE_Q8_0, GGML_TYPE_Q4_K, GGML_TYPE_IQ4_XS}) {
    SCOPED_TRACE(ggml_type_name(t));
    ASSERT_TRUE(generatable_type(t));
    check_type(t, Fill::random, 0.05f);
    check_type(t, Fill::zeros, 0.0f);
  }
  check_type(GGML_TYPE_F32, Fill::ones, 0.0f);
  check_type(GGML_TYPE_F16, Fill::ones, 0.0f);
}

TEST(QuantGen, SameSeedAndStreamGiveSameBytes) {
  const ggml_type t = GGML_TYPE_IQ4_XS;
  std::vector<uint8_t> a(ggml_row_size(t, 512) * 4), b(a.size()), c(a.size());
  fill_rows(t, Fill::random, 0.1f, 512, 4, 1, 9, a.data());
  fill_rows(t, Fill::random, 0.1f, 512, 4, 1, 9, b.data());
  fill_rows(t, Fill::random, 0.1f, 512, 4, 1, 10, c.data());
  EXPECT_EQ(a, b);
  EXPECT_NE(a, c);
}

TEST(QuantGen, RefusesTypesItCannotGenerate) {
  EXPECT_FALSE(generatable_type(GGML_TYPE_Q2_K));
  EXPECT_FALSE(generatable_type(GGML_TYPE_I32));
}

}  // namespace
}  // namespace tandem::synth
