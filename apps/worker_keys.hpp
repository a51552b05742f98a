#pragma once

// The daemon's side of worker authentication: the key files `workers.curve` names, what `opforge
// serve` makes of them at start, and `opforge keys`.

#include "config/config.hpp"
#include "devices/curve.hpp"
#include "devices/worker_io.hpp"

#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include <caf/expected.hpp>

namespace opforge {

/// What `opforge serve` authenticates workers with, and what its local workers connect with.
struct worker_keys {
  worker_auth auth;
  /// The allow-list `auth` reads, for SIGHUP to reload; null without CURVE.
  std::shared_ptr<curve::allow_list> allowed;
  /// The server's public key file and the local workers' secret key file; empty without CURVE.
  std::string server_public_file;
  std::string local_worker_secret_file;
};

/// Loads the server key pair and the allow-list, and gives the local workers a fresh key pair
/// under <data_dir>/keys/local that the daemon admits. A socket bound to ipc or loopback gets
/// its server key pair created when it has none; one reachable from other hosts refuses to start
/// without it (errc::config_path_unusable naming CURVE and `opforge keys generate --server`).
caf::expected<worker_keys> prepare_worker_keys(const config& cfg);

/// `opforge check`'s line on how workers authenticate, checked as `prepare_worker_keys` would
/// without creating anything; its errors are the same.
caf::expected<std::string> check_worker_keys(const config& cfg);

/// `opforge keys generate --server`: the daemon's key pair at workers.curve.server_key; an
/// existing one is kept unless `replace`. Returns the lines to print.
caf::expected<std::vector<std::string>> generate_server_keys(const config& cfg, bool replace);

/// `opforge keys generate NAME`: a worker's key pair at `<out_dir>/NAME.key[_secret]` (default
/// <data_dir>/keys/workers), its public key admitted by a copy in the allow-list. Returns the
/// lines to print.
caf::expected<std::vector<std::string>>
generate_worker_keys(const config& cfg, const std::string& name, std::filesystem::path out_dir);

/// `opforge keys list`: the server's public key and every admitted key, one line each.
caf::expected<std::vector<std::string>> list_keys(const config& cfg);

} // namespace opforge
