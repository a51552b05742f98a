#pragma once

// The fixed, ordered column families of opforge's database. The order is part of the on-disk
// schema: append new families at the end and add a migration. A family that is dropped is named
// in `retired_families` (persistence/schema.hpp).

#include "messages/enum_names.hpp"

#include <array>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <string_view>

namespace opforge {

enum class family : uint8_t {
  /// Database-wide facts such as the schema version.
  meta,
  /// One record per submitted campaign.
  campaigns,
  /// One record per operator session: its current state, checkpointed on every transition.
  sessions,
  /// Each session's append-only log, keyed by `event_key` so it scans in order.
  events,
  /// Accepted kernels by hash.
  kernels,
  /// Verdicts per kernel hash and toolchain fingerprint (`validation_key`). Owned by the library
  /// room (actors/library) with `kernels`: the re-validation of stored kernels on a new toolchain
  /// writes them.
  validations,
};

inline constexpr std::array all_families{
    family::meta,   family::campaigns, family::sessions,
    family::events, family::kernels,   family::validations,
};

/// The column family names on disk, e.g. "sessions" (`to_string`).
template <>
struct contract::enum_traits<family> {
  static constexpr std::string_view label = "family";
  static constexpr std::array<std::string_view, 6> names{"meta",   "campaigns", "sessions",
                                                         "events", "kernels",   "validations"};
  static_assert(names.size() == all_families.size());
};

/// Position of `f` in `all_families`.
constexpr size_t index_of(family f) {
  return static_cast<size_t>(f);
}

/// Whether `f` is one of `all_families` (a deserialized message may carry any byte).
constexpr bool is_known(family f) {
  return index_of(f) < all_families.size();
}

} // namespace opforge
