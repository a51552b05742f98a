#pragma once

// The batches that tests/store_crash_writer.cpp writes and test_store_crash.cpp checks after
// killing it. Batch n touches five families, like a session checkpoint, and every key and value
// encodes n, so a reader can tell which batches are present and whether any is present only in
// part.

#include "messages/write_batch.hpp"
#include "persistence/keys.hpp"

#include <cstdint>
#include <string>

namespace opforge::test {

inline constexpr std::string_view crash_session = "crash";

/// Key of batch n in the sessions and jobs families: fixed width, so keys sort by n.
inline std::string crash_key(uint64_t n) {
  auto digits = std::to_string(n);
  return "batch/" + std::string(20 - digits.size(), '0') + digits;
}

/// The value batch n stores in `f`: names the family and n, padded to a checkpoint-like size.
inline std::string crash_value(family f, uint64_t n, size_t size) {
  auto value = std::string{to_string(f)} + " of batch " + std::to_string(n) + "|";
  while (value.size() < size)
    value += static_cast<char>('a' + (value.size() + n) % 26);
  return value;
}

inline std::string crash_pending_key(uint64_t n) {
  return "pending/" + std::to_string(n);
}

/// Batch n >= 1: puts in sessions, events and validations, overwrites campaigns/latest with n, and
/// moves the one kernels/pending/* key from n - 1 to n.
inline write_batch crash_batch(uint64_t n) {
  return write_batch{
      {
          {family::sessions, crash_key(n), crash_value(family::sessions, n, 2048)},
          {family::events, event_key(crash_session, n), crash_value(family::events, n, 4096)},
          {family::validations, crash_key(n), crash_value(family::validations, n, 64)},
          {family::campaigns, "latest", std::to_string(n)},
          {family::kernels, crash_pending_key(n - 1), std::nullopt},
          {family::kernels, crash_pending_key(n), crash_value(family::kernels, n, 16)},
      },
      true,
  };
}

} // namespace opforge::test
