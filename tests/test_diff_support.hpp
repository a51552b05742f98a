#pragma once

// The diff of an accuracy failure, as the session tests script a worker's verdict.

#include "messages/contract.hpp"

#include <cstdint>

namespace opforge::testing {

/// compare.py's diff where `mismatched` of `total` float32 values differ, the farthest by
/// `max_abs_error`.
inline contract::tensor_diff values_differ(double max_abs_error, int64_t mismatched = 1,
                                           int64_t total = 4) {
  return {.reason = "values differ",
          .actual_shape = {total},
          .expected_shape = {total},
          .actual_dtype = "float32",
          .expected_dtype = "float32",
          .max_abs_error = max_abs_error,
          .mismatched = mismatched,
          .total = total};
}

} // namespace opforge::testing
