#pragma once

#include "messages/errors.hpp"
#include "messages/type_ids.hpp"

#include <caf/actor_system_config.hpp>

namespace opforge {

/// The actor system of the device tests: opforge's message types and errors registered, CAF's
/// own logger quiet, and with `deterministic`, CAF's test scheduler (time moves when told to).
struct device_test_config : caf::actor_system_config {
  explicit device_test_config(bool deterministic = false) {
    add_message_types<caf::id_block::opforge>();
    register_error_category(*this);
    set("logger.file-verbosity", caf::atom("quiet"));
    if (deterministic)
      set("scheduler.policy", caf::atom("testing"));
  }
};

} // namespace opforge
