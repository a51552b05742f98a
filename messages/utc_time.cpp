#include "messages/utc_time.hpp"

#include <chrono>
#include <cstdio>
#include <ctime>
#include <random>

namespace opforge {

std::string format_utc(int64_t unix_ms, const char* format) {
  auto seconds = static_cast<std::time_t>(unix_ms / 1000);
  std::tm utc{};
  ::gmtime_r(&seconds, &utc);
  char text[64];
  auto written = std::strftime(text, sizeof text, format, &utc);
  return std::string(text, written);
}

std::string utc_minute(int64_t unix_ms) {
  return format_utc(unix_ms, "%Y-%m-%d %H:%M");
}

int64_t unix_ms_now() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(
             std::chrono::system_clock::now().time_since_epoch())
      .count();
}

std::string timestamped_id() {
  static thread_local std::mt19937 random{std::random_device{}()};
  char suffix[8];
  std::snprintf(suffix, sizeof suffix, "-%04x", static_cast<unsigned>(random() & 0xffff));
  return format_utc(unix_ms_now(), "%Y%m%d-%H%M%S") + suffix;
}

} // namespace opforge
