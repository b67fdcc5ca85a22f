#include "lib/json_lite.h"

#include <cstdio>
#include <limits>

namespace fjit::io::json {
namespace {

// Headers nest three levels deep; the limit only stops hostile input from recursing the
// parser off the stack.
constexpr int kMaxDepth = 64;

class Parser {
 public:
  explicit Parser(std::string_view text) : s_(text) {}

  Value document() {
    Value v = value(0);
    skip_space();
    if (pos_ != s_.size()) fail("unexpected " + describe_here() + " after the JSON value");
    return v;
  }

 private:
  [[noreturn]] void fail(const std::string& what) const {
    throw ParseError("JSON error at byte " + std::to_string(pos_) + ": " + what);
  }

  std::string describe_here() const {
    if (pos_ >= s_.size()) return "end of input";
    unsigned char c = static_cast<unsigned char>(s_[pos_]);
    if (c >= 0x20 && c < 0x7f) return std::string("'") + static_cast<char>(c) + "'";
    char buf[16];
    std::snprintf(buf, sizeof buf, "byte 0x%02x", c);
    return buf;
  }

  void skip_space() {
    while (pos_ < s_.size() &&
           (s_[pos_] == ' ' || s_[pos_] == '\t' || s_[pos_] == '\n' || s_[pos_] == '\r'))
      ++pos_;
  }

  void expect(char c) {
    skip_space();
    if (pos_ >= s_.size() || s_[pos_] != c)
      fail(std::string("expected '") + c + "', found " + describe_here());
    ++pos_;
  }

  bool consume(char c) {
    skip_space();
    if (pos_ < s_.size() && s_[pos_] == c) {
      ++pos_;
      return true;
    }
    return false;
  }

  Value value(int depth) {
    if (depth > kMaxDepth) fail("nesting deeper than " + std::to_string(kMaxDepth));
    skip_space();
    if (pos_ >= s_.size()) fail("expected a value, found end of input");
    char c = s_[pos_];
    if (c == '{') return object(depth);
    if (c == '[') return array(depth);
    if (c == '"') return Value::of_string(string());
    if (c == '-' || (c >= '0' && c <= '9')) return Value::of_int(integer());
    for (const char* word : {"true", "false", "null"}) {
      if (s_.substr(pos_).starts_with(word)) {
        pos_ += std::string_view(word).size();
        Value v;
        v.kind = word[0] == 'n' ? Value::Kind::null : Value::Kind::boolean;
        v.boolean = word[0] == 't';
        return v;
      }
    }
    fail("expected a value, found " + describe_here());
  }

  Value object(int depth) {
    Value v = Value::object();
    ++pos_;  // '{'
    if (consume('}')) return v;
    do {
      skip_space();
      if (pos_ >= s_.size() || s_[pos_] != '"')
        fail("expected a member name in quotes, found " + describe_here());
      std::string key = string();
      expect(':');
      v.members.emplace_back(std::move(key), value(depth + 1));
    } while (consume(','));
    expect('}');
    return v;
  }

  Value array(int depth) {
    Value v = Value::array();
    ++pos_;  // '['
    if (consume(']')) return v;
    do v.items.push_back(value(depth + 1));
    while (consume(','));
    expect(']');
    return v;
  }

  int64_t integer() {
    const size_t start = pos_;
    bool negative = s_[pos_] == '-';
    if (negative) ++pos_;
    if (pos_ >= s_.size() || s_[pos_] < '0' || s_[pos_] > '9') fail("expected a digit after '-'");
    if (s_[pos_] == '0' && pos_ + 1 < s_.size() && s_[pos_ + 1] >= '0' && s_[pos_ + 1] <= '9')
      fail("numbers may not have leading zeros");
    // Accumulate negatively so that INT64_MIN is reachable without overflow.
    int64_t v = 0;
    constexpr int64_t kMin = std::numeric_limits<int64_t>::min();
    while (pos_ < s_.size() && s_[pos_] >= '0' && s_[pos_] <= '9') {
      int digit = s_[pos_] - '0';
      if (v < (kMin + digit) / 10) {
        pos_ = start;
        fail("integer does not fit in 64 bits");
      }
      v = v * 10 - digit;
      ++pos_;
    }
    if (pos_ < s_.size() && (s_[pos_] == '.' || s_[pos_] == 'e' || s_[pos_] == 'E'))
      fail("only integers are supported (no fractions or exponents)");
    if (negative) return v;
    if (v == kMin) {
      pos_ = start;
      fail("integer does not fit in 64 bits");
    }
    return -v;
  }

  unsigned hex4() {
    if (pos_ + 4 > s_.size()) fail("\\u escape needs four hex digits");
    unsigned v = 0;
    for (int i = 0; i < 4; ++i) {
      char c = s_[pos_++];
      v <<= 4;
      if (c >= '0' && c <= '9') v |= c - '0';
      else if (c >= 'a' && c <= 'f') v |= c - 'a' + 10;
      else if (c >= 'A' && c <= 'F') v |= c - 'A' + 10;
      else fail("\\u escape needs four hex digits");
    }
    return v;
  }

