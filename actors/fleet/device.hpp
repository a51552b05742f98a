#pragma once

#include "devices/worker_outbox.hpp"
#include "messages/actors.hpp"

#include <chrono>
#include <cstdint>
#include <memory>
#include <string>

#include <caf/stateful_actor.hpp>
#include <caf/typed_event_based_actor.hpp>

namespace opforge {

struct device_state {
  static inline const char* name = "device";
  std::string identity;
  std::shared_ptr<worker_outbox> outbox;
  std::chrono::milliseconds heartbeat{1000};
  int64_t liveness = 3;
  int64_t beats_left = 3; // heartbeat intervals the worker may still stay silent for
};

/// One registered worker (paranoid pirate, zguide ch. 4): sends `welcome`, then a heartbeat
/// every `heartbeat`, and quits with errc::worker_lost ("missed 3 heartbeats") once the worker
/// has sent nothing for `liveness` intervals. The device manager monitors it.
device_actor::behavior_type device(device_actor::stateful_pointer<device_state> self,
                                   std::string identity, std::shared_ptr<worker_outbox> outbox,
                                   std::chrono::milliseconds heartbeat, int64_t liveness);

} // namespace opforge
