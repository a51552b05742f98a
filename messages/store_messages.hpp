#pragma once

// The messages of the store actor: replies to reads and its status. They live here, below every
// room, so that the type-id block and any actor may name them without including the store actor.

#include "messages/write_batch.hpp"

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include <caf/meta/type_name.hpp>

namespace opforge {

/// Size estimates of one column family, for status displays.
struct family_stats {
  std::string family;
  uint64_t estimated_keys = 0;
  uint64_t estimated_bytes = 0;
};

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, family_stats& x) {
  return f(caf::meta::type_name("family_stats"), x.family, x.estimated_keys, x.estimated_bytes);
}

/// The reply to a get: the value of the key, or nothing when it is absent.
struct stored_value {
  std::optional<std::string> value;
};

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, stored_value& x) {
  optional_bytes value{x.value};
  return f(caf::meta::type_name("stored_value"), value);
}

/// One entry of a scan reply.
struct key_value {
  std::string key;
  std::string value;
};

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, key_value& x) {
  return f(caf::meta::type_name("key_value"), x.key, x.value);
}

/// What the store actor reports about itself.
struct store_status {
  std::string path;
  uint32_t schema_version = 0;
  std::vector<family_stats> families;
  /// Batches written through the actor since it started.
  uint64_t batches_written = 0;
  /// The last failure of any request, rendered; empty when there was none.
  std::string last_error;
  /// Why the database refuses writes (a full disk, an I/O error), rendered; empty while writes
  /// work. Meanwhile writes are held back, reads are served, and resuming is retried.
  std::string write_failure;
  /// Write batches held back by `write_failure`; they are applied, in order, once writes work.
  uint64_t paused_writes = 0;
};

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, store_status& x) {
  return f(caf::meta::type_name("store_status"), x.path, x.schema_version, x.families,
           x.batches_written, x.last_error, x.write_failure, x.paused_writes);
}

} // namespace opforge
