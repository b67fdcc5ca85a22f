// Array: a host array (dtype, shape, contiguous row-major data) that users pass to and get
// back from compiled functions.
//
// Arrays share their storage when copied (like a numpy view of the whole buffer): copying an
// Array is cheap, and `clone()` makes an independent deep copy. Storage made by the
// constructor is 64-byte aligned; a view made by rows() starts at its first row.
#pragma once

#include <cstring>
#include <memory>
#include <span>
#include <stdexcept>
#include <string>
#include <vector>

#include "core/ir/dtype.h"

namespace fjit {

class Array {
 public:
  Array() = default;
  // Storage for num_elements(shape) elements of `dtype`, every byte zero (zeros() relies on
  // it). Throws std::invalid_argument on a negative extent.
  Array(DType dtype, Shape shape);
  // Copies share storage. A moved-from Array is left empty (default-constructed: f32[0],
  // undefined), never with a shape that claims elements it has no storage for.
  Array(const Array&) = default;
  Array& operator=(const Array&) = default;
  Array(Array&& other) noexcept { swap(other); }
  Array& operator=(Array&& other) noexcept {
    if (this != &other) {
      Array().swap(*this);
      swap(other);
    }
    return *this;
  }
  void swap(Array& other) noexcept {
    std::swap(dtype_, other.dtype_);
    shape_.swap(other.shape_);
    std::swap(size_, other.size_);
    std::swap(defined_, other.defined_);
    storage_.swap(other.storage_);
  }

  template <class T>
  static Array from_vector(const std::vector<T>& v, Shape shape) {
    return from_data(v.data(), std::move(shape));
  }
  template <class T>
  static Array from_vector(const std::vector<T>& v) {
    return from_data(v.data(), Shape{static_cast<int64_t>(v.size())});
  }
  // Copies num_elements(shape) elements from `data`.
  template <class T>
  static Array from_data(const T* data, Shape shape) {
    Array a(dtype_of<T>::value, std::move(shape));
    if constexpr (std::is_same_v<T, bool>) {
      auto* d = a.data<uint8_t>();
      for (int64_t i = 0; i < a.size(); ++i) d[i] = data[i] ? 1 : 0;
    } else {
      std::memcpy(a.raw(), data, a.nbytes());
    }
    return a;
  }
  template <class T>
  static Array scalar(T v) { return from_data(&v, Shape{}); }
  static Array full(DType dtype, Shape shape, double value);
  static Array zeros(DType dtype, Shape shape) { return Array(dtype, std::move(shape)); }

  DType dtype() const { return dtype_; }
  const Shape& shape() const { return shape_; }
  int rank() const { return static_cast<int>(shape_.size()); }
  int64_t size() const { return size_; }
  size_t nbytes() const { return static_cast<size_t>(size_) * dtype_size(dtype_); }
  bool valid() const { return storage_ != nullptr || size_ == 0; }
  bool defined() const { return defined_; }

  void* raw() { return storage_.get(); }
  const void* raw() const { return storage_.get(); }
  template <class T> T* data() { check_type<T>(); return static_cast<T*>(raw()); }
  template <class T> const T* data() const { check_type<T>(); return static_cast<const T*>(raw()); }

  // Copies the elements out. bool arrays read as uint8_t or bool.
  template <class T> std::vector<T> to_vector() const {
    if constexpr (std::is_same_v<T, bool>) {
      check_type<uint8_t>();
      auto* d = static_cast<const uint8_t*>(raw());
      return std::vector<bool>(d, d + size_);
    } else {
      check_type<T>();
      auto* d = static_cast<const T*>(raw());
      return std::vector<T>(d, d + size_);
    }
  }
  // The value of a one-element array converted to T.
  template <class T> T item() const { return static_cast<T>(item_as_double()); }
  double item_as_double() const;
  // Element i (flat index) converted to double; for tests and reports.
  double at_as_double(int64_t i) const;

  Array clone() const;
  // Rows [begin, end) along axis 0 as a view: no copy, the storage is shared (writes through
  // either are seen by both) and stays alive while the view does. REQUIRES: rank >= 1,
  // 0 <= begin <= end <= shape()[0]; otherwise std::out_of_range naming the shapes.
  Array rows(int64_t begin, int64_t end) const;
  // True when dtype, shape and every byte of data are equal.
  bool bit_equal(const Array& other) const;
  // True when the two arrays' bytes overlap: copies of one handle, or row views of
  // overlapping rows. Empty arrays overlap nothing.
  bool shares_storage_with(const Array& other) const {
    const auto* a = static_cast<const std::byte*>(raw());
    const auto* b = static_cast<const std::byte*>(other.raw());
    return nbytes() > 0 && other.nbytes() > 0 && a < b + other.nbytes() && b < a + nbytes();
  }
  // A stable 64-bit hash of dtype, shape and data (FNV-1a); used for fingerprints.
  uint64_t fingerprint() const;
  std::string to_string(int max_elements = 16) const;

 private:
  template <class T> void check_type() const {
    if (dtype_of<T>::value != dtype_)
      throw std::invalid_argument(std::string("Array::data: array is ") + dtype_name(dtype_) +
                                  ", requested " + dtype_name(dtype_of<T>::value));
  }
  DType dtype_ = DType::f32;
  Shape shape_;
  int64_t size_ = 0;
  bool defined_ = false;
  std::shared_ptr<std::byte> storage_;
};

}  // namespace fjit
