#include "actors/fleet/device.hpp"

#include "messages/errors.hpp"
#include "messages/wire.hpp"

namespace opforge {

device_actor::behavior_type device(device_actor::stateful_pointer<device_state> self,
                                   std::string identity, std::shared_ptr<worker_outbox> outbox,
                                   std::chrono::milliseconds heartbeat, int64_t liveness) {
  auto& st = self->state;
  st.identity = std::move(identity);
  st.outbox = std::move(outbox);
  st.heartbeat = heartbeat;
  st.liveness = liveness;
  st.beats_left = liveness;
  st.outbox->send(st.identity, wire::encode(wire::welcome{heartbeat.count(), liveness}));
  self->delayed_send(self, heartbeat, atom::tick_v);
  return {
      [=](atom::heartbeat) { self->state.beats_left = self->state.liveness; },
      [=](atom::dispatch, const wire::job& job) {
        self->state.outbox->send(self->state.identity, wire::encode(job));
      },
      [=](atom::cancel, const std::string& job_id) {
        self->state.outbox->send(self->state.identity, wire::encode(wire::cancel{job_id}));
      },
      [=](atom::tick) {
        auto& st = self->state;
        if (--st.beats_left <= 0) {
          self->quit(caf::make_error(errc::worker_lost,
                                     "missed " + std::to_string(st.liveness) + " heartbeats"));
          return;
        }
        st.outbox->send(st.identity, wire::encode(wire::daemon_heartbeat{}));
        self->delayed_send(self, st.heartbeat, atom::tick_v);
      },
  };
}

} // namespace opforge
