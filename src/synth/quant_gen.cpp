#include "synth/quant_gen.h"

#include <cmath>
#include <cstring>

#include "ggml.h"

namespace tandem::synth {
namespace {

// xoshiro256+ seeded through splitmix64: fast enough to fill tens of GB at disk speed.
class Rng {
 public:
  Rng(uint64_t seed, uint64_t stream) {
    uint64_t x = seed ^ (stream * 0x9E3779B97F4A7C15ull) ^ 0xD1B54A32D192ED03ull;
    for (uint64_t& s : s_) s = splitmix(x);
  }
  uint64_t next() {
    const uint64_t result = s_[0] + s_[3];
    const uint64_t t = s_[1] << 17;
    s_[2] ^= s_[0];
    s_[3] ^= s_[1];
    s_[1] ^= s_[2];
    s_[0] ^= s_[3];
    s_[2] ^= t;
    s_[3] = (s_[3] << 45) | (s_[3] >> 19);
    return result;
  }
  // Uniform in [-1, 1).
  float uniform() { return static_cast<float>(static_cast<int64_t>(next()) >> 11) * (1.0f / 4503599627370496.0f); }
  void fill(uint8_t* p, size_t n) {
    size_t i = 0;
    for (; i + 8 <= n; i += 8) {
      const uint64_t v = next();
      std::memcpy(p + i, &v, 8);
    }
    if (i < n) {
      const uint64_t v = next();
      std::memcpy(p + i, &v, n - i);
    }
  }

