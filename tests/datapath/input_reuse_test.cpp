// The head's side of input reuse (datapath/input_reuse.h): which writes go as markers (their wire
// form is tests/link/markers_test.cpp's).
#include "datapath/input_reuse.h"

#include <gtest/gtest.h>

#include <cstring>
#include <vector>
#include "link/protocol.h"

using tandem::link::kReuseSlots;
using tandem::link::ReuseOp;

namespace tandem::datapath {
namespace {

std::vector<uint8_t> bytes(size_t n, uint8_t seed) {
  std::vector<uint8_t> v(n);
  for (size_t i = 0; i < n; ++i) v[i] = static_cast<uint8_t>(seed + i * 7);
  return v;
}

TEST(ReuseTable, TheSameBytesGoOnceThenAsCopies) {
  ReuseTable t(42);
  const std::vector<uint8_t> mask = bytes(64 * 1024, 1), copy_of_mask = mask;
  auto first = t.route(mask.data(), mask.size());
  ASSERT_TRUE(first.has_value());
  EXPECT_TRUE(first->send_data);
  EXPECT_EQ(first->marker.op, ReuseOp::keep);
  EXPECT_EQ(first->marker.session, 42u);
  EXPECT_EQ(first->marker.bytes, mask.size());
  for (const auto* p : {&mask, &copy_of_mask}) {  // same address, or the same bytes elsewhere
    auto again = t.route(p->data(), p->size());
    ASSERT_TRUE(again.has_value());
    EXPECT_FALSE(again->send_data);
    EXPECT_EQ(again->marker.op, ReuseOp::copy);
    EXPECT_EQ(again->marker.slot, first->marker.slot);
  }
  EXPECT_EQ(t.copies(), 2u);
  EXPECT_EQ(t.bytes_not_sent(), 2u * mask.size());

  // The next step writes other bytes from the same address: sent again, into another slot.
  std::vector<uint8_t> next = mask;
  next[next.size() - 1] ^= 0xff;
  auto changed = t.route(next.data(), next.size());
  ASSERT_TRUE(changed.has_value());
  EXPECT_TRUE(changed->send_data);
  EXPECT_NE(changed->marker.slot, first->marker.slot);
  // Too small or too large for the slots: plain writes.
  const std::vector<uint8_t> small = bytes(kReuseMinBytes - 1, 2);
  EXPECT_FALSE(t.route(small.data(), small.size()).has_value());
  ReuseTable tight(1, 1 << 20);
  const std::vector<uint8_t> large = bytes((1 << 19) + 1, 4);
  EXPECT_FALSE(tight.route(large.data(), large.size()).has_value());
}

// A caller that knows the bytes are a copy of the same tensor within one scheduler run says so,
// and the table takes its word without comparing: a second epoch, another tensor or another
// address is compared as usual.
TEST(ReuseTable, AnIdentityFromTheSameRunNeedsNoComparison) {
  ReuseTable t(3);
  const std::vector<uint8_t> mask = bytes(64 * 1024, 5);
  int tensor = 0;
  const ReuseTable::Identity id{&tensor, 128, mask.data(), 7};
  auto first = t.route(mask.data(), mask.size(), &id);
  ASSERT_TRUE(first && first->send_data);
  std::vector<uint8_t> differs = mask;
  differs[100] ^= 1;  // what a comparison would reject: proof that none was made
  ReuseTable::Identity same = id;
  same.data = differs.data();
  auto taken = t.route(differs.data(), differs.size(), &id);
  ASSERT_TRUE(taken.has_value());
  EXPECT_FALSE(taken->send_data);
  EXPECT_TRUE(taken->identified);
  EXPECT_EQ(taken->marker.slot, first->marker.slot);
  EXPECT_EQ(t.identified(), 1u);
  int n = 0;
  for (auto other :
       {ReuseTable::Identity{&tensor, 128, mask.data(), 8}, ReuseTable::Identity{&tensor, 256, mask.data(), 7},
        ReuseTable::Identity{&same, 128, mask.data(), 7}}) {
    std::vector<uint8_t> fresh = mask;
    fresh[200 + n++] ^= 1;
    auto r = t.route(fresh.data(), fresh.size(), &other);
    ASSERT_TRUE(r.has_value());
    EXPECT_TRUE(r->send_data) << "compared, and the bytes differ";
  }
  EXPECT_EQ(t.identified(), 1u);
  // Bytes recognised by comparison take the new identity, so the run's next copy needs none.
  const ReuseTable::Identity later{&tensor, 0, mask.data(), 9};
  auto compared = t.route(mask.data(), mask.size(), &later);
  ASSERT_TRUE(compared.has_value());
  EXPECT_FALSE(compared->send_data);
  EXPECT_FALSE(compared->identified);
  EXPECT_EQ(t.identified(), 1u);
  ASSERT_TRUE(t.route(mask.data(), mask.size(), &later).has_value());
  EXPECT_EQ(t.identified(), 2u);
}

TEST(ReuseTable, StaysWithinItsBudgetAndSaysWhichSlotsItDropped) {
  const uint64_t budget = 256 * 1024;
  ReuseTable t(7, budget);
  std::vector<std::vector<uint8_t>> inputs;
  for (int i = 0; i < 3; ++i) inputs.push_back(bytes(100 * 1024, static_cast<uint8_t>(10 + i)));
  auto a = t.route(inputs[0].data(), inputs[0].size());
  auto b = t.route(inputs[1].data(), inputs[1].size());
  ASSERT_TRUE(a && b);
  ASSERT_TRUE(t.route(inputs[0].data(), inputs[0].size()).has_value());  // a is now the most recent
  auto c = t.route(inputs[2].data(), inputs[2].size());                  // 300 KiB > budget: b goes
  ASSERT_TRUE(c.has_value());
  EXPECT_EQ(c->marker.drop, 1u << b->marker.slot);
  EXPECT_LE(t.held_bytes(), budget);
  auto b_again = t.route(inputs[1].data(), inputs[1].size());  // now a is the least recent
  ASSERT_TRUE(b_again.has_value());
  EXPECT_TRUE(b_again->send_data) << "a dropped slot is never copied from";
  EXPECT_EQ(b_again->marker.drop, 1u << a->marker.slot);
  auto c_again = t.route(inputs[2].data(), inputs[2].size());
  ASSERT_TRUE(c_again.has_value());
  EXPECT_EQ(c_again->marker.op, ReuseOp::copy);
  EXPECT_EQ(c_again->marker.slot, c->marker.slot);
  EXPECT_LE(t.held_bytes(), budget);

  // More distinct inputs than slots: the least recently used slot is overwritten, never dropped.
  ReuseTable many(8);
  std::vector<std::vector<uint8_t>> distinct;
  for (uint32_t i = 0; i <= kReuseSlots; ++i) distinct.push_back(bytes(kReuseMinBytes, static_cast<uint8_t>(i)));
  std::vector<uint32_t> slots;
  for (const auto& d : distinct) {
    auto r = many.route(d.data(), d.size());
    ASSERT_TRUE(r && r->send_data);
    EXPECT_EQ(r->marker.drop, 0u);
    slots.push_back(r->marker.slot);
  }
  EXPECT_EQ(slots.back(), slots.front());
  auto oldest = many.route(distinct[0].data(), distinct[0].size());
  ASSERT_TRUE(oldest.has_value());
  EXPECT_TRUE(oldest->send_data);
}

}  // namespace
}  // namespace tandem::datapath
