// Array: host arrays' copy, move and deep-copy semantics.
#include <gtest/gtest.h>

#include <string>
#include <utility>

#include "core/ir/array.h"

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

TEST(Array, RowsIsAViewThatSharesStorage) {
  Array a = Array::from_vector<float>({0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11}, {4, 3});
  Array v = a.rows(1, 3);
  EXPECT_EQ(v.shape(), (Shape{2, 3}));
  EXPECT_EQ(v.data<float>()[0], 3.0f);
  EXPECT_EQ(v.data<float>()[5], 8.0f);
  v.data<float>()[0] = -1;
  EXPECT_EQ(a.data<float>()[3], -1.0f);
  EXPECT_TRUE(v.shares_storage_with(a));
  EXPECT_FALSE(a.rows(0, 1).shares_storage_with(a.rows(1, 4)));
  EXPECT_TRUE(a.rows(0, 2).shares_storage_with(a.rows(1, 4)));
  EXPECT_EQ(a.rows(2, 2).size(), 0);
  Array kept = a.rows(3, 4);
  a = Array();  // the view keeps the storage alive
  EXPECT_EQ(kept.data<float>()[2], 11.0f);
}

TEST(Array, RowsOutOfRangeNamesTheShape) {
  Array a(DType::f32, {4, 3});
  try {
    a.rows(2, 5);
    FAIL() << "no error";
  } catch (const std::out_of_range& e) {
    EXPECT_NE(std::string(e.what()).find("[4,3]"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("[2, 5)"), std::string::npos) << e.what();
  }
  EXPECT_THROW(a.rows(3, 2), std::out_of_range);
  EXPECT_THROW(Array::scalar(1.0f).rows(0, 1), std::out_of_range);
}

}  // namespace
}  // namespace fjit
