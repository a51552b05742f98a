#pragma once

// A write batch: puts and deletes across column families that the store applies atomically.

#include "messages/family.hpp"

#include <optional>
#include <string>
#include <vector>

#include <caf/meta/type_name.hpp>

namespace opforge {

/// Sets `key` in `family` to `value`, or deletes it when `value` is empty. Values are opaque bytes
/// (callers store msgpack).
struct write_op {
  opforge::family family;
  std::string key;
  std::optional<std::string> value;
};

/// Operations applied all together or not at all.
struct write_batch {
  std::vector<write_op> ops;
  /// Whether the write survives power loss (fsync of the log before the write returns). Without
  /// it a write survives a crash of the process, not of the machine.
  bool sync = false;
};

/// Lets CAF 0.17, which knows only caf::optional, inspect a std::optional<std::string>: it
/// travels as a presence flag and the bytes.
struct optional_bytes {
  std::optional<std::string>& value;
};

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, optional_bytes& x) {
  if constexpr (Inspector::reads_state) {
    bool has_value = x.value.has_value();
    std::string no_value;
    return f(has_value, has_value ? *x.value : no_value);
  } else {
    bool has_value = false;
    std::string bytes;
    auto result = f(has_value, bytes);
    x.value = has_value ? std::optional{std::move(bytes)} : std::nullopt;
    return result;
  }
}

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, write_op& x) {
  optional_bytes value{x.value};
  return f(caf::meta::type_name("write_op"), x.family, x.key, value);
}

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, write_batch& x) {
  return f(caf::meta::type_name("write_batch"), x.ops, x.sync);
}

} // namespace opforge
