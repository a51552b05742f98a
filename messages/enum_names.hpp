#pragma once

// The one way opforge names the values of an enum: specialise `enum_traits` with `label` (the
// enum's name), `names` (each enumerator's name, in order) and, for an enum that does not start
// at 0, `first` (the value of names[0]); `to_string` and `from_string` then work for it. The
// contract's enums (generated from messages/contract.yaml) and the daemon's own (errors, chat
// outcomes, column families, ...) all do.

#include <array>
#include <cstddef>
#include <optional>
#include <string>
#include <string_view>
#include <type_traits>
#include <vector>

namespace opforge::contract {

template <class E>
struct enum_traits;

template <class E>
concept contract_enum = std::is_enum_v<E> && requires {
  enum_traits<E>::names;
};

template <contract_enum E>
constexpr size_t first_value() {
  if constexpr (requires { enum_traits<E>::first; })
    return enum_traits<E>::first;
  else
    return 0;
}

/// The name of a value.
template <contract_enum E>
std::string to_string(E value) {
  return std::string{enum_traits<E>::names[static_cast<size_t>(value) - first_value<E>()]};
}

/// The value of a name, or nullopt for a name the enum does not have.
template <contract_enum E>
std::optional<E> from_string(std::string_view name) {
  auto& names = enum_traits<E>::names;
  for (size_t i = 0; i < names.size(); ++i)
    if (names[i] == name)
      return static_cast<E>(i + first_value<E>());
  return std::nullopt;
}

template <contract_enum E>
std::vector<std::string> to_strings(const std::vector<E>& values) {
  std::vector<std::string> out;
  out.reserve(values.size());
  for (auto value : values)
    out.push_back(to_string(value));
  return out;
}

/// The names of an enum that extends another: `base`'s names first, in their order, then `more`,
/// so that a base value widens to the extension by a cast (as the contract's `extends:` does).
template <size_t N, size_t M>
constexpr std::array<std::string_view, N + M>
extended(const std::array<std::string_view, N>& base, const std::array<std::string_view, M>& more) {
  std::array<std::string_view, N + M> out{};
  for (size_t i = 0; i < N; ++i)
    out[i] = base[i];
  for (size_t i = 0; i < M; ++i)
    out[N + i] = more[i];
  return out;
}

/// The names for a message: "a, b or c".
std::string one_of(const std::string_view* names, size_t count);

template <contract_enum E>
std::string one_of() {
  auto& names = enum_traits<E>::names;
  return one_of(names.data(), names.size());
}

} // namespace opforge::contract

namespace opforge {

using contract::from_string;
using contract::to_string;

} // namespace opforge
