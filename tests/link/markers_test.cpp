// The data path's markers (link/protocol.h): each round-trips and refuses anything that is not one.
// The runs encoding of step inputs: a causal mask comes back bit for bit from a small fraction of
// its size, data without runs is not encoded, and anything that is not a whole, consistent
// encoding is refused before a byte is written.
#include "link/protocol.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <vector>

using tandem::link::CachedMarker;
using tandem::link::decode_word_runs;
using tandem::link::encode_cached_marker;
using tandem::link::encode_reuse_marker;
using tandem::link::encode_word_runs;
using tandem::link::kReuseMarkerSize;
using tandem::link::kReuseSlots;
using tandem::link::kWordRunsHeader;
using tandem::link::kWordRunsMinBytes;
using tandem::link::parse_cached_marker;
using tandem::link::parse_reuse_marker;
using tandem::link::ReuseMarker;
using tandem::link::ReuseOp;
using tandem::link::word_runs_size;

namespace tandem {
namespace {

TEST(CachedMarker, RoundTripsAndRejectsAnythingElse) {
  const auto m = encode_cached_marker(CachedMarker{0xfeedULL, 99});
  auto parsed = parse_cached_marker(m.data(), m.size());
  ASSERT_TRUE(parsed.has_value());
  EXPECT_EQ(parsed->hash, 0xfeedULL);
  EXPECT_EQ(parsed->bytes, 99u);
  EXPECT_FALSE(parse_cached_marker(m.data(), m.size() - 1).has_value());
  auto bad = m;
  bad[15] ^= 1;  // magic
  EXPECT_FALSE(parse_cached_marker(bad.data(), bad.size()).has_value());
}

TEST(KvShareMarker, RoundTripsAndRejectsAnythingElse) {
  using link::KvShareMarker;
  using link::KvShareOp;
  const KvShareMarker m{KvShareOp::restore, 77, 0xfeedface12345678ULL, 4096, 1 << 20, 8192};
  const auto wire = link::encode_kv_share_marker(m);
  ASSERT_EQ(wire.size(), link::kKvShareMarkerSize);
  auto back = link::parse_kv_share_marker(wire.data(), wire.size());
  ASSERT_TRUE(back.has_value());
  EXPECT_EQ(back->op, KvShareOp::restore);
  EXPECT_EQ(back->key, 77u);
  EXPECT_EQ(back->session, 0xfeedface12345678ULL);
  EXPECT_EQ(back->stream, 4096u);
  EXPECT_EQ(back->offset, 1u << 20);
  EXPECT_EQ(back->bytes, 8192u);
  EXPECT_FALSE(link::parse_kv_share_marker(wire.data(), wire.size() - 1));
  auto bad = wire;
  bad[3] ^= 1;  // magic
  EXPECT_FALSE(link::parse_kv_share_marker(bad.data(), bad.size()));
  bad = wire;
  bad[16] = 9;  // op
  EXPECT_FALSE(link::parse_kv_share_marker(bad.data(), bad.size()));
  bad = wire;
  bad[21] = 1;  // the zeros after the op
  EXPECT_FALSE(link::parse_kv_share_marker(bad.data(), bad.size()));
  // A save or restore of nothing is no marker; a drop or query carries no region.
  EXPECT_FALSE(link::parse_kv_share_marker(link::encode_kv_share_marker({KvShareOp::save, 1, 1, 0, 0, 0}).data(),
                                           link::kKvShareMarkerSize));
  EXPECT_TRUE(link::parse_kv_share_marker(link::encode_kv_share_marker({KvShareOp::drop, 1, 1, 0, 0, 0}).data(),
                                          link::kKvShareMarkerSize));

  const auto answer = link::encode_kv_share_answer({true, 3, 123456789});
  auto a = link::parse_kv_share_answer(answer.data(), answer.size());
  ASSERT_TRUE(a.has_value());
  EXPECT_TRUE(a->held);
  EXPECT_EQ(a->faults, 3u);
  EXPECT_EQ(a->bytes, 123456789u);
  auto tensor_data = answer;
  tensor_data[0] ^= 1;  // what a server that is not a tandem worker sends back: tensor bytes
  EXPECT_FALSE(link::parse_kv_share_answer(tensor_data.data(), tensor_data.size()));
  tensor_data = answer;
  tensor_data[16] = 2;  // held is 0 or 1
  EXPECT_FALSE(link::parse_kv_share_answer(tensor_data.data(), tensor_data.size()));
}

TEST(ReuseMarker, RoundTripsAndRejectsAnythingElse) {
  const ReuseMarker m{ReuseOp::copy, 5, 1234567, 0xfeedface12345678ULL, 0};
  const auto wire = encode_reuse_marker(m);
  auto back = parse_reuse_marker(wire.data(), wire.size());
  ASSERT_TRUE(back.has_value());
  EXPECT_EQ(back->op, ReuseOp::copy);
  EXPECT_EQ(back->slot, 5u);
  EXPECT_EQ(back->bytes, 1234567u);
  EXPECT_EQ(back->session, 0xfeedface12345678ULL);
  EXPECT_FALSE(parse_reuse_marker(wire.data(), wire.size() - 1));
  auto bad = wire;
  bad[0] ^= 1;  // magic
  EXPECT_FALSE(parse_reuse_marker(bad.data(), bad.size()));
  bad = wire;
  bad[16] = 9;  // op
  EXPECT_FALSE(parse_reuse_marker(bad.data(), bad.size()));
  bad = wire;
  bad[20] = kReuseSlots;  // slot
  EXPECT_FALSE(parse_reuse_marker(bad.data(), bad.size()));
  bad = wire;
  bad[41] = 1;  // a drop bit past the slots
  EXPECT_FALSE(parse_reuse_marker(bad.data(), bad.size()));
  std::vector<uint8_t> data(kReuseMarkerSize);
  for (size_t i = 0; i < data.size(); ++i)
    data[i] = static_cast<uint8_t>(3 + i * 7);  // ordinary data of a marker's size
  EXPECT_FALSE(parse_reuse_marker(data.data(), data.size()));
}

// A causal f32 mask of `tokens` rows over `positions` cells: 0 up to the row's position, -inf after.
std::vector<float> causal_mask(int tokens, int positions, int first) {
  std::vector<float> m(static_cast<size_t>(tokens) * positions);
  for (int t = 0; t < tokens; ++t) {
    for (int p = 0; p < positions; ++p) m[static_cast<size_t>(t) * positions + p] = p <= first + t ? 0.0f : -INFINITY;
  }
  return m;
}

TEST(WordRuns, ACausalMaskComesBackBitForBitFromAFractionOfItsSize) {
  const std::vector<float> mask = causal_mask(512, 4096, 3000);
  const size_t n = mask.size() * sizeof(float);
  auto enc = encode_word_runs(mask.data(), n);
  ASSERT_TRUE(enc.has_value());
  EXPECT_LT(enc->size(), n / 500) << enc->size() << " of " << n;
  ASSERT_EQ(word_runs_size(enc->data(), enc->size()), n);
  std::vector<float> back(mask.size(), 1.0f);
  ASSERT_TRUE(decode_word_runs(enc->data(), enc->size(), back.data(), n));
  EXPECT_EQ(std::memcmp(back.data(), mask.data(), n), 0);
}

TEST(WordRuns, HalfPrecisionMasksAndOddWordsKeepTheirBits) {
  // f16 0 and -inf pairs, a word mixing both where a row changes, a NaN and -0.0 among zeros.
  std::vector<uint16_t> h(70000, 0);
  for (size_t i = 33333; i < h.size(); ++i) h[i] = 0xFC00;
  std::vector<uint8_t> bytes(h.size() * 2);
  std::memcpy(bytes.data(), h.data(), bytes.size());
  const float nan = std::numeric_limits<float>::quiet_NaN(), negzero = -0.0f;
  std::memcpy(bytes.data() + 40, &nan, 4);
  std::memcpy(bytes.data() + 80, &negzero, 4);
  auto enc = encode_word_runs(bytes.data(), bytes.size());
  ASSERT_TRUE(enc.has_value());
  std::vector<uint8_t> back(bytes.size());
  ASSERT_TRUE(decode_word_runs(enc->data(), enc->size(), back.data(), back.size()));
  EXPECT_EQ(back, bytes);
}

TEST(WordRuns, DataWithoutRunsOrTooSmallIsNotEncoded) {
  std::mt19937 rng(7);
  std::vector<uint32_t> noise(1 << 16);
  for (auto& w : noise) w = rng();
  EXPECT_FALSE(encode_word_runs(noise.data(), noise.size() * 4).has_value());
  const std::vector<float> small(kWordRunsMinBytes / 4 - 1, 0.0f);
  EXPECT_FALSE(encode_word_runs(small.data(), small.size() * 4).has_value());
  const std::vector<uint8_t> odd(kWordRunsMinBytes + 2, 0);
  EXPECT_FALSE(encode_word_runs(odd.data(), odd.size()).has_value());
  // Mostly runs, but not enough of them: more than an eighth of the size.
  std::vector<uint32_t> pairs(1 << 16);
  for (size_t i = 0; i < pairs.size(); ++i) pairs[i] = static_cast<uint32_t>(i / 4);
  EXPECT_FALSE(encode_word_runs(pairs.data(), pairs.size() * 4).has_value());
}

TEST(WordRuns, AnythingButAWholeConsistentEncodingIsRefused) {
  const std::vector<float> mask = causal_mask(64, 1024, 100);
  const size_t n = mask.size() * sizeof(float);
  const std::vector<uint8_t> enc = encode_word_runs(mask.data(), n).value();
  std::vector<uint8_t> out(n);
  // Plain data, a cut encoding, one with a byte more.
  EXPECT_FALSE(word_runs_size(mask.data(), n).has_value());
  EXPECT_FALSE(word_runs_size(enc.data(), enc.size() - 8).has_value());
  std::vector<uint8_t> longer = enc;
  longer.push_back(0);
  EXPECT_FALSE(word_runs_size(longer.data(), longer.size()).has_value());
  // Runs that overrun or fall short of the stated size, or an empty run.
  std::vector<uint8_t> bad = enc;
  bad[kWordRunsHeader] += 1;
  EXPECT_FALSE(word_runs_size(bad.data(), bad.size()).has_value());
  EXPECT_FALSE(decode_word_runs(bad.data(), bad.size(), out.data(), n));
  bad = enc;
  bad[16] += 4;  // the stated size, one word more
  EXPECT_FALSE(word_runs_size(bad.data(), bad.size()).has_value());
  bad = enc;
  std::memset(bad.data() + kWordRunsHeader, 0, 4);
  EXPECT_FALSE(word_runs_size(bad.data(), bad.size()).has_value());
  // The right encoding into the wrong room.
  EXPECT_FALSE(decode_word_runs(enc.data(), enc.size(), out.data(), n - 4));
  EXPECT_TRUE(decode_word_runs(enc.data(), enc.size(), out.data(), n));
}

}  // namespace
}  // namespace tandem
