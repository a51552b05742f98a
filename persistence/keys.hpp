#pragma once

// Keys that sort usefully. Parts of a composite key are separated by a NUL byte, which sorts
// before every other byte: all keys of one id are contiguous (a prefix scan finds exactly them)
// and ids still sort among themselves as plain strings. Ids are text and never contain NUL.

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

namespace opforge {

/// The key under which `family::meta` holds the schema version (decimal text).
inline constexpr std::string_view schema_version_key = "schema_version";

/// The prefix shared by every composite key whose first part is `id`.
std::string prefix_of(std::string_view id);

/// How an operator is named in ids and keys: its OpInfo name, then `/variant` when it has one.
std::string operator_id(std::string_view op, std::string_view variant);

/// The `sessions` key of an operator's session in a campaign; a scan over `prefix_of(campaign)`
/// in that family yields the campaign's sessions.
std::string session_key(std::string_view campaign_id, std::string_view operator_id);

/// Key of event `seq` of session `session_id` in `family::events`. The sequence number is 8
/// big-endian bytes, so a prefix scan over `prefix_of(session_id)` yields events in order.
std::string event_key(std::string_view session_id, uint64_t seq);

/// The sequence number of an `event_key`, or nothing if `key` is not one.
std::optional<uint64_t> event_seq(std::string_view key);

/// Key of the verdict for kernel `kernel_hash` on toolchain `toolchain` in `family::validations`;
/// a scan over `prefix_of(kernel_hash)` yields the kernel's verdicts on every toolchain.
std::string validation_key(std::string_view kernel_hash, std::string_view toolchain);

/// Key of operator `operator_id`'s file in model set `set` (`model:<name>`) in `family::meta`; a
/// scan over `model_set_prefix(set)` yields the set's files.
std::string model_set_key(std::string_view set, std::string_view operator_id);
std::string model_set_prefix(std::string_view set);

/// The `family::meta` keys of the maintenance actor (actors/library/maintenance.hpp) start with
/// this; a prefix scan yields them all.
std::string maintenance_prefix();

/// Key in `family::meta` of the re-validation asked by hand of device kind `device_kind` on
/// toolchain `fingerprint`: verdicts older than the request do not count there.
std::string revalidation_request_key(std::string_view device_kind, std::string_view fingerprint);

/// Key in `family::meta` of the repair campaign started for the regression of kernel
/// `kernel_hash` on toolchain `fingerprint`, so no restart starts it again.
std::string repair_started_key(std::string_view kernel_hash, std::string_view fingerprint);

/// The `family::meta` keys of the toolchains' conformance reports start with this; a prefix
/// scan yields them all, by device kind and fingerprint.
std::string conformance_prefix();

/// Key in `family::meta` of the conformance report of device kind `device_kind`'s toolchain
/// `fingerprint` (what its workers' probes found, actors/library/library.hpp).
std::string conformance_key(std::string_view device_kind, std::string_view fingerprint);

/// The `family::meta` keys of the imports (actors/library/importer.hpp) start with this; a
/// prefix scan yields them all, in the order their ids sort (by when they were opened).
std::string imports_prefix();

/// Key in `family::meta` of import `import_id`'s status and verdicts.
std::string import_key(std::string_view import_id);

/// `key` for error messages: printable ASCII as is, other bytes as \xNN.
std::string printable(std::string_view key);

} // namespace opforge
