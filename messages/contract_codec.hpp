#pragma once

// What the generated contract (messages/contract.yaml -> messages/contract.hpp) is written in:
// the wire names of its enums (messages/enum_names.hpp), and the msgpack packing and checked
// reading of its field types.
// The generator emits one pack_value/read_value pair per struct; everything generic is here.

#include "messages/enum_names.hpp"

#include <array>
#include <concepts>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <msgpack.hpp>

namespace opforge::contract {

namespace codec {

// msgpack's packer, with the buffer it writes to: a raw map is copied into it as it is.
struct packer : msgpack::packer<msgpack::sbuffer> {
  explicit packer(msgpack::sbuffer& out) : msgpack::packer<msgpack::sbuffer>{out}, buffer{out} {}
  msgpack::sbuffer& buffer;
};

void pack_key(packer& p, std::string_view key);
void pack_header(packer& p, int64_t version, std::string_view type);
void pack_value(packer& p, std::string_view value);
void pack_value(packer& p, int64_t value);
void pack_value(packer& p, double value);
void pack_value(packer& p, bool value);

// The daemon's own counters (a record's revision, a session's calls) are unsigned.
template <std::unsigned_integral U>
requires(!std::same_as<U, bool>) void pack_value(packer& p, U value) {
  p.pack_uint64(value);
}

/// msgpack::pack of an object, but for floats, which keep their type (see pack_value(double)).
void pack_object(packer& p, const msgpack::object& o);

// `bytes` already is one msgpack map (checked where it entered the daemon) or empty (`{}`).
void pack_raw_map(packer& p, const std::string& bytes);
void pack_raw_map(packer& p, const std::optional<std::string>& bytes);

template <class T>
void pack_value(packer& p, const std::vector<T>& values);
template <class T>
void pack_value(packer& p, const std::map<std::string, T>& values);
template <class T>
void pack_value(packer& p, const std::optional<T>& value);

template <contract_enum E>
void pack_value(packer& p, E value) {
  pack_value(p, std::string_view{enum_traits<E>::names[static_cast<size_t>(value)]});
}

template <class T>
void pack_value(packer& p, const std::vector<T>& values) {
  p.pack_array(static_cast<uint32_t>(values.size()));
  for (const auto& value : values)
    pack_value(p, value);
}

template <class T>
void pack_value(packer& p, const std::map<std::string, T>& values) {
  p.pack_map(static_cast<uint32_t>(values.size()));
  for (const auto& [key, value] : values) {
    pack_key(p, key);
    pack_value(p, value);
  }
}

template <class T>
void pack_value(packer& p, const std::optional<T>& value) {
  if (value)
    pack_value(p, *value);
  else
    p.pack_nil();
}

/// One struct of the contract as msgpack bytes.
template <class T>
std::string to_bytes(const T& value) {
  msgpack::sbuffer buffer;
  packer p{buffer};
  pack_value(p, value);
  return {buffer.data(), buffer.size()};
}

/// The first thing wrong with a value: `reason` (missing_key or bad_key), the dotted `key` path
/// within the value where it was, and what: `expected` and `got` (msgpack type words), or `what`.
struct problem {
  std::string reason{};
  std::string key{};
  std::string expected{};
  std::string got{};
  std::string what{};

