#include "messages/system_config.hpp"

// CAF 0.17 deserializes a vector's items into a default-initialized local, which GCC takes for
// uninitialized when the item is an enum (wire::hello's job kinds).
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"

#include "messages/device_messages.hpp"
#include "messages/errors.hpp"
#include "messages/library_messages.hpp"
#include "messages/llm_messages.hpp"
#include "messages/session_messages.hpp"
#include "messages/store_messages.hpp"
#include "messages/type_ids.hpp"
#include "messages/wire.hpp"
#include "messages/write_batch.hpp"

#include <caf/atom.hpp>

namespace opforge {

system_config::system_config(scheduling mode) {
  add_message_types<caf::id_block::opforge>();
  register_error_category(*this);
  set("logger.file-verbosity", caf::atom("quiet"));
  set("logger.console-verbosity", caf::atom("quiet"));
  if (mode == scheduling::deterministic)
    set("scheduler.policy", caf::atom("testing"));
}

} // namespace opforge
