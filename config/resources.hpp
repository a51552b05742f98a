#pragma once

#include <filesystem>
#include <string_view>

namespace opforge {

/// A file or directory shipped under the repository's `config/` (prompts, worked examples, the
/// demo cassette): the build's absolute path, so that the daemon finds it from any working
/// directory. Paths a user configures are taken as given (relative to the working directory).
std::filesystem::path resource_path(std::string_view relative);

} // namespace opforge
