#include "messages/contract_codec.hpp"

#include "messages/msgpack_codec.hpp"

#include <cstring>

namespace opforge::contract {

std::string one_of(const std::string_view* names, size_t count) {
  std::string out;
  for (size_t i = 0; i < count; ++i) {
    if (i > 0)
      out += i + 1 == count ? " or " : ", ";
    out += names[i];
  }
  return out;
}

namespace codec {

void pack_key(packer& p, std::string_view key) {
  pack_value(p, key);
}

void pack_header(packer& p, int64_t version, std::string_view type) {
  pack_key(p, "v");
  p.pack_int64(version);
  pack_key(p, "type");
  pack_value(p, type);
}

void pack_value(packer& p, std::string_view value) {
  p.pack_str(static_cast<uint32_t>(value.size()));
  p.pack_str_body(value.data(), static_cast<uint32_t>(value.size()));
}

void pack_value(packer& p, int64_t value) {
  p.pack_int64(value);
}

// Always as a float64: msgpack-c's pack_double writes 30.0 as the integer 30, and a float field
// must stay one on the wire (byte for byte what the worker's msgpack writes).
void pack_value(packer& p, double value) {
  uint64_t bits;
  std::memcpy(&bits, &value, sizeof bits);
  char bytes[9] = {static_cast<char>(0xcb)};
  for (int i = 0; i < 8; ++i)
    bytes[1 + i] = static_cast<char>(bits >> (56 - 8 * i));
  p.buffer.write(bytes, sizeof bytes);
}

void pack_object(packer& p, const msgpack::object& o) {
  switch (o.type) {
  case msgpack::type::FLOAT32:
  case msgpack::type::FLOAT64:
    pack_value(p, o.via.f64);
    return;
  case msgpack::type::ARRAY:
    p.pack_array(o.via.array.size);
    for (uint32_t i = 0; i < o.via.array.size; ++i)
      pack_object(p, o.via.array.ptr[i]);
    return;
  case msgpack::type::MAP:
    p.pack_map(o.via.map.size);
    for (uint32_t i = 0; i < o.via.map.size; ++i) {
      pack_object(p, o.via.map.ptr[i].key);
      pack_object(p, o.via.map.ptr[i].val);
    }
    return;
  default:
    p.pack(o);
  }
}

void pack_value(packer& p, bool value) {
  if (value)
    p.pack_true();
  else
    p.pack_false();
}

void pack_raw_map(packer& p, const std::string& bytes) {
  if (bytes.empty())
    p.pack_map(0);
  else // msgpack concatenates
    p.buffer.write(bytes.data(), bytes.size());
}

void pack_raw_map(packer& p, const std::optional<std::string>& bytes) {
  if (bytes)
    pack_raw_map(p, *bytes);
  else
    p.pack_nil();
}

std::string problem::message() const {
  if (reason == "missing_key")
    return "missing key '" + key + "'";
  auto text = expected.empty() ? what : "expected " + expected + ", got " + got;
  return key.empty() ? text : "key '" + key + "': " + text;
}

problem wrong_type(std::string expected, const msgpack::object& got) {
  return {.reason = "bad_key", .expected = std::move(expected), .got = wire::type_name(got)};
}

read_result read_value(const msgpack::object& o, std::string& out) {
  if (o.type != msgpack::type::STR)
    return wrong_type("a string", o);
  out.assign(o.via.str.ptr, o.via.str.size);
  return std::nullopt;
}

read_result read_value(const msgpack::object& o, int64_t& out) {
  if (o.type == msgpack::type::NEGATIVE_INTEGER) {
    out = o.via.i64;
    return std::nullopt;
  }
  if (o.type != msgpack::type::POSITIVE_INTEGER)
    return wrong_type("an integer", o);
  if (o.via.u64 > static_cast<uint64_t>(INT64_MAX))
    return problem{.reason = "bad_key", .what = "integer out of range"};
  out = static_cast<int64_t>(o.via.u64);
  return std::nullopt;
}

read_result read_value(const msgpack::object& o, uint64_t& out) {
  if (o.type == msgpack::type::NEGATIVE_INTEGER)
    return problem{.reason = "bad_key", .what = "must not be negative"};
  if (o.type != msgpack::type::POSITIVE_INTEGER)
    return wrong_type("an integer", o);
  out = o.via.u64;
  return std::nullopt;
}

read_result read_value(const msgpack::object& o, double& out) {
  if (o.type == msgpack::type::FLOAT32 || o.type == msgpack::type::FLOAT64) {
    out = o.via.f64;
    return std::nullopt;
  }
  int64_t integer = 0;
  if (read_value(o, integer))
    return wrong_type("a number", o);
  out = static_cast<double>(integer);
  return std::nullopt;
}

read_result read_value(const msgpack::object& o, bool& out) {
  if (o.type != msgpack::type::BOOLEAN)
    return wrong_type("a bool", o);
  out = o.via.boolean;
  return std::nullopt;
}

// Kept as msgpack bytes: a frame's payload belongs to the job kinds, not to the device layer.
read_result read_raw_map(const msgpack::object& o, std::string& out) {
  if (o.type != msgpack::type::MAP)
    return wrong_type("a map", o);
  msgpack::sbuffer buffer;
  packer p{buffer};
  pack_object(p, o);
  out.assign(buffer.data(), buffer.size());
  return std::nullopt;
}

read_result read_raw_map(const msgpack::object& o, std::optional<std::string>& out) {
  if (o.type == msgpack::type::NIL) {
    out.reset();
    return std::nullopt;
  }
  std::string bytes;
  if (auto bad = read_raw_map(o, bytes))
    return bad;
  out = std::move(bytes);
  return std::nullopt;
}

struct_reader::struct_reader(const msgpack::object& o) {
  if (o.type != msgpack::type::MAP) {
    problem_ = wrong_type("a map", o);
    return;
  }
  for (uint32_t i = 0; i < o.via.map.size; ++i)
    if (o.via.map.ptr[i].key.type != msgpack::type::STR) {
      problem_ = wrong_type("a map with string keys", o.via.map.ptr[i].key);
      return;
    }
  map_ = &o;
}

const msgpack::object* struct_reader::find(std::string_view key, bool required) {
  if (problem_)
    return nullptr;
  for (uint32_t i = 0; i < map_->via.map.size; ++i) {
    auto& [name, value] = map_->via.map.ptr[i];
    if (std::string_view{name.via.str.ptr, name.via.str.size} == key)
      return &value;
  }
  if (required)
    problem_ = problem{.reason = "missing_key", .key = std::string{key}};
  return nullptr;
}

void struct_reader::keep(std::string_view key, read_result bad) {
  if (!bad || problem_)
    return;
  bad->key = bad->key.empty() ? std::string{key} : std::string{key} + "." + bad->key;
  problem_ = std::move(bad);
}

void struct_reader::rule_out(std::string_view key, std::string what) {
  if (!problem_)
    problem_ = problem{.reason = "bad_key", .key = std::string{key}, .what = std::move(what)};
}

void struct_reader::at_least(std::string_view key, int64_t value, int64_t least) {
  if (value < least)
    rule_out(key, "must be at least " + std::to_string(least));
}

void struct_reader::positive(std::string_view key, double value) {
  if (!(value > 0))
    rule_out(key, "must be positive");
}

void struct_reader::bounded(std::string_view key, const std::string& value, size_t max_len,
                            std::string_view charset) {
  if (max_len > 0 && value.size() > max_len) {
    rule_out(key, "longer than " + std::to_string(max_len) + " characters");
    return;
  }
  // `charset` is ranges and single characters, as in a regular expression's brackets.
  auto allowed = [charset](char c) {
    for (size_t i = 0; i < charset.size(); ++i) {
      if (i + 2 < charset.size() && charset[i + 1] == '-') {
        if (c >= charset[i] && c <= charset[i + 2])
          return true;
        i += 2;
      } else if (c == charset[i]) {
        return true;
      }
    }
    return false;
  };
  for (char c : value)
    if (!allowed(c)) {
      rule_out(key, "must be of the characters " + std::string{charset});
      return;
    }
}

} // namespace codec

} // namespace opforge::contract
