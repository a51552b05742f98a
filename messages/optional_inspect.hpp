#pragma once

// CAF 0.17 inspects its own caf::optional but not std::optional, which the generated contract
// uses for its nil-able fields (messages/contract.yaml `T?`). The generated `inspect` of a struct
// hands such a field over as `inspect_optional(x.field)`: a flag, then the value where present,
// as CAF does for caf::optional, so the struct can travel in actor messages.

#include <optional>

#include <caf/detail/scope_guard.hpp>

namespace opforge::contract {

template <class T>
struct optional_item {
  bool& present;
  T& item;

  template <class Inspector>
  friend typename Inspector::result_type inspect(Inspector& f, optional_item& x) {
    return x.present ? f(x.item) : f();
  }
};

template <class T>
struct optional_field {
  std::optional<T>& value;

  template <class Inspector>
  friend typename Inspector::result_type inspect(Inspector& f, optional_field& x) {
    if constexpr (Inspector::reads_state) {
      bool present = x.value.has_value();
      return present ? f(present, *x.value) : f(present);
    } else {
      bool present = false;
      T item{};
      optional_item<T> read{present, item};
      auto assign = caf::detail::make_scope_guard([&] {
        if (present)
          x.value = std::move(item);
        else
          x.value.reset();
      });
      return f(present, read);
    }
  }
};

template <class T>
optional_field<T> inspect_optional(std::optional<T>& value) {
  return {value};
}

} // namespace opforge::contract
