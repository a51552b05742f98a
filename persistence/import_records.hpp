#pragma once

// An import as the store keeps it (family::meta, `import_key`): its status with every verdict, so
// that `opforge imports` and `opforge import show ID` answer after a restart as they did before.

#include "messages/import_messages.hpp"

#include <string>
#include <string_view>

#include <caf/expected.hpp>

namespace opforge {

/// The stored value of an import, and back. Decoding errors are errc::store_corrupt.
std::string encode_import(const import_status& status);
caf::expected<import_status> decode_import(std::string_view bytes);

} // namespace opforge
