// Dict<T>: a named, ordered collection passed into and out of traced functions as one
// argument (parameters, optimizer state), like a JAX pytree of arrays. Order is insertion
// order and is part of the compiled signature.
#pragma once

#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

namespace fjit {

template <class T>
class Dict {
 public:
  Dict() = default;
  Dict(std::initializer_list<std::pair<std::string, T>> items) : items_(items) {}

  // Inserts or replaces.
  void set(const std::string& name, T value) {
    for (auto& [k, v] : items_)
      if (k == name) { v = std::move(value); return; }
    items_.emplace_back(name, std::move(value));
  }
  bool contains(const std::string& name) const {
    for (const auto& kv : items_)
      if (kv.first == name) return true;
    return false;
  }
  const T& at(const std::string& name) const {
    for (const auto& kv : items_)
      if (kv.first == name) return kv.second;
    throw std::out_of_range("Dict: no entry named '" + name + "' (have: " + names_str() + ")");
  }
  T& at(const std::string& name) {
    return const_cast<T&>(static_cast<const Dict&>(*this).at(name));
  }
  const T& operator[](const std::string& name) const { return at(name); }
  // Inserts a default value when absent, like std::map.
  T& operator[](const std::string& name) {
    for (auto& kv : items_)
      if (kv.first == name) return kv.second;
    items_.emplace_back(name, T());
    return items_.back().second;
  }

  size_t size() const { return items_.size(); }
  bool empty() const { return items_.empty(); }
  auto begin() { return items_.begin(); }
  auto end() { return items_.end(); }
  auto begin() const { return items_.begin(); }
  auto end() const { return items_.end(); }
  const std::string& name(size_t i) const { return items_[i].first; }
  const T& value(size_t i) const { return items_[i].second; }
  T& value(size_t i) { return items_[i].second; }
  std::vector<std::string> names() const {
    std::vector<std::string> n;
    for (const auto& kv : items_) n.push_back(kv.first);
    return n;
  }

  // Applies f to every value, keeping names: Dict<U> where U = f(T).
  template <class F>
  auto map(F f) const -> Dict<decltype(f(std::declval<const T&>()))> {
    Dict<decltype(f(std::declval<const T&>()))> out;
    for (const auto& [k, v] : items_) out.set(k, f(v));
    return out;
  }

 private:
  std::string names_str() const {
    std::string s;
    for (const auto& kv : items_) s += (s.empty() ? "" : ", ") + kv.first;
    return s;
  }
  std::vector<std::pair<std::string, T>> items_;
};

class Tensor;
class Array;
using TensorDict = Dict<Tensor>;
using Params = TensorDict;
using ArrayDict = Dict<Array>;

}  // namespace fjit
