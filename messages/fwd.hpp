#pragma once

// Forward declarations of every message type, so that `type_ids.hpp` can register them without
// pulling in their definitions.

namespace opforge {

// -- persistence
// -----------------------------------------------------------------------------------

// -- devices
// ---------------------------------------------------------------------------------------

// -- control and metrics
// ---------------------------------------------------------------------------

// -- llm endpoints and summarizer
// ------------------------------------------------------------------

// -- sessions and campaigns
// ------------------------------------------------------------------------

} // namespace opforge
