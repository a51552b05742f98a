#pragma once

// Forward declarations of every message type, so that `type_ids.hpp` can register them without
// pulling in their definitions.

#include <cstdint>
#include <string>
#include <vector>

namespace opforge {

// -- persistence
// -----------------------------------------------------------------------------------

enum class family : uint8_t;
struct write_batch;
struct stored_value;
struct key_value;
struct store_status;

// -- devices
// ---------------------------------------------------------------------------------------

// -- control and metrics
// ---------------------------------------------------------------------------

// -- llm endpoints and summarizer
// ------------------------------------------------------------------

// -- sessions and campaigns
// ------------------------------------------------------------------------
struct session_summary;
struct campaign_status;

} // namespace opforge
