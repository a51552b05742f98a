#pragma once

// Helpers shared by the store tests: a temporary directory and error inspection.

#include "messages/errors.hpp"

#include <cstdlib>
#include <filesystem>
#include <optional>
#include <stdexcept>
#include <string>

#include <caf/atom.hpp>
#include <caf/error.hpp>

namespace opforge::test {

/// A fresh directory, removed with its content when the test ends.
class temp_dir {
public:
  temp_dir() {
    auto pattern = (std::filesystem::temp_directory_path() / "opforge-store-XXXXXX").string();
    if (!mkdtemp(pattern.data()))
      throw std::runtime_error{"mkdtemp failed for " + pattern};
    path_ = pattern;
  }

  temp_dir(const temp_dir&) = delete;
  temp_dir& operator=(const temp_dir&) = delete;

  ~temp_dir() {
    std::error_code ignored;
    std::filesystem::remove_all(path_, ignored);
  }

  const std::filesystem::path& path() const { return path_; }

  /// A database directory inside this one.
  std::filesystem::path db() const { return path_ / "db"; }

private:
  std::filesystem::path path_;
};

/// The opforge code of `err`, or nothing when it is not an opforge error.
inline std::optional<errc> opforge_code(const caf::error& err) {
  if (err.category() != caf::atom("opforge"))
    return std::nullopt;
  return static_cast<errc>(err.code());
}

} // namespace opforge::test
