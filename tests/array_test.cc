// Array: host arrays' copy, move and deep-copy semantics.
#include <gtest/gtest.h>

#include <utility>

#include "core/array.h"

namespace fjit {
namespace {

TEST(Array, CopySharesStorageCloneDoesNot) {
  Array a = Array::from_vector<float>({1, 2, 3});
  Array b = a;
  EXPECT_TRUE(b.shares_storage_with(a));
  Array c = a.clone();
  EXPECT_FALSE(c.shares_storage_with(a));
  EXPECT_TRUE(c.bit_equal(a));
  c.data<float>()[0] = 9;
  EXPECT_EQ(a.data<float>()[0], 1.0f);
}

TEST(Array, MovedFromArrayIsEmptyNotAShapeWithoutStorage) {
  Array a = Array::from_vector<float>({1, 2, 3, 4}, {2, 2});
  const void* storage = a.raw();
  Array b = std::move(a);
  EXPECT_EQ(b.raw(), storage);
  EXPECT_EQ(b.shape(), (Shape{2, 2}));
  // The source reads as a default-constructed Array: no elements, valid, not defined.
  EXPECT_EQ(a.size(), 0);  // NOLINT(bugprone-use-after-move): the state is the contract
  EXPECT_TRUE(a.shape().empty());
  EXPECT_TRUE(a.valid());
  EXPECT_EQ(a.raw(), nullptr);

  Array c = Array::from_vector<int32_t>({7});
  c = std::move(b);
  EXPECT_EQ(c.dtype(), DType::f32);
  EXPECT_EQ(c.raw(), storage);
  EXPECT_EQ(b.size(), 0);  // NOLINT(bugprone-use-after-move)
  EXPECT_EQ(b.raw(), nullptr);
}

TEST(Array, SelfMoveAssignmentKeepsTheValue) {
  Array a = Array::from_vector<float>({5, 6});
  Array& same = a;
  a = std::move(same);
  ASSERT_EQ(a.size(), 2);
  EXPECT_EQ(a.data<float>()[1], 6.0f);
}

}  // namespace
}  // namespace fjit
