#include "config/config.hpp"

#include "messages/contract.hpp"
#include "messages/device_kind.hpp"
#include "messages/errors.hpp"

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <sstream>
#include <string_view>
#include <system_error>

#include <unistd.h>
#include <yaml-cpp/yaml.h>

namespace opforge {

namespace {

// A check on a parsed value: the complaint ("must be >= 1") or nothing.
template <class T>
using check = std::function<std::optional<std::string>(const T&)>;

std::string in_quotes(std::string_view text) {
  return "'" + std::string{text} + "'";
}

size_t edit_distance(std::string_view a, std::string_view b) {
  std::vector<size_t> row(b.size() + 1);
  for (size_t j = 0; j <= b.size(); ++j)
    row[j] = j;
  for (size_t i = 1; i <= a.size(); ++i) {
    size_t diagonal = row[0];
    row[0] = i;
    for (size_t j = 1; j <= b.size(); ++j) {
      size_t above = row[j];
      row[j] = std::min({row[j] + 1, row[j - 1] + 1, diagonal + (a[i - 1] == b[j - 1] ? 0 : 1)});
      diagonal = above;
    }
  }
  return row[b.size()];
}

// The closest known key, when it is close enough to be a plausible typo.
std::optional<std::string> closest(std::string_view key, const std::vector<std::string>& known) {
  std::optional<std::string> best;
  size_t best_distance = std::max<size_t>(2, key.size() / 3) + 1;
  for (auto& candidate : known)
    if (auto d = edit_distance(key, candidate); d < best_distance) {
      best = candidate;
      best_distance = d;
    }
  return best;
}

std::string env_name(std::string_view path) {
  std::string name = "OPFORGE_";
  for (char c : path)
    name += c == '.' ? '_' : static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
  return name;
}

const char* describe(const YAML::Node& node) {
  switch (node.Type()) {
  case YAML::NodeType::Map:
    return "a map";
  case YAML::NodeType::Sequence:
    return "a list";
  case YAML::NodeType::Null:
    return "nothing";
  default:
    return "a scalar";
  }
}

// Converts a YAML scalar to T; the complaint when it is not one.
template <class T>
std::optional<std::string> convert(const YAML::Node& node, T& out, const char* expected) {
  if (!node.IsScalar())
    return std::string{"must be "} + expected + ", got " + describe(node);
  try {
    out = node.as<T>();
    return std::nullopt;
  } catch (const YAML::Exception&) {
    return std::string{"must be "} + expected + ", got " + in_quotes(node.Scalar());
  }
}

std::optional<std::string> parse_value(const YAML::Node& node, std::string& out) {
  return convert(node, out, "a string");
}

std::optional<std::string> parse_value(const YAML::Node& node, int64_t& out) {
  return convert(node, out, "an integer");
}

std::optional<std::string> parse_value(const YAML::Node& node, bool& out) {
  return convert(node, out, "true or false");
}

std::optional<std::string> parse_value(const YAML::Node& node, double& out) {
  return convert(node, out, "a number");
}

// A count that may be left to whoever knows better: an integer >= 1, or `auto` (empty; a local
// worker's slots are its device kind's default, local_worker_config::slots).
std::optional<std::string> parse_value(const YAML::Node& node, std::optional<int64_t>& out) {
  static constexpr const char* expected = "an integer >= 1 or auto";
  if (node.IsScalar() && node.Scalar() == auto_setting) {
    out.reset();
    return std::nullopt;
  }
  int64_t count = 0;
  if (auto complaint = convert(node, count, expected))
    return complaint;
  if (count < 1)
    return std::string{"must be "} + expected + ", got " + std::to_string(count);
  out = count;
  return std::nullopt;
}

check<std::string> one_of(std::vector<std::string> choices);

// One of an enum's names, parsed to its value at load, so that no one after it compares the text.
template <contract::contract_enum E>
std::optional<std::string> parse_value(const YAML::Node& node, E& out) {
  std::string text;
  if (auto complaint = convert(node, text, "a string"))
    return complaint;
  if (auto value = from_string<E>(text)) {
    out = *value;
    return std::nullopt;
  }
  const auto& names = contract::enum_traits<E>::names;
  return one_of({names.begin(), names.end()})(text);
}

std::optional<std::string> parse_value(const YAML::Node& node, std::filesystem::path& out) {
  std::string text;
  if (auto complaint = convert(node, text, "a path"))
    return complaint;
  if (text.empty())
    return "must not be empty";
  out = text;
  return std::nullopt;
}

// Reads one map of the configuration (the top level, a section, or a list element). Every scalar
// key is looked up in the flags, then the environment, then the file; the first error sticks and
// later reads do nothing, so a section parser is a plain list of fields.
class reader {
public:
  reader(const config_sources& sources, std::string file, YAML::Node node, std::string path,
         bool overridable, caf::error& err)
      : sources_{sources}, file_{std::move(file)}, node_{std::move(node)}, path_{std::move(path)},
        overridable_{overridable}, err_{err} {
    if (!err_ && node_.IsDefined() && !node_.IsNull() && !node_.IsMap())
      fail(errc::config_invalid, origin(node_),
           in_quotes(path_) + " must be a map, got " + describe(node_));
  }

