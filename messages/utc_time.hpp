#pragma once

// Wall-clock times as people and file names read them, always in UTC: the one place that turns a
// Unix time into text.

#include <cstdint>
#include <string>

namespace opforge {

/// `unix_ms` (milliseconds since the epoch) in UTC as `std::strftime`'s `format` writes it
/// (e.g. "%Y-%m-%d %H:%M"); at most 63 characters.
std::string format_utc(int64_t unix_ms, const char* format);

/// `unix_ms` to the minute, as the CLI's tables and the report show times: 2026-12-06 21:45.
std::string utc_minute(int64_t unix_ms);

/// The wall clock now, in milliseconds since the epoch.
int64_t unix_ms_now();

/// A new id that sorts by when it was made and is unique across restarts: the UTC second and 16
/// random bits, e.g. 20261206-214501-3fa2.
std::string timestamped_id();

} // namespace opforge
