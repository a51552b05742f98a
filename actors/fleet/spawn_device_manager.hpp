#pragma once

#include "actors/fleet/device_manager.hpp"

#include <memory>

#include <caf/actor_system.hpp>
#include <caf/expected.hpp>

namespace opforge {

/// Binds the workers socket (`config.listen`), starts its I/O thread and spawns the device
/// manager on it. A bind failure is an error naming the address. Stop it with `atom::shutdown`
/// (it says goodbye to the workers, answers every unfinished job and joins the I/O thread);
/// the actor system cannot shut down while it runs.
caf::expected<device_manager_actor> spawn_device_manager(caf::actor_system& system,
                                                         const device_manager_config& config,
                                                         std::shared_ptr<metrics> metrics);

} // namespace opforge
