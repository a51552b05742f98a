#pragma once

// `opforge import DIR`: the CLI reads a kernel set (the daemon may run on another host), sends it
// to the daemon in parts that fit the control socket, follows the tests and lists every verdict.

#include "messages/import_messages.hpp"

#include <chrono>
#include <string>

#include <CLI/CLI.hpp>

namespace opforge {

struct import_options {
  std::string dir;
  import_layout layout = import_layout::candidates;
  std::string device;
  std::string dtypes; // comma-separated
  std::string source; // default: the directory's name
  bool repair = false;

  void add_to(CLI::App& cmd);
};

/// Imports the kernel set, follows it to its end and prints the verdicts (the final status as
/// JSON with `json`). Exit status: 0 when the import ended, whatever its verdicts; 1 when the
/// daemon refused it, failed it or went away; 2 when the directory cannot be read or holds a
/// file too large for a control request.
int run_import(const std::string& control, const import_options& options, bool json,
               std::chrono::milliseconds timeout);

} // namespace opforge
