#pragma once

// The one CAF type-id block of opforge: every atom and every message type that crosses an actor
// boundary is registered here, grouped by the part of the daemon that owns it. Register the block
// with `cfg.add_message_types<caf::id_block::opforge>()` (see `messages/register.hpp`).

#include "messages/fwd.hpp"

#include <caf/type_id.hpp>

CAF_BEGIN_TYPE_ID_BLOCK(opforge, caf::first_custom_type_id)

// -- common atoms --------------------------------------------------------------------------------
CAF_ADD_ATOM(opforge, opforge::atom, status, "status")
CAF_ADD_ATOM(opforge, opforge::atom, shutdown, "shutdown")
CAF_ADD_ATOM(opforge, opforge::atom, ok, "ok")

// -- persistence ---------------------------------------------------------------------------------

// -- devices -------------------------------------------------------------------------------------

// -- control and metrics -------------------------------------------------------------------------

// -- llm endpoints and summarizer ----------------------------------------------------------------
CAF_ADD_ATOM(opforge, opforge::atom, complete, "complete")
CAF_ADD_ATOM(opforge, opforge::atom, cancel, "cancel")
CAF_ADD_ATOM(opforge, opforge::atom, http_done, "http_done")
CAF_ADD_ATOM(opforge, opforge::atom, retry, "retry")
CAF_ADD_ATOM(opforge, opforge::atom, wakeup, "wakeup")
CAF_ADD_ATOM(opforge, opforge::atom, summarize, "summarize")
CAF_ADD_TYPE_ID(opforge, (opforge::chat_message))
CAF_ADD_TYPE_ID(opforge, (opforge::chat_request))
CAF_ADD_TYPE_ID(opforge, (opforge::chat_result))
CAF_ADD_TYPE_ID(opforge, (opforge::token_usage))
CAF_ADD_TYPE_ID(opforge, (opforge::endpoint_status))
CAF_ADD_TYPE_ID(opforge, (opforge::http_exchange))
CAF_ADD_TYPE_ID(opforge, (opforge::summary_request))
CAF_ADD_TYPE_ID(opforge, (opforge::summary_result))

// -- sessions and campaigns ----------------------------------------------------------------------

CAF_END_TYPE_ID_BLOCK(opforge)
