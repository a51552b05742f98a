#pragma once

// The words the CLI and the daemon share on the control socket (messages/PROTOCOL.md, "Control
// socket"), spelled once here so that the side that writes one and the side that reads it cannot
// drift apart: the client builds each request's `type` from request_type, the server dispatches
// on it, and a type the server does not handle is a compiler warning, not a runtime surprise.

#include "messages/enum_names.hpp"

#include <array>
#include <cstddef>
#include <cstdint>
#include <string_view>

namespace opforge {

/// A control request's `type`. `export` is a C++ keyword, hence `export_` (the wire says "export").
enum class request_type : uint8_t {
  status,
  workers,
  run,
  campaign,
  campaigns,
  cancel,
  sessions,
  show,
  kernels,
  regressions,
  revalidate,
  repair,
  export_,
  import,
  import_status,
  imports,
  report,
  shutdown,
};

template <>
struct contract::enum_traits<request_type> {
  static constexpr std::string_view label = "request_type";
  static constexpr std::array<std::string_view, 18> names{
      "status",   "workers", "run",           "campaign",    "campaigns",  "cancel",
      "sessions", "show",    "kernels",       "regressions", "revalidate", "repair",
      "export",   "import",  "import_status", "imports",     "report",     "shutdown"};
  static_assert(names.size() - 1 == static_cast<size_t>(request_type::shutdown));
};

/// The endpoint the daemon replays when no LLM endpoint is configured; the CLI tells its users
/// that such a campaign's answers are hand-written, not a model's.
inline constexpr const char* demo_endpoint_name = "demo";

} // namespace opforge
