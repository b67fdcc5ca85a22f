#include "core/ir/array.h"

#include "core/ir/convert.h"

#include <cstdlib>
#include <sstream>

namespace fjit {
namespace {
std::shared_ptr<std::byte> allocate(size_t nbytes) {
  size_t rounded = ((nbytes + 63) / 64) * 64;
  if (rounded == 0) rounded = 64;
  void* p = std::aligned_alloc(64, rounded);
  if (!p) throw std::bad_alloc();
  std::memset(p, 0, rounded);
  return std::shared_ptr<std::byte>(static_cast<std::byte*>(p), [](std::byte* q) { std::free(q); });
}

}  // namespace

Array::Array(DType dtype, Shape shape)
    : dtype_(dtype), shape_(std::move(shape)), size_(num_elements(shape_)), defined_(true) {
  for (int64_t d : shape_)
    if (d < 0) throw std::invalid_argument("Array: negative extent in shape " + shape_str(shape_));
  storage_ = allocate(nbytes());
}

Array Array::full(DType dtype, Shape shape, double value) {
  Array a(dtype, std::move(shape));
  for (int64_t i = 0; i < a.size_; ++i) set_element_from_double(dtype, a.raw(), i, value);
  return a;
}

double Array::at_as_double(int64_t i) const {
  return element_as_double(dtype_, raw(), i);
}

double Array::item_as_double() const {
  if (size_ != 1)
    throw std::invalid_argument("Array::item: array " + type_str(dtype_, shape_) +
                                " does not hold exactly one element");
  return at_as_double(0);
}

Array Array::rows(int64_t begin, int64_t end) const {
  if (rank() == 0 || begin < 0 || begin > end || end > shape_[0])
    throw std::out_of_range("Array::rows: rows [" + std::to_string(begin) + ", " + std::to_string(end) +
                            ") of an array of shape " + shape_str(shape_));
  Array view;
  view.dtype_ = dtype_;
  view.shape_ = shape_;
  view.shape_[0] = end - begin;
  view.size_ = num_elements(view.shape_);
  view.defined_ = true;
  const size_t row_bytes = shape_[0] ? nbytes() / shape_[0] : 0;
  view.storage_ = std::shared_ptr<std::byte>(storage_, storage_.get() + begin * row_bytes);
  return view;
}

Array Array::clone() const {
  if (!defined_) return Array();
  Array out(dtype_, shape_);
  std::memcpy(out.raw(), raw(), nbytes());
  return out;
}

bool Array::bit_equal(const Array& o) const {
  return dtype_ == o.dtype_ && shape_ == o.shape_ && std::memcmp(raw(), o.raw(), nbytes()) == 0;
}

uint64_t Array::fingerprint() const {
  uint64_t h = 1469598103934665603ull;
  auto mix = [&h](const void* p, size_t n) {
    auto* b = static_cast<const unsigned char*>(p);
    for (size_t i = 0; i < n; ++i) h = (h ^ b[i]) * 1099511628211ull;
  };
  uint8_t t = static_cast<uint8_t>(dtype_);
  mix(&t, 1);
  for (int64_t d : shape_) mix(&d, sizeof d);
  mix(raw(), nbytes());
  return h;
}

std::string Array::to_string(int max_elements) const {
  std::ostringstream os;
  os << type_str(dtype_, shape_) << "{";
  for (int64_t i = 0; i < size_ && i < max_elements; ++i) os << (i ? ", " : "") << at_as_double(i);
  if (size_ > max_elements) os << ", ...";
  os << "}";
  return os.str();
}

}  // namespace fjit
