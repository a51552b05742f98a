#pragma once

#include <filesystem>
#include <string_view>

namespace opforge {

/// Where the daemon's shipped data lives (prompts, worked examples, the demo cassette):
/// OPFORGE_CONFIG_DIR when set; else `<prefix>/share/opforge` for a binary installed with
/// `cmake --install`, found from the executable's own path; else the repository's `config/` for a
/// binary run from its build tree. Resolved once, so that every part of a process reads the same
/// data.
const std::filesystem::path& resource_dir();

/// A file or directory under `resource_dir()`, absolute, so that the daemon finds it from any
/// working directory. Paths a user configures are taken as given (relative to the working
/// directory).
std::filesystem::path resource_path(std::string_view relative);

} // namespace opforge
