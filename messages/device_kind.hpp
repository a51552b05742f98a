#pragma once

#include <cstddef>
#include <string>
#include <string_view>
#include <vector>

namespace opforge {

/// Device kinds are whatever workers announce: the daemon takes any kind within these bounds,
/// which keep the names fit for metric labels, store keys and lint profile names.
inline constexpr std::size_t max_device_kind_length = 32;
inline constexpr std::string_view device_kind_rule =
    "1 to 32 lowercase letters, digits, '_' or '-', starting with a letter";

/// What a lint-only worker announces: it tests on no device.
inline constexpr std::string_view no_device_kind = "none";

/// Whether `kind` follows `device_kind_rule`.
inline bool is_device_kind(std::string_view kind) {
  auto lower = [](char c) { return c >= 'a' && c <= 'z'; };
  if (kind.empty() || kind.size() > max_device_kind_length || !lower(kind.front()))
    return false;
  for (char c : kind)
    if (!lower(c) && !(c >= '0' && c <= '9') && c != '_' && c != '-')
      return false;
  return true;
}

namespace contract {
/// The kinds the worker's registry defines (messages/contract.yaml, `device_kinds`), in the
/// schema's order. A campaign may name these or a kind a worker has announced; any other kind
/// has no worker that could serve it. Defined in the generated contract.cpp.
const std::vector<std::string>& registered_device_kinds();
} // namespace contract

} // namespace opforge