  /// "missing key 'k'", "key 'k': expected an integer, got str", "key 'k': must be ...".
  std::string message() const;
};

using read_result = std::optional<problem>;

read_result read_value(const msgpack::object& o, std::string& out);
read_result read_value(const msgpack::object& o, int64_t& out);
read_result read_value(const msgpack::object& o, double& out);
read_result read_value(const msgpack::object& o, bool& out);
read_result read_value(const msgpack::object& o, uint64_t& out);
read_result read_raw_map(const msgpack::object& o, std::string& out);
read_result read_raw_map(const msgpack::object& o, std::optional<std::string>& out);

problem wrong_type(std::string expected, const msgpack::object& got);

// An unsigned counter narrower than 64 bits: within its type's range.
template <std::unsigned_integral U>
requires(!std::same_as<U, bool> && !std::same_as<U, uint64_t>) read_result
    read_value(const msgpack::object& o, U& out) {
  uint64_t wide = 0;
  if (auto bad = read_value(o, wide))
    return bad;
  if (wide > std::numeric_limits<U>::max())
    return problem{.reason = "bad_key", .what = "integer out of range"};
  out = static_cast<U>(wide);
  return std::nullopt;
}

// Declared before any is defined, so that each finds the others whatever the nesting.
template <contract_enum E>
read_result read_value(const msgpack::object& o, E& out);
template <class T>
read_result read_value(const msgpack::object& o, std::vector<T>& out);
template <class T>
read_result read_value(const msgpack::object& o, std::map<std::string, T>& out);
template <class T>
read_result read_value(const msgpack::object& o, std::optional<T>& out);

// The plural noun of a field type, for "expected an array of <noun>".
template <class T>
constexpr std::string_view noun() {
  if constexpr (std::same_as<T, bool>)
    return "bools";
  else if constexpr (std::integral<T>)
    return "integers";
  else if constexpr (std::same_as<T, double>)
    return "numbers";
  else if constexpr (std::same_as<T, std::string> || contract_enum<T>)
    return "strings";
  else
    return "maps";
}

template <contract_enum E>
read_result read_value(const msgpack::object& o, E& out) {
  std::string name;
  if (auto bad = read_value(o, name))
    return bad;
  auto value = from_string<E>(name);
  if (!value)
    return problem{.reason = "bad_key", .what = "expected " + one_of<E>() + ", got '" + name + "'"};
  out = *value;
  return std::nullopt;
}

// An item of the wrong msgpack type reads as the array's fault ("expected an array of
// strings, got int"); a deeper problem keeps its own words.
template <class T>
read_result item_problem(problem bad, std::string_view container) {
  if (!bad.expected.empty() && bad.key.empty())
    bad.expected = std::string{container} + " of " + std::string{noun<T>()};
  return bad;
}

template <class T>
read_result read_value(const msgpack::object& o, std::vector<T>& out) {
  if (o.type != msgpack::type::ARRAY)
    return wrong_type("an array", o);
  out.clear();
  out.reserve(o.via.array.size);
  for (uint32_t i = 0; i < o.via.array.size; ++i) {
    T item{};
    if (auto bad = read_value(o.via.array.ptr[i], item))
      return item_problem<T>(std::move(*bad), "an array");
    out.push_back(std::move(item));
  }
  return std::nullopt;
}

template <class T>
read_result read_value(const msgpack::object& o, std::map<std::string, T>& out) {
  if (o.type != msgpack::type::MAP)
    return wrong_type("a map", o);
  out.clear();
  for (uint32_t i = 0; i < o.via.map.size; ++i) {
    auto& [key, value] = o.via.map.ptr[i];
    if (key.type != msgpack::type::STR)
      return wrong_type("a map with string keys", key);
    T item{};
    if (auto bad = read_value(value, item))
      return item_problem<T>(std::move(*bad), "a map of strings to");
    out.insert_or_assign(std::string{key.via.str.ptr, key.via.str.size}, std::move(item));
  }
  return std::nullopt;
}

template <class T>
read_result read_value(const msgpack::object& o, std::optional<T>& out) {
  if (o.type == msgpack::type::NIL) {
    out.reset();
    return std::nullopt;
  }
  T value{};
  if (auto bad = read_value(o, value))
    return bad;
  out = std::move(value);
  return std::nullopt;
}

// Values this side does not know are dropped, so that a newer peer is still understood.
template <contract_enum E>
read_result read_known(const msgpack::object& o, std::vector<E>& out) {
  std::vector<std::string> names;
  if (auto bad = read_value(o, names))
    return item_problem<E>(std::move(*bad), "an array");
  out.clear();
  for (const auto& name : names)
    if (auto value = from_string<E>(name))
      out.push_back(*value);
  return std::nullopt;
}

/// Reads the fields of one struct from a msgpack map, keeping the first problem, so that each
/// generated reader reads like the struct it fills and returns `result()` once.
class struct_reader {
public:
  explicit struct_reader(const msgpack::object& o);

  template <class T>
  void required(std::string_view key, T& out) {
    if (auto* value = find(key, true))
      keep(key, read_value(*value, out));
  }

  template <class T>
  void optional(std::string_view key, T& out) {
    if (auto* value = find(key, false))
      keep(key, read_value(*value, out));
  }

  template <class T>
  void required_raw_map(std::string_view key, T& out) {
    if (auto* value = find(key, true))
      keep(key, read_raw_map(*value, out));
  }

  template <class T>
  void optional_raw_map(std::string_view key, T& out) {
    if (auto* value = find(key, false))
      keep(key, read_raw_map(*value, out));
  }

  template <class T>
  void required_known(std::string_view key, T& out) {
    if (auto* value = find(key, true))
      keep(key, read_known(*value, out));
  }

  template <class T>
  void optional_known(std::string_view key, T& out) {
    if (auto* value = find(key, false))
      keep(key, read_known(*value, out));
  }

  // A value that does not read as T is nil: stored data and older peers hold an earlier form.
  template <class T>
  void required_lenient(std::string_view key, std::optional<T>& out) {
    if (auto* value = find(key, true))
      lenient(*value, out);
  }

  template <class T>
  void optional_lenient(std::string_view key, std::optional<T>& out) {
    if (auto* value = find(key, false))
      lenient(*value, out);
  }

  void at_least(std::string_view key, int64_t value, int64_t least);
  void positive(std::string_view key, double value);
  void nonempty(std::string_view key, const auto& value) {
    if (value.empty())
      rule_out(key, "must not be empty");
  }
  template <class T>
  void nonempty(std::string_view key, const std::optional<T>& value) {
    if (value)
      nonempty(key, *value);
  }
  void bounded(std::string_view key, const std::string& value, size_t max_len,
               std::string_view charset);
  // An array's or an absent value's bounds are its strings' bounds.
  template <class T>
  void bounded(std::string_view key, const std::vector<T>& values, size_t max_len,
               std::string_view charset) {
    for (const auto& value : values)
      bounded(key, value, max_len, charset);
  }
  template <class T>
  void bounded(std::string_view key, const std::optional<T>& value, size_t max_len,
               std::string_view charset) {
    if (value)
      bounded(key, *value, max_len, charset);
  }

  read_result result() { return std::move(problem_); }

private:
  const msgpack::object* find(std::string_view key, bool required);
  void keep(std::string_view key, read_result bad);
  void rule_out(std::string_view key, std::string what);
  template <class T>
  static void lenient(const msgpack::object& value, std::optional<T>& out) {
    if (read_value(value, out))
      out.reset();
  }

  const msgpack::object* map_ = nullptr;
  read_result problem_;
};

} // namespace codec

} // namespace opforge::contract