  template <class T>
  void field(std::string_view key, T& out, check<T> valid = {}) {
    known_.emplace_back(key);
    if (err_)
      return;
    auto path = join(key);
    auto [node, where] = lookup(key, path);
    if (!node.IsDefined())
      return;
    T value = out;
    auto complaint = parse_value(node, value);
    if (!complaint && valid)
      complaint = valid(value);
    if (complaint)
      return fail(errc::config_invalid, where, in_quotes(path) + " " + *complaint);
    out = std::move(value);
  }

  template <class Section>
  void section(std::string_view key, Section& out) {
    known_.emplace_back(key);
    if (err_)
      return;
    reader nested{sources_, file_, child(key), join(key), overridable_, err_};
    parse(nested, out);
    nested.finish();
  }

  // A section whose parser lives with its subsystem and reports its own key paths and unknown
  // keys (e.g. `llm`, config/endpoint_config.hpp).
  template <class Section, class Parse>
  void delegate(std::string_view key, Section& out, Parse parse_section) {
    known_.emplace_back(key);
    if (err_)
      return;
    auto node = child(key);
    if (!node.IsDefined() || node.IsNull())
      return;
    auto parsed = parse_section(node, join(key));
    if (!parsed) {
      err_ = std::move(parsed.error());
      return;
    }
    out = std::move(*parsed);
  }

  template <class Element>
  void list(std::string_view key, std::vector<Element>& out) {
    known_.emplace_back(key);
    if (err_)
      return;
    auto node = child(key);
    if (!node.IsDefined())
      return;
    if (!node.IsSequence() && !node.IsNull())
      return fail(errc::config_invalid, origin(node),
                  in_quotes(join(key)) + " must be a list, got " + describe(node));
    std::vector<Element> elements(node.size());
    for (size_t i = 0; i < elements.size() && !err_; ++i) {
      auto path = join(key) + "[" + std::to_string(i) + "]";
      reader element{sources_, file_, node[i], path, false, err_};
      parse(element, elements[i]);
      element.finish();
    }
    if (!err_)
      out = std::move(elements);
  }

  // Rejects keys no parser asked for, suggesting the known key the user probably meant.
  void finish() {
    if (err_ || !node_.IsMap())
      return;
    for (auto kv : node_) {
      auto key = kv.first.Scalar();
      if (std::find(known_.begin(), known_.end(), key) != known_.end())
        continue;
      auto text = "unknown key " + in_quotes(join(key));
      if (auto guess = closest(key, known_)) {
        text += " (did you mean " + in_quotes(join(*guess)) + "?)";
      } else {
        std::string keys;
        for (auto& k : known_)
          keys += (keys.empty() ? "" : ", ") + k;
        text += " (known keys here: " + keys + ")";
      }
      return fail(errc::config_unknown_key, origin(kv.first), text);
    }
  }

private:
  std::string join(std::string_view key) const {
    return path_.empty() ? std::string{key} : path_ + "." + std::string{key};
  }

