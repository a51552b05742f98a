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
struct chat_message;
struct chat_request;
struct chat_result;
struct token_usage;
struct endpoint_status;
struct http_exchange;
struct summary_request;
struct summary_result;

// -- sessions and campaigns
// ------------------------------------------------------------------------

} // namespace opforge
