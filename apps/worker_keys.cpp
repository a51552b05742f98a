#include "apps/worker_keys.hpp"

#include "messages/errors.hpp"

#include <algorithm>
#include <cctype>
#include <optional>
#include <system_error>

#include <caf/error.hpp>

namespace opforge {

namespace {

namespace fs = std::filesystem;

constexpr std::string_view secret_suffix = ".key_secret";

std::string quoted(const fs::path& path) {
  return "'" + path.string() + "'";
}

// `dir/NAME.key_secret` -> `dir/NAME`, the base curve::write_certificates takes.
fs::path base_of(const fs::path& secret_file) {
  auto text = secret_file.string();
  return text.substr(0, text.size() - secret_suffix.size());
}

// Key directories hold secrets: their owner's alone, whatever the umask.
caf::error make_private_dir(const fs::path& dir) {
  std::error_code ec;
  fs::create_directories(dir, ec);
  if (!ec)
    fs::permissions(dir, fs::perms::owner_all, ec);
  if (ec)
    return path_unusable("key directory " + quoted(dir), ec.message(),
                         "make the data directory writable, or choose other key paths");
  return {};
}

caf::error write_new_pair(const fs::path& secret_file, const curve::key_pair& keys) {
  if (auto err = make_private_dir(secret_file.parent_path()))
    return err;
  return curve::write_certificates(base_of(secret_file), keys);
}

caf::error curve_available(const config& cfg) {
  if (curve::available())
    return {};
  return caf::make_error(
      errc::config_invalid,
      "workers.listen '" + cfg.workers.listen +
          "': workers must authenticate with ZeroMQ CURVE, but this libzmq has no CURVE "
          "(zmq_has(\"curve\") is false): install a libzmq built with libsodium (Debian's is), "
          "or, on ipc or 127.0.0.1 only, set workers.allow_unauthenticated: true");
}

// The daemon's key pair as its file holds it; none when there is no file yet and the daemon may
// create one (a socket on this host alone), an error when it may not.
caf::expected<std::optional<curve::key_pair>> existing_server_pair(const config& cfg) {
  fs::path file = cfg.workers.curve.server_key;
  std::error_code ec;
  if (fs::exists(file, ec)) {
    auto keys = curve::read_certificate(file);
    if (!keys)
      return keys.error();
    if (keys->secret_key.empty())
      return path_unusable("workers.curve.server_key " + quoted(file),
                           "holds no secret-key: it is a public key file",
                           "name the NAME.key_secret file of the daemon's key pair");
    return std::optional<curve::key_pair>{*keys};
  }
  if (!is_local_endpoint(cfg.workers.listen))
    return path_unusable(
        "workers.listen '" + cfg.workers.listen + "'",
        "workers on other hosts must authenticate with ZeroMQ CURVE, and the daemon has no key "
        "pair at " +
            quoted(file),
        "create it with `opforge keys generate --server`, admit each worker with `opforge keys "
        "generate NAME`, or listen on 127.0.0.1 or ipc://");
  return std::optional<curve::key_pair>{};
}

caf::expected<curve::key_pair> server_pair(const config& cfg) {
  auto existing = existing_server_pair(cfg);
  if (!existing)
    return existing.error();
  if (*existing)
    return **existing;
  // On this host alone the daemon makes its own pair: zero configuration for local workers.
  auto keys = curve::generate();
  if (!keys)
    return keys.error();
  if (auto err = write_new_pair(cfg.workers.curve.server_key, *keys))
    return err;
  return keys;
}

bool is_key_name(const std::string& name) {
  return !name.empty() && name.front() != '.' && std::all_of(name.begin(), name.end(), [](char c) {
    return std::isalnum(static_cast<unsigned char>(c)) || c == '.' || c == '-' || c == '_';
  });
}

} // namespace

caf::expected<worker_keys> prepare_worker_keys(const config& cfg) {
  if (cfg.workers.allow_unauthenticated)
    return worker_keys{};
  if (auto err = curve_available(cfg))
    return err;
  auto server = server_pair(cfg);
  if (!server)
    return server.error();
  // The daemon's own workers get a fresh pair at every start: nothing to configure or to leak.
  auto local_dir = cfg.data_dir / "keys" / "local";
  auto local = curve::generate();
  if (!local)
    return local.error();
  if (auto err = write_new_pair(local_dir / "worker.key_secret", *local))
    return err;
  if (auto err = curve::write_certificates(local_dir / "server", {server->public_key, {}}))
    return err;
  // Where ops people drop the public keys of the workers they admit.
  std::error_code ec;
  if (!fs::exists(cfg.workers.curve.allowed_keys, ec))
    if (auto err = make_private_dir(cfg.workers.curve.allowed_keys))
      return err;
  worker_keys out;
  out.allowed = std::make_shared<curve::allow_list>(
      cfg.workers.curve.allowed_keys,
      std::map<std::string, std::string>{{local->public_key, "local worker"}});
  if (auto loaded = out.allowed->reload(); !loaded)
    return loaded.error();
  out.auth = {*server, out.allowed};
  out.server_public_file = (local_dir / "server.key").string();
  out.local_worker_secret_file = (local_dir / "worker.key_secret").string();
  return out;
}

caf::expected<std::string> check_worker_keys(const config& cfg) {
  if (cfg.workers.allow_unauthenticated)
    return "workers: unauthenticated on " + cfg.workers.listen + " (workers.allow_unauthenticated)";
  if (auto err = curve_available(cfg))
    return err;
  auto server = existing_server_pair(cfg);
  if (!server)
    return server.error();
  auto allowed = curve::read_allowed(cfg.workers.curve.allowed_keys);
  if (!allowed)
    return allowed.error();
  return "workers: CURVE on " + cfg.workers.listen + ", server key " +
         cfg.workers.curve.server_key + (*server ? "" : " (created at first start)") +
         ", allow-list " + cfg.workers.curve.allowed_keys + " (" + std::to_string(allowed->size()) +
         " keys)";
}

caf::expected<std::vector<std::string>> generate_server_keys(const config& cfg, bool replace) {
  fs::path file = cfg.workers.curve.server_key;
  std::error_code ec;
  if (fs::exists(file, ec) && !replace)
    return path_unusable("workers.curve.server_key " + quoted(file),
                         "the daemon already has a key pair",
                         "keep it, or pass --force to replace it: every remote worker then needs "
                         "the new public key");
  auto keys = curve::generate();
  if (!keys)
    return keys.error();
  if (auto err = write_new_pair(file, *keys))
    return err;
  auto public_file = curve::public_certificate(file);
  return std::vector<std::string>{"server key pair: " + file.string() + " (secret, 0600)",
                                  "public key:      " + keys->public_key,
                                  "give workers " + public_file.string() +
                                      " as --server-key; a running daemon uses the new "
                                      "pair after a restart"};
}

caf::expected<std::vector<std::string>>
generate_worker_keys(const config& cfg, const std::string& name, fs::path out_dir) {
  if (!is_key_name(name))
    return caf::make_error(errc::config_invalid,
                           "key name '" + name +
                               "': use letters, digits, '.', '-' and '_' (e.g. the worker's host)");
  if (out_dir.empty())
    out_dir = cfg.data_dir / "keys" / "workers";
  fs::path allowed_dir = cfg.workers.curve.allowed_keys;
  auto secret_file = out_dir / (name + std::string{secret_suffix});
  auto admitted = allowed_dir / (name + ".key");
  std::error_code ec;
  for (const auto& taken : {secret_file, admitted})
    if (fs::exists(taken, ec))
      return path_unusable("key file " + quoted(taken), "exists",
                           "choose another name, or delete the old key first");
  auto keys = curve::generate();
  if (!keys)
    return keys.error();
  if (auto err = write_new_pair(secret_file, *keys))
    return err;
  if (auto err = make_private_dir(allowed_dir))
    return err;
  if (auto err = curve::write_certificates(allowed_dir / name, {keys->public_key, {}}))
    return err;
  return std::vector<std::string>{
      "worker key pair: " + secret_file.string() + " (secret: copy it to the worker's host only)",
      "public key:      " + keys->public_key,
      "admitted:        " + admitted.string() +
          " (a running daemon reads the allow-list again on SIGHUP)",
      "on the worker:   python -m opforge_worker serve --connect tcp://HOST:PORT --server-key "
      "server.key --key-file " +
          secret_file.filename().string() + " ..."};
}

caf::expected<std::vector<std::string>> list_keys(const config& cfg) {
  std::vector<std::string> lines;
  fs::path server_file = cfg.workers.curve.server_key;
  std::error_code ec;
  if (fs::exists(server_file, ec)) {
    auto server = curve::read_certificate(server_file);
    if (!server)
      return server.error();
    lines.push_back("server   " + server->public_key + "  " + server_file.string());
  } else {
    lines.push_back("server   (none yet: `opforge keys generate --server` creates it, or the "
                    "first start on ipc or 127.0.0.1)");
  }
  auto allowed = curve::read_allowed(cfg.workers.curve.allowed_keys);
  if (!allowed)
    return allowed.error();
  if (allowed->empty())
    lines.push_back("allowed  (none in " + cfg.workers.curve.allowed_keys + ")");
  std::vector<std::pair<std::string, std::string>> by_file;
  for (const auto& [key, file] : *allowed)
    by_file.emplace_back(file, key);
  std::sort(by_file.begin(), by_file.end());
  for (const auto& [file, key] : by_file)
    lines.push_back("allowed  " + key + "  " + file);
  return lines;
}

} // namespace opforge