  static void append_utf8(std::string& out, uint32_t cp) {
    if (cp < 0x80) {
      out += static_cast<char>(cp);
    } else if (cp < 0x800) {
      out += static_cast<char>(0xc0 | (cp >> 6));
      out += static_cast<char>(0x80 | (cp & 0x3f));
    } else if (cp < 0x10000) {
      out += static_cast<char>(0xe0 | (cp >> 12));
      out += static_cast<char>(0x80 | ((cp >> 6) & 0x3f));
      out += static_cast<char>(0x80 | (cp & 0x3f));
    } else {
      out += static_cast<char>(0xf0 | (cp >> 18));
      out += static_cast<char>(0x80 | ((cp >> 12) & 0x3f));
      out += static_cast<char>(0x80 | ((cp >> 6) & 0x3f));
      out += static_cast<char>(0x80 | (cp & 0x3f));
    }
  }

  std::string string() {
    ++pos_;  // opening quote
    std::string out;
    for (;;) {
      if (pos_ >= s_.size()) fail("unterminated string");
      char c = s_[pos_++];
      if (c == '"') return out;
      if (static_cast<unsigned char>(c) < 0x20) {
        --pos_;
        fail("control character " + describe_here() + " inside a string must be escaped");
      }
      if (c != '\\') {
        out += c;
        continue;
      }
      if (pos_ >= s_.size()) fail("unterminated string");
      char e = s_[pos_++];
      switch (e) {
        case '"': out += '"'; break;
        case '\\': out += '\\'; break;
        case '/': out += '/'; break;
        case 'b': out += '\b'; break;
        case 'f': out += '\f'; break;
        case 'n': out += '\n'; break;
        case 'r': out += '\r'; break;
        case 't': out += '\t'; break;
        case 'u': {
          uint32_t cp = hex4();
          if (cp >= 0xdc00 && cp <= 0xdfff) fail("lone low surrogate in \\u escape");
          if (cp >= 0xd800 && cp <= 0xdbff) {
            if (!s_.substr(pos_).starts_with("\\u")) fail("high surrogate without a low one");
            pos_ += 2;
            uint32_t low = hex4();
            if (low < 0xdc00 || low > 0xdfff) fail("high surrogate without a low one");
            cp = 0x10000 + ((cp - 0xd800) << 10) + (low - 0xdc00);
          }
          append_utf8(out, cp);
          break;
        }
        default:
          --pos_;
          fail("unknown escape \\" + describe_here());
      }
    }
  }

  std::string_view s_;
  size_t pos_ = 0;
};

void dump_to(std::string& out, const Value& v) {
  switch (v.kind) {
    case Value::Kind::null: out += "null"; return;
    case Value::Kind::boolean: out += v.boolean ? "true" : "false"; return;
    case Value::Kind::integer: out += std::to_string(v.integer); return;
    case Value::Kind::string: out += quote(v.string); return;
    case Value::Kind::array:
      out += '[';
      for (size_t i = 0; i < v.items.size(); ++i) {
        if (i) out += ',';
        dump_to(out, v.items[i]);
      }
      out += ']';
      return;
    case Value::Kind::object:
      out += '{';
      for (size_t i = 0; i < v.members.size(); ++i) {
        if (i) out += ',';
        out += quote(v.members[i].first);
        out += ':';
        dump_to(out, v.members[i].second);
      }
      out += '}';
      return;
  }
}

}  // namespace

Value Value::of_int(int64_t v) {
  Value out;
  out.kind = Kind::integer;
  out.integer = v;
  return out;
}

Value Value::of_string(std::string v) {
  Value out;
  out.kind = Kind::string;
  out.string = std::move(v);
  return out;
}

Value Value::array() {
  Value out;
  out.kind = Kind::array;
  return out;
}

Value Value::object() {
  Value out;
  out.kind = Kind::object;
  return out;
}

const Value* Value::find(std::string_view key) const {
  for (const auto& [k, v] : members)
    if (k == key) return &v;
  return nullptr;
}

const char* kind_name(Value::Kind k) {
  switch (k) {
    case Value::Kind::null: return "null";
    case Value::Kind::boolean: return "boolean";
    case Value::Kind::integer: return "integer";
    case Value::Kind::string: return "string";
    case Value::Kind::array: return "array";
    case Value::Kind::object: return "object";
  }
  return "?";
}

Value parse(std::string_view text) { return Parser(text).document(); }

std::string dump(const Value& v) {
  std::string out;
  dump_to(out, v);
  return out;
}

std::string quote(std::string_view s) {
  std::string out = "\"";
  for (char c : s) {
    switch (c) {
      case '"': out += "\\\""; break;
      case '\\': out += "\\\\"; break;
      case '\n': out += "\\n"; break;
      case '\r': out += "\\r"; break;
      case '\t': out += "\\t"; break;
      default:
        if (static_cast<unsigned char>(c) < 0x20) {
          char buf[8];
          std::snprintf(buf, sizeof buf, "\\u%04x", static_cast<unsigned>(c));
          out += buf;
        } else {
          out += c;
        }
    }
  }
  return out + "\"";
}

}  // namespace fjit::io::json