 private:
  static uint64_t splitmix(uint64_t& x) {
    uint64_t z = (x += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
  }
  uint64_t s_[4];
};

// A uniform draw in [-a, a) has standard deviation a / sqrt(3).
constexpr float kSqrt3 = 1.7320508f;

float value(Fill fill, float scale, Rng& rng) {
  switch (fill) {
    case Fill::ones:
      return 1.0f + 0.01f * rng.uniform();
    case Fill::zeros:
      return 0.0f;
    case Fill::random:
      break;
  }
  return scale * kSqrt3 * rng.uniform();
}

constexpr int kQK = 256;  // QK_K: super-block of the k-quants and IQ4_XS

// Q8_0: {fp16 d; int8 q[32]}, value = d * q.
void fill_q8_0(Fill fill, float scale, int64_t n_blocks, Rng& rng, uint8_t* out) {
  constexpr size_t kBlock = 2 + 32;
  rng.fill(out, n_blocks * kBlock);
  const float sd = fill == Fill::random ? scale : 0.0f;
  const ggml_fp16_t d = ggml_fp32_to_fp16(sd * kSqrt3 / 127.0f);
  for (int64_t b = 0; b < n_blocks; ++b) {
    uint8_t* blk = out + b * kBlock;
    std::memcpy(blk, &d, 2);
    for (int i = 0; i < 32; ++i) {
      if (static_cast<int8_t>(blk[2 + i]) == -128) blk[2 + i] = 0x81;  // keep q in [-127, 127]
    }
  }
}

// Q4_K: {fp16 d; fp16 dmin; u8 scales[12]; u8 qs[128]}: value = d*sc*q - dmin*m, q in 0..15.
// With dmin = d and m = 7.5*sc every sub-block is centred on zero.
void fill_q4_k(Fill fill, float scale, int64_t n_blocks, Rng& rng, uint8_t* out) {
  constexpr size_t kBlock = 2 + 2 + 12 + kQK / 2;
  rng.fill(out, n_blocks * kBlock);
  const float sd = fill == Fill::random ? scale : 0.0f;
  for (int64_t b = 0; b < n_blocks; ++b) {
    uint8_t* blk = out + b * kBlock;
    uint8_t sc[8], m[8];
    const uint64_t bits = rng.next();
    float mean_sc = 0;
    for (int j = 0; j < 8; ++j) {
      sc[j] = static_cast<uint8_t>(2 + ((bits >> (4 * j)) & 3) * 2);  // 2..8, so m = 7.5 sc <= 60 fits 6 bits
      m[j] = static_cast<uint8_t>(std::lround(7.5 * sc[j]));          // <= 63
      mean_sc += sc[j] / 8.0f;
    }
    // q uniform in 0..15 has standard deviation ~4.6 around 7.5.
    const ggml_fp16_t d = ggml_fp32_to_fp16(sd / (4.6f * mean_sc));
    std::memcpy(blk, &d, 2);
    std::memcpy(blk + 2, &d, 2);
    uint8_t* q = blk + 4;
    std::memset(q, 0, 12);
    for (int j = 0; j < 4; ++j) {
      q[j] = sc[j];
      q[j + 4] = m[j];
    }
    for (int j = 4; j < 8; ++j) {
      q[j + 4] = static_cast<uint8_t>((sc[j] & 0xF) | ((m[j] & 0xF) << 4));
      q[j - 4] |= static_cast<uint8_t>((sc[j] >> 4) << 6);
      q[j] |= static_cast<uint8_t>((m[j] >> 4) << 6);
    }
  }
}

// IQ4_XS: {fp16 d; u16 scales_h; u8 scales_l[4]; u8 qs[128]}: value = d*(ls-32)*kvalues[q], with
// kvalues the IQ4_NL table (standard deviation ~68).
void fill_iq4_xs(Fill fill, float scale, int64_t n_blocks, Rng& rng, uint8_t* out) {
  constexpr size_t kBlock = 2 + 2 + kQK / 64 + kQK / 2;
  rng.fill(out, n_blocks * kBlock);
  const float sd = fill == Fill::random ? scale : 0.0f;
  for (int64_t b = 0; b < n_blocks; ++b) {
    uint8_t* blk = out + b * kBlock;
    uint16_t scales_h = 0;
    uint8_t scales_l[4] = {0, 0, 0, 0};
    const uint64_t bits = rng.next();
    float mean = 0;
    for (int ib = 0; ib < 8; ++ib) {
      const int ls = 36 + static_cast<int>((bits >> (2 * ib)) & 3) * 2;  // ls-32 in {4,6,8,10}
      mean += (ls - 32) / 8.0f;
      scales_l[ib / 2] |= static_cast<uint8_t>((ls & 0xF) << (4 * (ib % 2)));
      scales_h |= static_cast<uint16_t>(((ls >> 4) & 3) << (2 * ib));
    }
    const ggml_fp16_t d = ggml_fp32_to_fp16(sd / (68.0f * mean));
    std::memcpy(blk, &d, 2);
    std::memcpy(blk + 2, &scales_h, 2);
    std::memcpy(blk + 4, scales_l, 4);
  }
}

}  // namespace

bool generatable_type(int type) {
  switch (static_cast<ggml_type>(type)) {
    case GGML_TYPE_F32:
    case GGML_TYPE_F16:
    case GGML_TYPE_Q8_0:
    case GGML_TYPE_Q4_K:
    case GGML_TYPE_IQ4_XS:
      return true;
    default:
      return false;
  }
}

void fill_rows(int type, Fill fill, float scale, int64_t row_len, int64_t n_rows, uint64_t seed, uint64_t stream,
               void* out) {
  Rng rng(seed, stream);
  auto* bytes = static_cast<uint8_t*>(out);
  const int64_t n = row_len * n_rows;
  switch (static_cast<ggml_type>(type)) {
    case GGML_TYPE_F32: {
      auto* f = static_cast<float*>(out);
      for (int64_t i = 0; i < n; ++i) f[i] = value(fill, scale, rng);
      break;
    }
    case GGML_TYPE_F16: {
      auto* h = static_cast<ggml_fp16_t*>(out);
      for (int64_t i = 0; i < n; ++i) h[i] = ggml_fp32_to_fp16(value(fill, scale, rng));
      break;
    }
    case GGML_TYPE_Q8_0:
      fill_q8_0(fill, scale, n / 32, rng, bytes);
      break;
    case GGML_TYPE_Q4_K:
      fill_q4_k(fill, scale, n / kQK, rng, bytes);
      break;
    case GGML_TYPE_IQ4_XS:
      fill_iq4_xs(fill, scale, n / kQK, rng, bytes);
      break;
    default:
      break;  // callers check generatable_type() first
  }
}

}  // namespace tandem::synth
