#pragma once

// The kernel library: every kernel a session got accepted, with its provenance, in the `kernels`
// family. Its keys start with the operator id, so the library answers by prefix which operators
// it covers and which kernels one operator has. The library also owns `validations` (verdicts on
// a kernel per toolchain, keyed by `validation_key` over the source hash and the toolchain
// fingerprint): an accepted kernel's first validation is its acceptance test, and re-validation
// on another toolchain adds more.

#include "messages/contract.hpp"
#include "messages/store_messages.hpp"
#include "messages/write_batch.hpp"

#include <cstdint>
#include <map>
#include <optional>
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
  std::vector<std::string> aten_overloads;           // what the operator dispatches to (catalog)
  // Provenance: where it came from and what it took. `origin` is "campaign", "repair" or
  // "imported:<source>"; records older than it are "" and came from campaigns.
  std::string origin;
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
  std::map<std::string, std::string> toolchain_versions; // python, torch, triton...: its hello
  std::string device_kind;
  int64_t accepted_at_ms = 0; // wall clock
  // Its benchmark timings, one per toolchain fingerprint, device kind, dtype and shape class,
  // in `merge_timings` order; records older than them have none.
  std::vector<contract::kernel_timing> timings;
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

/// The validation that accepted `kernel`: a pass on its toolchain, with its test counts.
contract::toolchain_proof acceptance_proof(const kernel_record& kernel);

/// The `validations` value of a verdict, and back. Decoding errors are errc::store_corrupt.
std::string encode_proof(const contract::toolchain_proof& proof);
caf::expected<contract::toolchain_proof> decode_proof(std::string_view bytes);

/// The write that records `proof` for the kernel whose source hashes to `kernel_hash`.
write_op add_validation(std::string_view kernel_hash, const contract::toolchain_proof& proof);

/// The writes that put an accepted kernel in the library: the kernel and its acceptance as its
/// first validation. They belong in one batch (with the session's SUCCESS, for a session).
std::vector<write_op> accept_kernel(const kernel_record& kernel);

/// The contract's view of a stored kernel, with its validations (newest first).
contract::library_kernel to_library_kernel(const kernel_record& kernel,
                                           std::vector<contract::toolchain_proof> proofs);

/// A kernel record from the contract's view (what `opforge import` hands the library), stamped
/// with `proof`, its first validation.
kernel_record from_library_kernel(const contract::library_kernel& kernel,
                                  const contract::toolchain_proof& proof);

/// `kept` with `fresh` in it: a fresh timing replaces a kept one of the same fingerprint, device
/// kind, dtype and shape class. Ordered by those four, so a record reads the same however its
/// timings arrived.
std::vector<contract::kernel_timing>
merge_timings(std::vector<contract::kernel_timing> kept,
              const std::vector<contract::kernel_timing>& fresh);

/// The timer of a benchmark on the interpreter (benchmark_result.timer, messages/contract.yaml):
/// its timings check the protocol's logic and measure no kernel, so they are no speed verdict.
inline constexpr std::string_view logic_only_timer = "perf_counter";

/// A benchmark's timings as the library keeps them: one per dtype and shape class of
/// `result.timings`, the medians over its inputs that are not launch-bound (over all of them,
/// marked launch-bound, where every input is), with the largest relative IQR of either side as
/// its noise, stamped with the toolchain it ran on and `measured_at_ms`. Empty unless the
/// benchmark passed: a timing whose outputs were wrong, or a timing check fired, is no timing.
std::vector<contract::kernel_timing> class_timings(const contract::benchmark_result& result,
                                                   const std::string& fingerprint,
                                                   const std::string& device_kind,
                                                   int64_t measured_at_ms);

/// The timings of `timings` measured on `device_kind` and, unless it is "", on `fingerprint`.
std::vector<contract::kernel_timing> timings_on(const std::vector<contract::kernel_timing>& timings,
                                                const std::string& device_kind,
                                                const std::string& fingerprint);

/// How long kernel `a` takes relative to kernel `b` (< 1: faster), from their timings on one
/// toolchain: the geometric mean of a's time over b's per dtype and shape class both were timed
/// on, over the classes that are not launch-bound (which measure the launch, not the kernel)
/// unless every shared class is. Nothing when they share no class.
std::optional<double> relative_time(const std::vector<contract::kernel_timing>& a,
                                    const std::vector<contract::kernel_timing>& b);

/// The operator ids that have an accepted kernel, from the entries of a scan of `kernels`.
std::set<std::string> covered_operators(const std::vector<key_value>& kernels);

} // namespace opforge
