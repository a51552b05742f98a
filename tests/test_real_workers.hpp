#pragma once

// Real Python workers (opforge_worker from this source tree) for end-to-end tests.

#include "devices/supervisor.hpp"

#include <cstdlib>
#include <string>
#include <vector>

namespace opforge::testing {

/// Where opforge_worker is imported from: the source tree, or OPFORGE_WORKER_SRC.
inline std::string worker_source() {
  if (auto* src = std::getenv("OPFORGE_WORKER_SRC"))
    return src;
  return OPFORGE_SOURCE_DIR "/worker";
}

/// Supervises `specs` as real workers that connect to the device manager bound at `bound`.
inline supervisor_config real_workers(std::vector<local_worker_spec> specs,
                                      const std::string& bound) {
  supervisor_config workers;
  workers.workers = std::move(specs);
  workers.endpoint = connect_endpoint(bound);
  workers.python = OPFORGE_PYTHON;
  workers.command = [workers](const local_worker_spec& spec) {
    auto command = worker_command(workers, spec);
    command.insert(command.begin(), {"/usr/bin/env", "PYTHONPATH=" + worker_source()});
    return command;
  };
  return workers;
}

} // namespace opforge::testing
