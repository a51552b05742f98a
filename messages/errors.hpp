#pragma once

#include "messages/enum_names.hpp"

#include <cstdint>
#include <string>

#include <caf/error.hpp>
#include <caf/fwd.hpp>
#include <caf/make_message.hpp>
#include <caf/message.hpp>

namespace opforge {

/// Every error opforge produces at a module edge. Rendered by `to_string`, and by CAF through the
/// renderer registered in `register_error_category`.
enum class errc : uint8_t {
  unspecified = 1,
  // configuration
  config_unreadable,
  config_invalid,
  config_unknown_key,
  config_path_unusable,
  config_address_unusable,
  // persistence
  store_open_failed,
  store_io_failed,
  store_corrupt,
  store_schema_mismatch,
  // wire
  frame_malformed,
  frame_oversized,
  frame_unknown_type,
  frame_version_mismatch,
  // devices
  worker_lost,
  cancelled, // a job, by request or because the daemon shuts down
  // control
  daemon_unreachable,
  permission_denied,
  request_invalid,
  // llm
  endpoint_fault,
};

/// The names of the error codes, e.g. "config_invalid" (`to_string`).
template <>
struct contract::enum_traits<errc> {
  static constexpr std::string_view label = "errc";
  static constexpr size_t first = static_cast<size_t>(errc::unspecified);
  static constexpr std::array<std::string_view, 20> names{
      "unspecified",          "config_unreadable",       "config_invalid",    "config_unknown_key",
      "config_path_unusable", "config_address_unusable", "store_open_failed", "store_io_failed",
      "store_corrupt",        "store_schema_mismatch",   "frame_malformed",   "frame_oversized",
      "frame_unknown_type",   "frame_version_mismatch",  "worker_lost",       "cancelled",
      "daemon_unreachable",   "permission_denied",       "request_invalid",   "endpoint_fault"};
  static_assert(first + names.size() - 1 == static_cast<size_t>(errc::endpoint_fault));
};

/// Registers the `opforge` error category with CAF so errors print with their names.
void register_error_category(caf::actor_system_config& cfg);

/// Renders any CAF error, including opforge's, as one line.
std::string render(const caf::error& err);

/// What a user reads: an opforge error's own words without its code name (which `render` puts
/// first), or `render` for an error without words.
std::string message(const caf::error& err);

} // namespace opforge

CAF_ERROR_CODE_ENUM(opforge::errc, "opforge")
