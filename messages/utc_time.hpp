#pragma once

// Wall-clock times as people and file names read them, always in UTC: the one place that turns a
// Unix time into text.

#include <cstdint>
#include <string>

namespace opforge {

/// `unix_ms` (milliseconds since the epoch) in UTC as `std::strftime`'s `format` writes it
/// (e.g. "%Y-%m-%d %H:%M"); at most 63 characters.
std::string format_utc(int64_t unix_ms, const char* format);

/// The wall clock now, in milliseconds since the epoch.
int64_t unix_ms_now();

} // namespace opforge
