#pragma once

#include <caf/actor_system_config.hpp>

namespace opforge {

/// The actor-system configuration of every opforge process, test and benchmark: every message
/// type of the type-id block and opforge's error category registered, CAF's own logger quiet
/// (opforge logs with spdlog). Registering the block needs every message type complete, which is
/// why this lives in the top layer and includes them all.
class system_config : public caf::actor_system_config {
public:
  enum class scheduling {
    threaded,
    /// CAF's test coordinator: nothing runs and no time passes until a test says so.
    deterministic,
  };

  explicit system_config(scheduling mode = scheduling::threaded);
};

} // namespace opforge
