#include "messages/utc_time.hpp"

#include <chrono>
#include <ctime>

namespace opforge {

std::string format_utc(int64_t unix_ms, const char* format) {
  auto seconds = static_cast<std::time_t>(unix_ms / 1000);
  std::tm utc{};
  ::gmtime_r(&seconds, &utc);
  char text[64];
  auto written = std::strftime(text, sizeof text, format, &utc);
  return std::string(text, written);
}

int64_t unix_ms_now() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(
             std::chrono::system_clock::now().time_since_epoch())
      .count();
}

} // namespace opforge
