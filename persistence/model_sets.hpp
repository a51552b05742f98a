#pragma once

// Model sample sets (`model:<name>`, a model's captured inputs per operator) as the daemon holds
// them: in `family::meta` under `model_set_key`, one value per operator, the worker's set file in
// base64 exactly as `opforge_library modelcheck --capture` put it in its report. The daemon never
// reads a file; it hands each test job its operator's (test_request.model_samples).

#include "messages/store_messages.hpp"
#include "messages/write_batch.hpp"

#include <cstddef>
#include <map>
#include <string>
#include <string_view>
#include <vector>

#include <caf/expected.hpp>

namespace opforge {

/// An operator's file, at most: a test job carries it in a frame of at most 16 MiB.
inline constexpr size_t model_set_max_operator_bytes = size_t{8} << 20;
/// A whole set, at most: it travels in one control request and is copied into each campaign.
inline constexpr size_t model_set_max_bytes = size_t{24} << 20;

/// Whether `name` names a model set: `model:` then 1 to 58 of a-z0-9_.-, as the worker checks.
bool is_model_set(std::string_view name);

/// Operator id -> base64 file.
using model_set_files = std::map<std::string, std::string>;

/// The batch that replaces set `set` by `files`, deleting `stored` (the set's keys now). Synced.
/// An errc::request_invalid error names a bad set name, operator id, base64, or the size cap.
caf::expected<write_batch> replace_model_set(std::string_view set, const model_set_files& files,
                                             const std::vector<key_value>& stored);

/// The files of a scan over `model_set_prefix(set)`, by operator id.
model_set_files read_model_set(std::string_view set, const std::vector<key_value>& entries);

} // namespace opforge
