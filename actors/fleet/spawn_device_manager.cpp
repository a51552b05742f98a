#include "actors/fleet/spawn_device_manager.hpp"

#include "devices/worker_io.hpp"

namespace opforge {

caf::expected<device_manager_actor> spawn_device_manager(caf::actor_system& system,
                                                         const device_manager_config& config,
                                                         std::shared_ptr<metrics> metrics) {
  auto io = worker_io::bind(metrics, config.max_frame_bytes, config.listen, config.auth);
  if (!io)
    return io.error();
  auto manager = system.spawn(device_manager, config, std::move(metrics), *io);
  (*io)->start(manager);
  return manager;
}

} // namespace opforge
