#pragma once

// Every typed actor interface of the daemon, one line of comment per handler (the style of
// tenzir/vast). Implementations live in one .hpp/.cpp pair per actor beside this file.

#include "messages/type_ids.hpp"

#include <caf/typed_actor.hpp>

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
