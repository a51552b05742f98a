#pragma once

// The codec of the stored records that are not the contract's: a record is one msgpack map, its
// fields listed once for both directions (`fields(x, f)` calls `f(key, member)`, or with
// presence::required), over the contract's templates (messages/contract_codec.hpp). A field is
// read when present and keeps its default when absent, so that a record an older build wrote
// (tests/fixtures/records) still reads; a value of the wrong type, or a name an enum does not
// have, is a problem that the caller reports as a corrupt record.

#include "messages/contract_codec.hpp"
#include "messages/errors.hpp"
#include "messages/msgpack_codec.hpp"

#include <cstdint>
#include <string>
#include <string_view>
#include <type_traits>

#include <caf/expected.hpp>

namespace opforge::field_codec {

namespace codec = contract::codec;

enum class presence { optional, required };

// A stored enum, read with a message that names the enum: `campaign state "paused": not one of
// ...`. Its read_value lives beside it, where the struct reader's templates look.
template <class E>
struct stored_name {
  E& value;
};

template <class E>
std::string enum_words() {
  std::string words{contract::enum_traits<E>::label};
  for (auto& c : words)
    if (c == '_')
      c = ' ';
  return words;
}

template <class E>
codec::read_result read_value(const msgpack::object& o, stored_name<E>& out) {
  std::string name;
  if (auto bad = codec::read_value(o, name))
    return bad;
  auto value = contract::from_string<E>(name);
  if (!value)
    return codec::problem{.reason = "bad_key",
                          .what = enum_words<E>() + " \"" + name + "\": not one of " +
                                  contract::one_of<E>()};
  out.value = *value;
  return std::nullopt;
}

// Opens the map with room for `extra` entries that the caller writes after the fields.
template <class T, class Fields>
void pack_fields(codec::packer& p, const T& x, Fields fields, uint32_t extra = 0) {
  uint32_t size = extra;
  fields(x, [&size](std::string_view, const auto&, presence = presence::optional) { ++size; });
  p.pack_map(size);
  fields(x, [&p](std::string_view key, const auto& value, presence = presence::optional) {
    codec::pack_key(p, key);
    pack_value(p, value);
  });
}

template <class T, class Fields>
void read_fields(codec::struct_reader& r, T& x, Fields fields) {
  fields(x, [&r](std::string_view key, auto& value, presence how = presence::optional) {
    auto read = [&](auto& out) {
      if (how == presence::required)
        r.required(key, out);
      else
        r.optional(key, out);
    };
    using value_type = std::remove_cvref_t<decltype(value)>;
    if constexpr (std::is_enum_v<value_type>) {
      stored_name<value_type> name{value};
      read(name);
    } else {
      read(value);
    }
  });
}

template <class T, class Fields>
codec::read_result read_fields(const msgpack::object& o, T& x, Fields fields) {
  codec::struct_reader r{o};
  read_fields(r, x, fields);
  return r.result();
}

/// `x` as the map of its `fields`.
template <class T, class Fields>
std::string encode_fields(const T& x, Fields fields) {
  msgpack::sbuffer buffer;
  codec::packer p{buffer};
  pack_fields(p, x, fields);
  return {buffer.data(), buffer.size()};
}

// Records are ours: as large as they were written, but never larger than the bytes they came in.
inline caf::expected<msgpack::object_handle> unpack_record(std::string_view bytes) {
  return wire::unpack(bytes, {.max_bytes = bytes.size(), .max_elements = bytes.size()});
}

inline caf::error corrupt(std::string_view what, const std::string& why) {
  return caf::make_error(errc::store_corrupt, std::string{what} + ": " + why);
}

/// A record that is one map of `fields`, named `what` in its errors (errc::store_corrupt).
template <class T, class Fields>
caf::expected<T> decode_fields(std::string_view bytes, std::string_view what, Fields fields) {
  auto handle = unpack_record(bytes);
  if (!handle)
    return corrupt(what, message(handle.error()));
  T out;
  if (auto bad = read_fields(handle->get(), out, fields))
    return corrupt(what, bad->message());
  return out;
}

} // namespace opforge::field_codec
