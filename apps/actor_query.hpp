#pragma once

// Asking an actor from a plain thread (main, the control thread) and waiting, bounded: those
// threads must go on even when an actor does not answer.

#include "messages/errors.hpp"

#include <chrono>
#include <utility>

#include <caf/actor_system.hpp>
#include <caf/expected.hpp>
#include <caf/scoped_actor.hpp>
#include <caf/sec.hpp>

namespace opforge {

template <class Result, class Handle, class... Ts>
caf::expected<Result> ask(caf::actor_system& sys, std::chrono::milliseconds bound,
                          const Handle& target, Ts&&... xs) {
  caf::scoped_actor self{sys};
  caf::expected<Result> result{caf::make_error(caf::sec::request_timeout)};
  self->request(target, bound, std::forward<Ts>(xs)...)
      .receive([&](Result& reply) { result = std::move(reply); },
               [&](caf::error& err) { result = std::move(err); });
  return result;
}

} // namespace opforge
