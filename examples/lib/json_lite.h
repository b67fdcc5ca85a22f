// json_lite: just enough JSON to read and write a safetensors header.
//
// Promises: parse() accepts RFC 8259 JSON restricted to what such headers hold — objects,
// arrays, strings (all escapes, \uXXXX with surrogate pairs, written out as UTF-8), integers
// that fit in int64, true, false, null — and rejects everything else (fractions, exponents,
// trailing garbage, nesting deeper than 64) with json::ParseError, whose message gives the
// byte offset. Object members keep their order and duplicates are kept, so a caller can
// report them. dump() writes compact JSON that parse() reads back to an equal Value.
// Bytes >= 0x80 in strings are passed through as they are (not checked to be UTF-8).
#pragma once

#include <cstdint>
#include <stdexcept>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace fjit::io::json {

struct ParseError : std::runtime_error {
  using std::runtime_error::runtime_error;
};

struct Value {
  enum class Kind { null, boolean, integer, string, array, object };
  Kind kind = Kind::null;
  bool boolean = false;
  int64_t integer = 0;
  std::string string;
  std::vector<Value> items;                            // array elements
  std::vector<std::pair<std::string, Value>> members;  // object members, in order

  static Value of_int(int64_t v);
  static Value of_string(std::string v);
  static Value array();
  static Value object();

  bool is(Kind k) const { return kind == k; }
  // The first member named `key`, or nullptr (also when this is not an object).
  const Value* find(std::string_view key) const;
};

// "object", "integer", ...: for error messages.
const char* kind_name(Value::Kind k);

Value parse(std::string_view text);
std::string dump(const Value& v);
// `s` as a JSON string literal, quotes included.
std::string quote(std::string_view s);

}  // namespace fjit::io::json
