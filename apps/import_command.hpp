#pragma once

// `opforge import DIR`: the CLI reads a kernel set (the daemon may run on another host), sends it
// to the daemon in parts that fit the control socket, follows the tests and lists every verdict.
// `opforge import --layout torch-library --package NAME` sends no files: a device worker imports
// the installed package and judges what it registers.

#include "messages/import_messages.hpp"

#include <chrono>
#include <optional>
#include <string>

#include <CLI/CLI.hpp>

namespace opforge {

struct import_options {
  std::string dir;
  std::optional<import_layout> layout;
  std::string device;
  std::string dtypes;  // comma-separated
  std::string source;  // default: the directory's name, or the package's
  std::string package; // torch-library: the installed package
  std::string enable;  // torch-library: its enable call ("" = package.enable)
  std::string ops;     // torch-library: only these OpInfos, comma-separated
  bool repair = false;
  std::string show_id; // `opforge import show ID`

  /// Adds the options to `cmd` and its `show ID` subcommand, which it returns.
  CLI::App* add_to(CLI::App& cmd);
};

/// Imports the kernel set, follows it to its end and prints the verdicts (the final status as
/// JSON with `json`). Exit status: 0 when the import ended with every kernel accepted (an
/// overload no OpInfo reaches is neither accepted nor refused); 3 when it ended with some
/// refused; 1 when the daemon refused it, failed it or went away; 2 when the directory cannot be
/// read or holds a file too large for a control request, or the options do not fit the layout.
int run_import(const std::string& control, const import_options& options, bool json,
               std::chrono::milliseconds timeout);

/// `opforge import show ID`: a stored import's status and every verdict, as `import` printed
/// them when it ended (JSON with `json`); `opforge imports`: one line per stored import, oldest
/// first. Exit status 0, or 1 when the daemon does not answer or knows no such import.
int show_import(const std::string& control, const std::string& id, bool json,
                std::chrono::milliseconds timeout);
int list_imports(const std::string& control, bool json, std::chrono::milliseconds timeout);

} // namespace opforge
