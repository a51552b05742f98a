#pragma once

// The kernel library: every kernel a session got accepted, with its provenance, in the `kernels`
// family. Its keys start with the operator id, so the library answers by prefix which operators
// it covers and which kernels one operator has. The library also owns `validations` (verdicts on
// a kernel per toolchain, keyed by `validation_key`), which the re-validation of stored kernels
// writes.

#include "messages/store_messages.hpp"
#include "messages/write_batch.hpp"

#include <cstdint>
#include <map>
#include <set>
#include <string>
#include <string_view>
#include <vector>

#include <caf/expected.hpp>

namespace opforge {

/// An accepted kernel, as stored under its `kernel_key`.
struct kernel_record {
  std::string op;
  std::string variant;
  std::string wrapper; // the function that launches the kernels
  std::string source;
  std::string hash;                                  // `content_hash(source)`, set by `add_kernel`
  std::vector<std::string> dtypes;                   // the dtypes it passed
  std::map<std::string, std::string> skipped_dtypes; // dtype -> why its test skipped it
  // Provenance: where it came from and what it took.
  std::string campaign_id;
  std::string session_id;
  std::string endpoint;
  std::string model;
  uint32_t dialogs = 0;
  uint32_t llm_calls = 0;
  uint32_t calls_in_last_dialog = 0;
  int64_t tests_run = 0;
  int64_t tests_passed = 0;
  std::string toolchain; // the worker's toolchain fingerprint of the passing test
  std::string device_kind;
  int64_t accepted_at_ms = 0; // wall clock
};

/// A hash of a kernel's source that is stable across builds and platforms (16 hex digits).
std::string content_hash(std::string_view source);

/// The `kernels` key of an accepted kernel: `prefix_of(operator id)`, then the source's hash.
std::string kernel_key(std::string_view operator_id, std::string_view source);

/// The msgpack value stored for a kernel, and back. Decoding errors are errc::store_corrupt.
std::string encode_kernel(const kernel_record& kernel);
caf::expected<kernel_record> decode_kernel(std::string_view bytes);

/// The write that adds `kernel` to the library, its hash filled in.
write_op add_kernel(kernel_record kernel);

/// The operator ids that have an accepted kernel, from the entries of a scan of `kernels`.
std::set<std::string> covered_operators(const std::vector<key_value>& kernels);

} // namespace opforge
