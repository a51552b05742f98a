#pragma once

// Bounded msgpack decoding for every frame that comes from outside the daemon (workers, the control
// socket, cassettes), and a reader that names the key when a field is missing or of the wrong type.

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

#include <caf/expected.hpp>

#include <msgpack.hpp>

namespace opforge::wire {

/// Limits applied before anything is allocated (msgpack-c #1013: a 5-byte frame can otherwise ask
/// for a 96 GB allocation). Every container element takes at least one byte, so the element caps
/// also keep total allocation within a small multiple of the frame size.
struct unpack_limits {
  size_t max_bytes = size_t{16} << 20;
  size_t max_elements = 65536;
  size_t max_depth = 32;
};

/// Unpacks exactly one msgpack value from `bytes`. Errors (errc::frame_oversized or
/// errc::frame_malformed) say which limit or which parse step failed.
caf::expected<msgpack::object_handle> unpack(std::string_view bytes,
                                             const unpack_limits& limits = {});

/// Reads fields of a msgpack map by name. Each failed read is an errc::frame_malformed error that
/// names the key and what was expected, e.g. "key 'slots': expected an integer, got str".
class map_reader {
public:
  /// Fails unless `obj` is a map whose keys are all strings.
  static caf::expected<map_reader> of(const msgpack::object& obj);

  /// The value under `key`, or nullptr.
  const msgpack::object* find(std::string_view key) const;

  caf::expected<std::string> string(std::string_view key) const;
  caf::expected<int64_t> integer(std::string_view key) const;
  caf::expected<double> number(std::string_view key) const;
  caf::expected<bool> boolean(std::string_view key) const;
  caf::expected<map_reader> map(std::string_view key) const;

  /// Optional fields: the fallback when absent or nil, an error when present with another type.
  caf::expected<std::string> string_or(std::string_view key, std::string fallback) const;
  caf::expected<int64_t> integer_or(std::string_view key, int64_t fallback) const;

  const msgpack::object& object() const { return *obj_; }

private:
  explicit map_reader(const msgpack::object* obj) : obj_{obj} {}
  const msgpack::object* obj_;
};

/// The msgpack type of an object as a word, for error messages.
const char* type_name(const msgpack::object& obj);

} // namespace opforge::wire
