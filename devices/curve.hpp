#pragma once

// ZeroMQ CURVE keys for the workers socket, in the files ZeroMQ's own tools write (zcert, pyzmq's
// zmq.auth): `NAME.key` holds the public key, `NAME.key_secret` both keys, each as Z85 text. The
// daemon has one key pair; workers are admitted by public key from an allow-list directory of
// `*.key` files.

#include <filesystem>
#include <map>
#include <mutex>
#include <optional>
#include <set>
#include <string>

#include <caf/error.hpp>
#include <caf/expected.hpp>

namespace opforge::curve {

/// Both keys as Z85 text (40 characters each); `secret_key` is empty for a public certificate.
struct key_pair {
  std::string public_key;
  std::string secret_key;
};

/// Whether this libzmq was built with CURVE (zmq_has("curve")).
bool available();

/// A fresh key pair.
caf::expected<key_pair> generate();

/// The public key of the certificate at `file`, and its secret key when it is a secret one.
/// Errors (errc::config_path_unusable) name the file and what is wrong with it.
caf::expected<key_pair> read_certificate(const std::filesystem::path& file);

/// Writes `keys` as `<base>.key` (public) and, with a secret key, `<base>.key_secret` (both
/// keys, mode 0600).
caf::error write_certificates(const std::filesystem::path& base, const key_pair& keys);

/// The public certificate's path for a secret one: `x.key_secret` -> `x.key`.
std::filesystem::path public_certificate(const std::filesystem::path& secret_file);

/// Public key -> file name of every `*.key` file in `dir` (an absent directory is empty).
caf::expected<std::map<std::string, std::string>> read_allowed(const std::filesystem::path& dir);

/// The public keys the workers socket admits: the allow-list directory's, read again on
/// `reload` (SIGHUP), and `built_in` ones (the daemon's own local workers) that no reload drops.
/// Thread-safe: the ZAP handler asks from the I/O thread, the main thread reloads.
class allow_list {
public:
  allow_list(std::filesystem::path dir, std::map<std::string, std::string> built_in);

  /// Reads the directory again; on error the previous list stays in force.
  caf::expected<size_t> reload();

  /// The name a key is admitted under (its file name), or nothing.
  std::optional<std::string> admits(const std::string& public_key) const;

  const std::filesystem::path& dir() const { return dir_; }

private:
  std::filesystem::path dir_;
  std::map<std::string, std::string> built_in_;
  mutable std::mutex mutex_;
  std::map<std::string, std::string> from_dir_;
};

} // namespace opforge::curve
