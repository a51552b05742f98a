#include "config/resources.hpp"

#include <cstdlib>
#include <system_error>

namespace opforge {

namespace {

// OPFORGE_CONFIG_DIR, which the worker honours too; else the installed layout, where the data
// sits at a fixed place relative to the executable (`<prefix>/bin/opforge` and
// `<prefix>/share/opforge`, wherever the prefix was moved); else the source tree the binary was
// built from, for a binary run from its build tree.
std::filesystem::path find_resource_dir() {
  std::error_code ec;
  if (const char* dir = std::getenv("OPFORGE_CONFIG_DIR"); dir && *dir) {
    auto absolute = std::filesystem::absolute(dir, ec);
    return ec ? std::filesystem::path{dir} : absolute;
  }
  auto exe = std::filesystem::read_symlink("/proc/self/exe", ec);
  if (!ec) {
    auto installed = (exe.parent_path() / OPFORGE_INSTALLED_DATA_DIR).lexically_normal();
    if (std::filesystem::is_directory(installed / "prompts", ec))
      return installed;
  }
  return OPFORGE_SOURCE_CONFIG_DIR;
}

} // namespace

const std::filesystem::path& resource_dir() {
  static const auto dir = find_resource_dir();
  return dir;
}

std::filesystem::path resource_path(std::string_view relative) {
  return resource_dir() / relative;
}

} // namespace opforge
