#include "messages/msgpack_codec.hpp"

#include "messages/errors.hpp"

namespace opforge::wire {

namespace {

caf::error malformed(std::string what) {
  return caf::make_error(errc::frame_malformed, std::move(what));
}

caf::error wrong_type(std::string_view key, const char* expected, const msgpack::object& got) {
  return malformed("key '" + std::string{key} + "': expected " + expected + ", got " +
                   type_name(got));
}

caf::error missing(std::string_view key) {
  return malformed("missing key '" + std::string{key} + "'");
}

} // namespace

const char* type_name(const msgpack::object& obj) {
  switch (obj.type) {
  case msgpack::type::NIL:
    return "nil";
  case msgpack::type::BOOLEAN:
    return "bool";
  case msgpack::type::POSITIVE_INTEGER:
  case msgpack::type::NEGATIVE_INTEGER:
    return "int";
  case msgpack::type::FLOAT32:
  case msgpack::type::FLOAT64:
    return "float";
  case msgpack::type::STR:
    return "str";
  case msgpack::type::BIN:
    return "bin";
  case msgpack::type::ARRAY:
    return "array";
  case msgpack::type::MAP:
    return "map";
  case msgpack::type::EXT:
    return "ext";
  }
  return "unknown";
}

caf::expected<msgpack::object_handle> unpack(std::string_view bytes, const unpack_limits& limits) {
  if (bytes.size() > limits.max_bytes)
    return caf::make_error(errc::frame_oversized,
                           std::to_string(bytes.size()) + " bytes exceed the " +
                               std::to_string(limits.max_bytes) + "-byte limit");
  if (bytes.empty())
    return malformed("empty frame");
  auto elements = std::min(limits.max_elements, bytes.size());
  msgpack::unpack_limit limit{elements, elements, bytes.size(), bytes.size(), 0, limits.max_depth};
  try {
    size_t offset = 0;
    auto handle = msgpack::unpack(bytes.data(), bytes.size(), offset, nullptr, nullptr, limit);
    if (offset != bytes.size())
      return malformed(std::to_string(bytes.size() - offset) + " trailing bytes after the value");
    return handle;
  } catch (const msgpack::size_overflow& e) {
    return caf::make_error(errc::frame_oversized,
                           std::string{"msgpack limit exceeded: "} + e.what());
  } catch (const msgpack::insufficient_bytes&) {
    return malformed("truncated msgpack value");
  } catch (const std::exception& e) {
    return malformed(std::string{"not msgpack: "} + e.what());
  }
}

caf::expected<map_reader> map_reader::of(const msgpack::object& obj) {
  if (obj.type != msgpack::type::MAP)
    return malformed(std::string{"expected a map, got "} + type_name(obj));
  for (uint32_t i = 0; i < obj.via.map.size; ++i)
    if (obj.via.map.ptr[i].key.type != msgpack::type::STR)
      return malformed(std::string{"map key of type "} + type_name(obj.via.map.ptr[i].key));
  return map_reader{&obj};
}

const msgpack::object* map_reader::find(std::string_view key) const {
  for (uint32_t i = 0; i < obj_->via.map.size; ++i) {
    auto& kv = obj_->via.map.ptr[i];
    if (std::string_view{kv.key.via.str.ptr, kv.key.via.str.size} == key)
      return &kv.val;
  }
  return nullptr;
}

caf::expected<std::string> map_reader::string(std::string_view key) const {
  auto* val = find(key);
  if (!val)
    return missing(key);
  if (val->type != msgpack::type::STR)
    return wrong_type(key, "a string", *val);
  return std::string{val->via.str.ptr, val->via.str.size};
}

caf::expected<int64_t> map_reader::integer(std::string_view key) const {
  auto* val = find(key);
  if (!val)
    return missing(key);
  if (val->type == msgpack::type::NEGATIVE_INTEGER)
    return val->via.i64;
  if (val->type != msgpack::type::POSITIVE_INTEGER)
    return wrong_type(key, "an integer", *val);
  if (val->via.u64 > static_cast<uint64_t>(INT64_MAX))
    return malformed("key '" + std::string{key} + "': integer out of range");
  return static_cast<int64_t>(val->via.u64);
}

caf::expected<double> map_reader::number(std::string_view key) const {
  auto* val = find(key);
  if (!val)
    return missing(key);
  if (val->type == msgpack::type::FLOAT32 || val->type == msgpack::type::FLOAT64)
    return val->via.f64;
  if (auto i = integer(key))
    return static_cast<double>(*i);
  return wrong_type(key, "a number", *val);
}

caf::expected<bool> map_reader::boolean(std::string_view key) const {
  auto* val = find(key);
  if (!val)
    return missing(key);
  if (val->type != msgpack::type::BOOLEAN)
    return wrong_type(key, "a bool", *val);
  return val->via.boolean;
}

caf::expected<map_reader> map_reader::map(std::string_view key) const {
  auto* val = find(key);
  if (!val)
    return missing(key);
  if (val->type != msgpack::type::MAP)
    return wrong_type(key, "a map", *val);
  return of(*val);
}

caf::expected<std::string> map_reader::string_or(std::string_view key, std::string fallback) const {
  auto* val = find(key);
  if (!val || val->type == msgpack::type::NIL)
    return fallback;
  return string(key);
}

caf::expected<int64_t> map_reader::integer_or(std::string_view key, int64_t fallback) const {
  auto* val = find(key);
  if (!val || val->type == msgpack::type::NIL)
    return fallback;
  return integer(key);
}

} // namespace opforge::wire
