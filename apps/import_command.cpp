#include "apps/import_command.hpp"

#include "apps/cli_common.hpp"
#include "apps/control_client.hpp"
#include "apps/import_views.hpp"
#include "messages/device_kind.hpp"
#include "messages/errors.hpp"
#include "messages/utc_time.hpp"

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <optional>
#include <sstream>
#include <thread>
#include <vector>

#include <unistd.h>

namespace opforge {

namespace {

namespace fs = std::filesystem;

constexpr int exit_refused = 1;
constexpr int exit_unreadable = 2;
// As `opforge run` with operators failed: the import ran to its end and refused some kernels,
// so scripts tell it from one that took every kernel (0).
constexpr int exit_kernels_refused = 3;

// Room in a request for everything but the files' paths and sources: the other keys and each
// file's map and string headers.
constexpr size_t request_overhead = 4096;
constexpr size_t per_file_overhead = 32;

struct kernel_file {
  std::string path; // relative to the directory
  std::string source;
};

caf::expected<std::string> slurp(const fs::path& path) {
  std::ifstream in{path, std::ios::binary};
  if (!in)
    return caf::make_error(errc::request_invalid, path.string() + ": cannot read it");
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

std::vector<fs::path> sorted_entries(const fs::path& dir) {
  std::vector<fs::path> out;
  for (const auto& entry : fs::directory_iterator{dir})
    out.push_back(entry.path());
  std::sort(out.begin(), out.end());
  return out;
}

// The files of a kernel set in `layout`. A BackendBench folder without an implementation file is
// sent with no source, so that the daemon lists it with the others.
caf::expected<std::vector<kernel_file>> read_kernel_set(const fs::path& dir, import_layout layout) {
  std::error_code ec;
  if (!fs::is_directory(dir, ec))
    return caf::make_error(errc::request_invalid, dir.string() + ": not a directory");
  std::vector<kernel_file> out;
  for (const auto& entry : sorted_entries(dir)) {
    auto name = entry.filename().string();
    if (layout == import_layout::candidates) {
      if (fs::is_regular_file(entry) && entry.extension() == ".py") {
        auto source = slurp(entry);
        if (!source)
          return source.error();
        out.push_back({name, std::move(*source)});
      }
      continue;
    }
    if (!fs::is_directory(entry))
      continue;
    // As BackendBench's DirectoryBackend: the first implementation file by name.
    std::optional<fs::path> chosen;
    for (const auto& file : sorted_entries(entry))
      if (!chosen && fs::is_regular_file(file) && file.extension() == ".py" &&
          file.filename().string().rfind(name + "_implementation", 0) == 0)
        chosen = file;
    if (!chosen) {
      out.push_back({name + "/", ""});
      continue;
    }
    auto source = slurp(*chosen);
    if (!source)
      return source.error();
    out.push_back({name + "/" + chosen->filename().string(), std::move(*source)});
  }
  if (out.empty())
    return caf::make_error(errc::request_invalid,
                           dir.string() + ": no kernels in the " + to_string(layout) + " layout (" +
                               (layout == import_layout::candidates
                                    ? "*.py files"
                                    : "<overload>/<overload>_implementation*.py, or "
                                      "<op>/<op>_implementation*.py in the older layout") +
                               ")");
  return out;
}

// The files in parts that each fit one control request.
caf::expected<std::vector<std::vector<kernel_file>>> parts_of(std::vector<kernel_file> files,
                                                              const fs::path& dir) {
  const size_t room = control_max_request_bytes - request_overhead;
  std::vector<std::vector<kernel_file>> parts(1);
  size_t used = 0;
  for (auto& file : files) {
    auto size = file.path.size() + file.source.size() + per_file_overhead;
    if (size > room)
      return caf::make_error(errc::request_invalid,
                             (dir / file.path).string() + " is " + std::to_string(size) +
                                 " bytes; a control request carries at most " +
                                 std::to_string(room) + " bytes of kernels, so it cannot be sent");
    if (used + size > room || parts.back().size() == max_import_files_per_request) {
      parts.emplace_back();
      used = 0;
    }
    used += size;
    parts.back().push_back(std::move(file));
  }
  return parts;
}

std::vector<std::string> split(const std::string& text) {
  std::vector<std::string> out;
  std::stringstream items{text};
  for (std::string item; std::getline(items, item, ',');)
    if (!item.empty())
      out.push_back(item);
  return out;
}

// The reply's state; an answer that names none the CLI knows is the daemon's fault, said as such.
caf::expected<import_state> state_of(const nlohmann::json& s) {
  auto name = s.value("state", std::string{});
  if (auto state = from_string<import_state>(name))
    return *state;
  return caf::make_error(errc::frame_malformed, "the daemon answered with an import state '" +
                                                    name + "', not one of " +
                                                    contract::one_of<import_state>());
}

bool installed_backend(const nlohmann::json& s) {
  return from_string<import_layout>(s.value("layout", std::string{})) ==
         import_layout::torch_library;
}

std::string progress_line(const nlohmann::json& s, import_state state) {
  auto name = to_string(state);
  if (installed_backend(s) && state == import_state::testing)
    return name + ": a device worker is judging what the package registers, every sample set";
  if (state == import_state::receiving || state == import_state::resolving)
    return name + ": " + std::to_string(s.value("files", 0)) +
           " files; a worker is reading the catalog for their operators";
  return name + ": " + std::to_string(s.value("decided", 0)) + "/" +
         std::to_string(s.value("tests", 0)) + " decided, " +
         std::to_string(s.value("accepted", 0)) + " accepted";
}

std::vector<std::string> layout_names() {
  auto& names = contract::enum_traits<import_layout>::names;
  return {names.begin(), names.end()};
}

// Whether any kernel was turned away: each verdict but pass, present (in the library already)
// and unjudged (a backend's overload that no OpInfo reaches).
bool refused(const nlohmann::json& s) {
  auto verdicts = s.value("verdicts", nlohmann::json::array());
  return std::any_of(verdicts.begin(), verdicts.end(), [](const nlohmann::json& v) {
    auto verdict = from_string<import_outcome>(v.value("verdict", std::string{}));
    return verdict != to_import_outcome(contract::outcome::pass) &&
           verdict != import_outcome::present && verdict != import_outcome::unjudged;
  });
}

void print_verdicts(const nlohmann::json& s) {
  auto verdicts = s.value("verdicts", nlohmann::json::array());
  std::vector<nlohmann::json> rows{verdicts.begin(), verdicts.end()};
  std::sort(rows.begin(), rows.end(), [](const auto& a, const auto& b) {
    return std::pair{a.value("path", ""), a.value("op", "")} <
           std::pair{b.value("path", ""), b.value("op", "")};
  });
  size_t width = 0;
  for (const auto& v : rows)
    width = std::max(width, v.value("verdict", std::string{}).size());
  for (const auto& v : rows) {
    auto verdict = v.value("verdict", std::string{});
    auto op = v.value("op", std::string{});
    std::cout << "  " << verdict << std::string(width - verdict.size() + 2, ' ')
              << v.value("path", "") << (op.empty() ? "" : " as " + op);
    auto detail = v.value("detail", std::string{});
    std::cout << (detail.empty() ? "" : ": " + detail) << '\n';
  }
  auto state = s.value("state", std::string{});
  std::cout << "import " << s.value("import_id", "") << " " << state << ": ";
  if (installed_backend(s)) {
    auto unjudged = std::count_if(rows.begin(), rows.end(), [](const nlohmann::json& v) {
      return from_string<import_outcome>(v.value("verdict", std::string{})) ==
             import_outcome::unjudged;
    });
    std::cout << s.value("accepted", 0) << " of " << s.value("tests", 0) - unjudged
              << " judged overloads passed (" << s.value("tests", 0) << " registered, " << unjudged
              << " reached by no OpInfo); the package's kernels stay in the package\n";
  } else {
    std::cout << s.value("accepted", 0) << " of " << s.value("tests", 0)
              << " kernels passed and entered the library as imported:" << s.value("source", "")
              << '\n';
  }
  if (!s.value("error", std::string{}).empty())
    std::cout << "  " << s.value("error", "") << '\n';
  auto repair = s.value("repair_campaign", std::string{});
  if (!repair.empty())
    std::cout << "repair campaign " << repair
              << " started with the failing kernels as seeds: follow it with `opforge attach "
              << repair << "`\n";
}

} // namespace

CLI::App* import_options::add_to(CLI::App& cmd) {
  cmd.add_option("DIR", dir, "the kernel set's directory (none for torch-library)");
  cmd.add_option_function<std::string>(
         "--layout",
         [this](const std::string& name) { layout = *from_string<import_layout>(name); },
         "backendbench (one folder per aten overload, or per aten op in BackendBench's older "
         "layout), candidates, or torch-library (an installed package: --package)")
      ->check(CLI::IsMember(layout_names()));
  cmd.add_option("--device", device, "where kernels are tested: a device kind, e.g. cuda")
      ->check([](const std::string& kind) {
        return is_device_kind(kind) ? "" : "a device kind is " + std::string{device_kind_rule};
      });
  cmd.add_option("--dtypes", dtypes, "comma-separated dtypes (default: campaigns.dtypes)");
  cmd.add_option("--source", source,
                 "provenance: kernels enter the library as imported:<source> (default: DIR's "
                 "name)");
  cmd.add_option("--package", package,
                 "torch-library: the installed package the device worker imports, e.g. flag_gems");
  cmd.add_option("--enable", enable,
                 "torch-library: the call that enables it, module.function (default: "
                 "PACKAGE.enable)");
  cmd.add_option("--ops", ops,
                 "torch-library: only these OpInfos, comma-separated (default: the catalog's; a "
                 "worker's first survey of the whole catalog takes minutes)");
  cmd.add_flag("--repair", repair,
               "start a campaign of sessions seeded with each failing kernel and its failure");
  auto* show = cmd.add_subcommand("show", "a stored import's status and every verdict");
  show->add_option("ID", show_id, "the import's id (opforge imports lists them)")->required();
  return show;
}

int run_import(const std::string& control, const import_options& options, bool json,
               std::chrono::milliseconds timeout) {
  using cli::fail;
  if (!options.layout)
    return fail(caf::make_error(errc::request_invalid, "import: name the kernel set's --layout (" +
                                                           contract::one_of<import_layout>() + ")"),
                exit_unreadable);
  auto layout = *options.layout;
  fs::path dir{options.dir};
  bool installed = layout == import_layout::torch_library;
  auto wrong_options = [&]() -> std::string {
    if (installed && options.package.empty())
      return "--layout torch-library judges an installed package: name it with --package";
    if (installed && !options.dir.empty())
      return "--layout torch-library takes no DIR (got " + options.dir + "): the worker imports " +
             options.package;
    if (!installed && options.dir.empty())
      return "name the kernel set's DIR";
    if (!installed && (!options.package.empty() || !options.enable.empty() || !options.ops.empty()))
      return "--package, --enable and --ops go with --layout torch-library";
    return "";
  }();
  if (!wrong_options.empty())
    return fail(caf::make_error(errc::request_invalid, wrong_options), exit_unreadable);
  std::vector<std::vector<kernel_file>> parts{{}};
  if (!installed) {
    auto files = read_kernel_set(dir, layout);
    if (!files)
      return fail(files.error(), exit_unreadable);
    auto split_files = parts_of(std::move(*files), dir);
    if (!split_files)
      return fail(split_files.error(), exit_unreadable);
    parts = std::move(*split_files);
  }
  auto source = options.source;
  if (source.empty() && installed) {
    source = options.package;
  } else if (source.empty()) {
    auto canonical = fs::weakly_canonical(fs::absolute(dir));
    source = (canonical.has_filename() ? canonical : canonical.parent_path()).filename().string();
  }
  std::string id;
  for (size_t i = 0; i < parts.size(); ++i) {
    auto listed = nlohmann::json::array();
    for (const auto& file : parts[i])
      listed.push_back({{"path", file.path}, {"source", file.source}});
    nlohmann::json request{{"id", id},
                           {"more", i + 1 < parts.size()},
                           {"layout", to_string(layout)},
                           {"source", source},
                           {"device_kind", options.device},
                           {"dtypes", split(options.dtypes)},
                           {"repair", options.repair},
                           {"files", std::move(listed)}};
    if (installed)
      request.update(
          {{"package", options.package}, {"enable", options.enable}, {"ops", split(options.ops)}});
    auto reply = control_request(control, request_type::import, std::move(request), timeout);
    if (!reply)
      return fail(reply.error(), exit_refused);
    id = (*reply)["import"].value("import_id", id);
  }
  bool tty = ::isatty(STDOUT_FILENO) && !json;
  if (!json && installed)
    std::cout << "import " << id << ": the installed backend " << options.package
              << ", judged through the dispatcher\n";
  else if (!json)
    std::cout << "import " << id << ": " << to_string(layout) << " kernels from " << dir.string()
              << " as imported:" << source << '\n';
  std::string last_line;
  for (;;) {
    auto reply = control_request(control, request_type::import_status, {{"id", id}}, timeout);
    if (!reply) {
      if (tty)
        std::cout << '\n';
      return fail(reply.error(), exit_refused);
    }
    auto status = (*reply)["import"];
    auto state = state_of(status);
    if (!state) {
      if (tty)
        std::cout << '\n';
      return fail(state.error(), exit_refused);
    }
    if (!json) {
      auto line = progress_line(status, *state);
      if (tty)
        std::cout << "\r\033[K" << line << std::flush;
      else if (line != last_line)
        std::cout << line << std::endl;
      last_line = line;
    }
    if (ended(*state)) {
      if (json) {
        std::cout << status.dump(2) << '\n';
      } else {
        if (tty)
          std::cout << '\n';
        print_verdicts(status);
      }
      if (*state != import_state::done)
        return exit_refused;
      return refused(status) ? exit_kernels_refused : 0;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds{300});
  }
}

int show_import(const std::string& control, const std::string& id, bool json,
                std::chrono::milliseconds timeout) {
  auto reply = control_request(control, request_type::import_status, {{"id", id}}, timeout);
  if (!reply)
    return cli::fail(reply.error(), exit_refused);
  const auto& status = (*reply)["import"];
  if (json)
    std::cout << status.dump(2) << '\n';
  else
    print_verdicts(status);
  return 0;
}

int list_imports(const std::string& control, bool json, std::chrono::milliseconds timeout) {
  auto reply = control_request(control, request_type::imports, {}, timeout);
  if (!reply)
    return cli::fail(reply.error(), exit_refused);
  auto imports = reply->value("imports", nlohmann::json::array());
  if (json) {
    std::cout << imports.dump(2) << '\n';
    return 0;
  }
  if (imports.empty()) {
    std::cout << "no imports in this daemon's store\n";
    return 0;
  }
  std::vector<std::vector<std::string>> rows{
      {"IMPORT", "STATE", "LAYOUT", "SOURCE", "DEVICE", "ACCEPTED", "OPENED (UTC)", "ERROR"}};
  for (const auto& s : imports)
    rows.push_back(
        {s.value("import_id", ""), s.value("state", ""), s.value("layout", ""),
         s.value("source", ""), s.value("device_kind", ""),
         std::to_string(s.value("accepted", 0)) + "/" + std::to_string(s.value("tests", 0)),
         utc_minute(s.value("created_ms", int64_t{0})), s.value("error", std::string{})});
  cli::print_table(rows);
  return 0;
}

} // namespace opforge