  YAML::Node child(std::string_view key) const {
    if (!node_.IsMap())
      return YAML::Node{YAML::NodeType::Undefined};
    for (auto kv : node_)
      if (kv.first.Scalar() == key)
        return kv.second;
    return YAML::Node{YAML::NodeType::Undefined};
  }

  std::string origin(const YAML::Node& node) const {
    auto mark = node.Mark();
    return mark.is_null() ? file_ : file_ + ":" + std::to_string(mark.line + 1);
  }

  // The value of a scalar key and where it came from, by precedence.
  std::pair<YAML::Node, std::string> lookup(std::string_view key, const std::string& path) const {
    if (overridable_) {
      if (auto i = sources_.flags.find(path); i != sources_.flags.end())
        return {YAML::Node{i->second.value}, i->second.flag};
      auto name = env_name(path);
      if (auto value = sources_.env ? sources_.env(name) : std::nullopt)
        return {YAML::Node{*value}, "environment " + name};
    }
    auto node = child(key);
    return {node, origin(node)};
  }

  void fail(errc code, const std::string& where, const std::string& what) {
    err_ = caf::make_error(code, where + ": " + what);
  }

  const config_sources& sources_;
  std::string file_;
  YAML::Node node_;
  std::string path_;
  bool overridable_;
  caf::error& err_;
  std::vector<std::string> known_;
};

// -- checks --------------------------------------------------------------------------------------

check<int64_t> at_least(int64_t low) {
  return [low](const int64_t& value) -> std::optional<std::string> {
    if (value >= low)
      return std::nullopt;
    return "must be >= " + std::to_string(low) + ", got " + std::to_string(value);
  };
}

check<double> above(double low) {
  return [low](const double& value) -> std::optional<std::string> {
    if (value > low)
      return std::nullopt;
    std::ostringstream text;
    text << "must be > " << low << ", got " << value;
    return text.str();
  };
}

check<std::string> one_of(std::vector<std::string> choices) {
  return [choices](const std::string& value) -> std::optional<std::string> {
    if (std::find(choices.begin(), choices.end(), value) != choices.end())
      return std::nullopt;
    std::string text = "must be one of ";
    for (auto& choice : choices)
      text += choice + (&choice == &choices.back() ? "" : ", ");
    return text + "; got " + in_quotes(value);
  };
}

// `auto`, or any kind a worker may announce: the daemon keeps no list of kinds.
check<std::string> device_kind_or_auto() {
  return [](const std::string& value) -> std::optional<std::string> {
    if (value == auto_setting || (value != no_device_kind && is_device_kind(value)))
      return std::nullopt;
    return "must be auto or a device kind other than none (" + std::string{device_kind_rule} +
           "), got " + in_quotes(value);
  };
}

bool is_port(std::string_view text, bool allow_wildcard) {
  if (allow_wildcard && text == "*")
    return true;
  if (text.empty() || text.size() > 5 || !std::all_of(text.begin(), text.end(), ::isdigit))
    return false;
  return std::stoi(std::string{text}) <= 65535;
}

// A name, an IPv4 address, a bracketed IPv6 address, or (ZeroMQ) * for every interface.
bool is_host(std::string_view text, bool allow_wildcard) {
  if (allow_wildcard && text == "*")
    return true;
  if (text.size() > 2 && text.front() == '[' && text.back() == ']')
    return true;
  return !text.empty() && std::all_of(text.begin(), text.end(), [](char c) {
    return std::isalnum(static_cast<unsigned char>(c)) || c == '.' || c == '-' || c == '_';
  });
}

bool is_host_port(std::string_view text, bool allow_wildcard) {
  auto colon = text.rfind(':');
  return colon != std::string_view::npos && is_host(text.substr(0, colon), allow_wildcard) &&
         is_port(text.substr(colon + 1), allow_wildcard);
}

std::optional<std::string> zmq_endpoint(const std::string& value) {
  auto ok = [&] {
    if (value.rfind("tcp://", 0) == 0)
      return is_host_port(std::string_view{value}.substr(6), true);
    if (value.rfind("ipc://", 0) == 0)
      return value.size() > 6;
    return false;
  }();
  if (ok)
    return std::nullopt;
  return "must be a ZeroMQ endpoint like tcp://127.0.0.1:5555 or ipc:///path/to/socket, got " +
         in_quotes(value);
}

std::optional<std::string> listen_address_or_empty(const std::string& value) {
  if (value.empty() || is_host_port(value, false))
    return std::nullopt;
  return "must be host:port (port 0 picks a free one) or \"\" to disable, got " + in_quotes(value);
}

// -- sections ------------------------------------------------------------------------------------

void parse(reader& in, log_config& out) {
  in.field("level", out.level,
           one_of({"trace", "debug", "info", "warn", "error", "critical", "off"}));
  in.field("file", out.file);
}

void parse(reader& in, control_config& out) {
  in.field("listen", out.listen, check<std::string>{[](const std::string& value) {
             return value.empty() ? std::nullopt : zmq_endpoint(value);
           }});
}

void parse(reader& in, curve_config& out) {
  // ZeroMQ's tools name a secret key file NAME.key_secret beside its public NAME.key.
  in.field("server_key", out.server_key, check<std::string>{[](const std::string& value) {
             return value.empty() || value.ends_with(".key_secret")
                        ? std::nullopt
                        : std::optional<std::string>{"must name a NAME.key_secret file, got " +
                                                     in_quotes(value)};
           }});
  in.field("allowed_keys", out.allowed_keys);
}

void parse(reader& in, workers_config& out) {
  in.field("listen", out.listen, check<std::string>{zmq_endpoint});
  in.field("heartbeat_ms", out.heartbeat_ms, at_least(10));
  in.field("liveness", out.liveness, at_least(1));
  in.field("max_frame_bytes", out.max_frame_bytes, at_least(1024));
  in.field("max_attempts", out.max_attempts, at_least(1));
  in.field("max_slots", out.max_slots, at_least(1));
  in.section("curve", out.curve);
  in.field("allow_unauthenticated", out.allow_unauthenticated);
}

void parse(reader& in, local_worker_config& out) {
  const auto& roles = contract::enum_traits<contract::worker_role>::names;
  in.field("role", out.role, one_of({roles.begin(), roles.end()}));
  auto lint = out.role == to_string(contract::worker_role::lint);
  out.kind = lint ? no_device_kind : auto_setting;
  in.field("kind", out.kind, lint ? one_of({std::string{no_device_kind}}) : device_kind_or_auto());
  in.field("count", out.count, at_least(1));
  in.field("slots", out.slots);
}

void parse(reader& in, metrics_config& out) {
  in.field("listen", out.listen, check<std::string>{listen_address_or_empty});
}

void parse(reader& in, store_config& out) {
  in.field("sync", out.sync);
}

check<std::string> dtype_list() {
  return [](const std::string& value) -> std::optional<std::string> {
    std::stringstream items{value};
    size_t count = 0;
    for (std::string item; std::getline(items, item, ',');) {
      ++count;
      if (!contract::from_string<contract::dtype>(item))
        return "lists " + in_quotes(item) + "; dtypes are comma-separated, from " +
               contract::one_of<contract::dtype>();
    }
    if (count == 0)
      return std::string{"must name at least one dtype"};
    return std::nullopt;
  };
}

void parse(reader& in, campaigns_config& out) {
  in.field("device_kind", out.device_kind, device_kind_or_auto());
  in.field("dtypes", out.dtypes, dtype_list());
  in.field("concurrency", out.concurrency, at_least(1));
  in.field("max_dialogs", out.max_dialogs, at_least(1));
  in.field("max_calls_per_dialog", out.max_calls_per_dialog, at_least(1));
  in.field("same_failure_limit", out.same_failure_limit, at_least(0));
  in.field("max_tokens", out.max_tokens, at_least(0));
  in.field("failover", out.failover);
  in.field("sample_timeout_s", out.sample_timeout_s, at_least(1));
  in.field("job_deadline_s", out.job_deadline_s, at_least(1));
  in.field("optimize", out.optimize);
  in.field("optimize_target_speedup", out.optimize_target_speedup, above(0));
  in.field("optimize_calls", out.optimize_calls, at_least(1));
  in.field("prompts_dir", out.prompts_dir);
  in.field("examples_dir", out.examples_dir);
  in.field("demo_cassette", out.demo_cassette);
}

void parse(reader& in, acceptance_config& out) {
  in.field("confirmations", out.confirmations, at_least(1));
}

void parse(reader& in, maintenance_config& out) {
  in.field("enabled", out.enabled);
  in.field("poll_ms", out.poll_ms, at_least(10));
  in.field("repair", out.repair);
  in.field("background_max_wait_s", out.background_max_wait_s, at_least(0));
  in.field("retime", out.retime);
  in.field("speed_regression_percent", out.speed_regression_percent, at_least(0));
}

void parse(reader& in, config& out) {
  in.field("data_dir", out.data_dir);
  in.section("log", out.log);
  in.section("control", out.control);
  in.section("workers", out.workers);
  in.list("local_workers", out.local_workers);
  in.field("python", out.python);
  in.section("metrics", out.metrics);
  in.section("store", out.store);
  in.delegate("llm", out.llm, parse_llm_section);
  in.section("campaigns", out.campaigns);
  in.section("acceptance", out.acceptance);
  in.section("maintenance", out.maintenance);
}

caf::expected<YAML::Node> read_file(const std::filesystem::path& file) {
  std::ifstream in{file};
  if (!in)
    return caf::make_error(errc::config_unreadable,
                           "cannot read config file " + in_quotes(file.string()) + ": " +
                               std::strerror(errno) + " (check the path given to --config)");
  std::stringstream text;
  text << in.rdbuf();
  try {
    return YAML::Load(text.str());
  } catch (const YAML::ParserException& e) {
    return caf::make_error(errc::config_invalid, file.string() + ":" +
                                                     std::to_string(e.mark.line + 1) +
                                                     ": not valid YAML: " + e.msg);
  }
}

bool is_executable(const std::string& program) {
  if (program.find('/') != std::string::npos)
    return ::access(program.c_str(), X_OK) == 0;
  const char* path = std::getenv("PATH");
  std::stringstream dirs{path ? path : ""};
  for (std::string dir; std::getline(dirs, dir, ':');)
    if (!dir.empty() && ::access((dir + "/" + program).c_str(), X_OK) == 0)
      return true;
  return false;
}

} // namespace

std::string config::default_python() {
#ifdef OPFORGE_DEFAULT_PYTHON
  if (std::string_view{OPFORGE_DEFAULT_PYTHON}.size() > 0)
    return OPFORGE_DEFAULT_PYTHON;
#endif
  return "python3";
}

bool is_local_endpoint(const std::string& endpoint) {
  if (endpoint.rfind("ipc://", 0) == 0)
    return true;
  if (endpoint.rfind("tcp://", 0) != 0)
    return false;
  auto address = std::string_view{endpoint}.substr(6);
  auto host = address.substr(0, address.rfind(':'));
  if (host == "localhost" || host == "[::1]")
    return true;
  // 127.x.y.z only as an IPv4 address: a name like 127.0.0.1.example.com resolves anywhere.
  return host.rfind("127.", 0) == 0 && std::count(host.begin(), host.end(), '.') == 3 &&
         std::all_of(host.begin(), host.end(), [](char c) {
           return c == '.' || std::isdigit(static_cast<unsigned char>(c));
         });
}

std::optional<std::string> process_env(const std::string& name) {
  if (const char* value = std::getenv(name.c_str()))
    return std::string{value};
  return std::nullopt;
}

caf::expected<config> load_config(const config_sources& sources) {
  YAML::Node root{YAML::NodeType::Undefined};
  std::string file = "defaults";
  if (sources.file) {
    auto node = read_file(*sources.file);
    if (!node)
      return node.error();
    root = *node;
    file = sources.file->string();
    if (!root.IsMap() && !root.IsNull())
      return caf::make_error(errc::config_invalid,
                             file + ": expected a map of sections at the top level, got " +
                                 describe(root));
  }
  config result;
  caf::error err;
  reader top{sources, file, root, "", true, err};
  parse(top, result);
  top.finish();
  if (err)
    return err;
  if (result.control.listen.empty())
    result.control.listen = "ipc://" + result.data_dir.string() + "/control.sock";
  auto& workers = result.workers;
  if (workers.allow_unauthenticated && !is_local_endpoint(workers.listen))
    return caf::make_error(
        errc::config_invalid,
        file + ": 'workers.allow_unauthenticated' is true, but workers.listen " +
            in_quotes(workers.listen) +
            " is reachable from other hosts: workers there must authenticate with ZeroMQ CURVE "
            "(set it to false, or listen on ipc:// or 127.0.0.1)");
  if (workers.curve.server_key.empty())
    workers.curve.server_key = (result.data_dir / "keys" / "server.key_secret").string();
  if (workers.curve.allowed_keys.empty())
    workers.curve.allowed_keys = (result.data_dir / "keys" / "allowed").string();
  return result;
}

void resolve_auto_settings(config& cfg, const std::function<bool()>& gpu_present) {
  std::optional<bool> gpu;
  auto resolve = [&](std::string& kind) {
    if (kind != auto_setting)
      return;
    if (!gpu)
      gpu = gpu_present();
    kind = *gpu ? "cuda" : "interpreter";
  };
  for (auto& group : cfg.local_workers)
    resolve(group.kind);
  resolve(cfg.campaigns.device_kind);
}

caf::error prepare_runtime(const config& cfg) {
  auto dir = cfg.data_dir.string();
  std::error_code ec;
  std::filesystem::create_directories(cfg.data_dir, ec);
  if (ec)
    return path_unusable("data_dir " + in_quotes(dir), "cannot create it: " + ec.message(),
                         "choose another with --data-dir or OPFORGE_DATA_DIR");
  if (!std::filesystem::is_directory(cfg.data_dir))
    return path_unusable("data_dir " + in_quotes(dir), "exists and is not a directory",
                         "choose another with --data-dir or OPFORGE_DATA_DIR");
  // It holds every prompt, answer and kernel, and the control socket: its owner's alone.
  std::filesystem::permissions(cfg.data_dir, std::filesystem::perms::owner_all, ec);
  if (ec)
    return path_unusable("data_dir " + in_quotes(dir),
                         "cannot restrict it to its owner (0700): " + ec.message(),
                         "choose a directory of your own with --data-dir");
  if (::access(dir.c_str(), W_OK | X_OK) != 0)
    return path_unusable("data_dir " + in_quotes(dir), std::strerror(errno),
                         "make it writable or choose another with --data-dir");
  if (!cfg.log.file.empty() && !std::ofstream{cfg.log.file, std::ios::app})
    return path_unusable("log.file " + in_quotes(cfg.log.file), std::strerror(errno),
                         "choose a writable file or leave it empty to log to stderr");
  if (!cfg.local_workers.empty() && !is_executable(cfg.python))
    return path_unusable("python " + in_quotes(cfg.python), "not an executable",
                         "run ops/setup.sh, or set python: in the config or OPFORGE_PYTHON");
  return {};
}

caf::error path_unusable(const std::string& what, const std::string& reason,
                         const std::string& remedy) {
  return caf::make_error(errc::config_path_unusable, what + ": " + reason + " (" + remedy + ")");
}

caf::error address_unusable(const std::string& key, const std::string& address,
                            const std::string& reason) {
  return caf::make_error(errc::config_address_unusable,
                         key + " " + in_quotes(address) + ": " + reason +
                             " (is another opforge running? choose another address for " + key +
                             ")");
}

} // namespace opforge
