#include "actors/library/library.hpp"

// CAF 0.17 deserializes a vector's items into a default-initialized local, which GCC takes for
// uninitialized when the item is an enum (library_kernel's dtypes).
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"

#include "messages/errors.hpp"
#include "messages/wire.hpp"
#include "persistence/keys.hpp"

#include <algorithm>
#include <chrono>
#include <functional>
#include <tuple>

#include <spdlog/spdlog.h>

namespace opforge {

namespace {

using self_pointer = library_actor::stateful_pointer<library_state>;

// Entries per scan request: large enough that a library of thousands of kernels is read in a
// few requests, small enough that one reply stays a few megabytes of sources.
constexpr uint64_t scan_page = 256;

int64_t now_ms() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(
             std::chrono::system_clock::now().time_since_epoch())
      .count();
}

// Versions are ordered by when they were accepted; the hash breaks ties, so the order is the same
// on every read.
bool older(const kernel_record& a, const kernel_record& b) {
  return std::tie(a.accepted_at_ms, a.hash) < std::tie(b.accepted_at_ms, b.hash);
}

std::string id_of(const kernel_record& kernel) {
  return operator_id(kernel.op, kernel.variant);
}

using entries_handler = std::function<void(caf::expected<std::vector<key_value>>)>;

// Reads every entry of `f` under `prefix`, a page at a time, appending to `into`.
void scan_all(self_pointer self, family f, std::string prefix, std::string after,
              std::vector<key_value> into, entries_handler done) {
  auto on_page = [self, f, prefix, into = std::move(into),
                  done](std::vector<key_value>& page) mutable {
    auto full = page.size() == scan_page;
    auto last = page.empty() ? std::string{} : page.back().key;
    std::move(page.begin(), page.end(), std::back_inserter(into));
    if (!full) {
      done(std::move(into));
      return;
    }
    scan_all(self, f, std::move(prefix), std::move(last), std::move(into), std::move(done));
  };
  auto on_error = [done](const caf::error& err) { done(err); };
  auto& store = self->state.store;
  if (after.empty())
    self->request(store, caf::infinite, atom::scan_v, f, prefix, scan_page)
        .then(std::move(on_page), std::move(on_error));
  else
    self->request(store, caf::infinite, atom::scan_v, f, prefix, std::move(after), scan_page)
        .then(std::move(on_page), std::move(on_error));
}

// Pairs kernel records with their validations.
caf::expected<std::vector<stored_kernel>> join(const std::vector<key_value>& kernels,
                                               const std::vector<key_value>& validations) {
  std::map<std::string, std::vector<contract::toolchain_proof>> proofs; // by source hash
  for (const auto& kv : validations) {
    auto proof = decode_proof(kv.value);
    if (!proof)
      return caf::make_error(errc::store_corrupt,
                             "validation '" + printable(kv.key) + "': " + render(proof.error()));
    proofs[kv.key.substr(0, kv.key.find('\0'))].push_back(std::move(*proof));
  }
  std::vector<stored_kernel> out;
  for (const auto& kv : kernels) {
    auto record = decode_kernel(kv.value);
    if (!record)
      return caf::make_error(errc::store_corrupt,
                             "kernel '" + printable(kv.key) + "': " + render(record.error()));
    auto hash = record->hash.empty() ? content_hash(record->source) : record->hash;
    auto& mine = proofs[hash];
    std::sort(mine.begin(), mine.end(), [](const auto& a, const auto& b) {
      return std::tie(a.validated_at_ms, a.fingerprint) >
             std::tie(b.validated_at_ms, b.fingerprint);
    });
    out.push_back({std::move(*record), mine});
  }
  return out;
}

using kernels_handler = std::function<void(caf::expected<std::vector<stored_kernel>>)>;

// Whether a kernel is one of `op`: an operator id, or an OpInfo name that stands for all of its
// variants; "" stands for every operator.
bool selected(const std::string& op, std::string_view key) {
  auto id = key.substr(0, key.find('\0'));
  return op.empty() || id == op ||
         (op.find('/') == std::string::npos && id.substr(0, op.size() + 1) == op + "/");
}

// Reads the kernels of `op` (as `selected` takes it) with their validations.
void load(self_pointer self, const std::string& op, kernels_handler done) {
  // Keys start with the operator id, so every kernel of `op` is under it as a plain prefix, next
  // to those of longer names (`max` is a prefix of `maximum`), which are dropped.
  scan_all(self, family::kernels, op, {}, {},
           [self, op, done](caf::expected<std::vector<key_value>> kernels) {
             if (!kernels) {
               done(kernels.error());
               return;
             }
             std::erase_if(*kernels, [&](const key_value& kv) { return !selected(op, kv.key); });
             // Validations are a few hundred bytes each: one read of them all is cheaper than a
             // request per kernel.
             scan_all(self, family::validations, {}, {}, {},
                      [done, kernels = std::move(*kernels)](
                          caf::expected<std::vector<key_value>> validations) {
                        if (!validations)
                          done(validations.error());
                        else
                          done(join(kernels, *validations));
                      });
           });
}

void count_kernel(self_pointer self, const std::string& key, const std::string& device_kind) {
  auto& st = self->state;
  auto [it, added] = st.counted.emplace(key, device_kind);
  if (!added || !st.telemetry)
    return;
  st.telemetry->library_kernels(device_kind).Increment();
}

// Applies the first waiting timing update, then the next, until none waits.
void apply_timings(self_pointer self) {
  auto& updates = self->state.timing_updates;
  if (updates.empty())
    return;
  auto& store = self->state.store;
  auto finish = [self](const caf::error& err) {
    auto& updates = self->state.timing_updates;
    auto update = std::move(updates.front());
    updates.pop_front();
    if (err)
      update.promise.deliver(err);
    else
      update.promise.deliver(atom::ok_v);
    apply_timings(self);
  };
  auto key = updates.front().key;
  self->request(store, caf::infinite, atom::get_v, family::kernels, key)
      .then(
          [self, key, finish](stored_value& stored) {
            if (!stored.value)
              return finish(caf::make_error(errc::request_invalid,
                                            "timings: no kernel '" + printable(key) + "'"));
            auto record = decode_kernel(*stored.value);
            if (!record)
              return finish(record.error());
            record->timings = merge_timings(std::move(record->timings),
                                            self->state.timing_updates.front().timings);
            write_batch batch{{{family::kernels, key, encode_kernel(*record)}}, true};
            self->request(self->state.store, caf::infinite, atom::write_v, std::move(batch))
                .then([finish](atom::ok) { finish({}); }, finish);
          },
          finish);
}

caf::error check_timings(const std::vector<contract::kernel_timing>& timings) {
  for (const auto& t : timings)
    if (t.fingerprint.empty() || t.device_kind.empty() || !(t.kernel_us > 0))
      return caf::make_error(errc::request_invalid,
                             "timings: each names its fingerprint and device kind and has a "
                             "positive kernel_us");
  return {};
}

caf::error check_new(const contract::library_kernel& kernel) {
  auto invalid = [&](const std::string& what) {
    return caf::make_error(errc::request_invalid,
                           "add kernel '" + operator_id(kernel.op, kernel.variant) + "': " + what);
  };
  if (kernel.op.empty() || kernel.wrapper.empty() || kernel.source.empty())
    return invalid("op, wrapper and source must not be empty");
  if (kernel.proofs.empty())
    return invalid("a kernel enters the library with the validation that accepted it");
  const auto& proof = kernel.proofs.front();
  if (proof.outcome != contract::outcome::pass)
    return invalid(std::string{"its validation is "} + to_string(proof.outcome) + ", not pass");
  if (proof.fingerprint.empty() || proof.device_kind.empty())
    return invalid("its validation must name the toolchain fingerprint and the device kind");
  return {};
}

// A toolchain's defects in the gauges: all of them, and those its device kind does not list.
void meter_conformance(self_pointer self, const contract::conformance_report& report) {
  auto& telemetry = self->state.telemetry;
  if (!telemetry)
    return;
  auto unknown = std::count_if(report.defects.begin(), report.defects.end(),
                               [](const auto& defect) { return !defect.known; });
  telemetry->toolchain_defects(report.device_kind, report.fingerprint)
      .Set(static_cast<double>(report.defects.size()));
  telemetry->toolchain_unknown_defects(report.device_kind, report.fingerprint)
      .Set(static_cast<double>(unknown));
}

using reports_handler =
    std::function<void(caf::expected<std::vector<contract::conformance_report>>)>;

// Reads every kept conformance report, in key order (device kind, then fingerprint).
void read_conformance(self_pointer self, reports_handler done) {
  scan_all(self, family::meta, conformance_prefix(), {}, {},
           [done = std::move(done)](caf::expected<std::vector<key_value>> entries) {
             if (!entries)
               return done(entries.error());
             std::vector<contract::conformance_report> reports;
             for (const auto& kv : *entries) {
               auto report = wire::decode_as<contract::conformance_report>(kv.value, "conformance");
               if (!report)
                 return done(caf::make_error(errc::store_corrupt,
                                             "conformance report '" + printable(kv.key) +
                                                 "': " + render(report.error())));
               reports.push_back(std::move(*report));
             }
             done(std::move(reports));
           });
}

} // namespace

std::vector<kernel_version> versions(std::vector<stored_kernel> kernels, bool with_sources) {
  std::sort(kernels.begin(), kernels.end(), [](const auto& a, const auto& b) {
    auto a_id = id_of(a.record), b_id = id_of(b.record);
    return a_id != b_id ? a_id < b_id : older(a.record, b.record);
  });
  std::vector<kernel_version> out;
  // The index of the newest version per (operator id, device kind) seen so far.
  std::map<std::pair<std::string, std::string>, size_t> newest;
  uint32_t number = 0;
  std::string current_id;
  for (auto& k : kernels) {
    auto id = id_of(k.record);
    number = id == current_id ? number + 1 : 1;
    current_id = id;
    newest[{id, k.record.device_kind}] = out.size();
    kernel_version v{.kernel = to_library_kernel(k.record, std::move(k.proofs)),
                     .version = number,
                     .device_kind = k.record.device_kind,
                     .accepted_at_ms = k.record.accepted_at_ms};
    if (!with_sources)
      v.kernel.source.clear();
    out.push_back(std::move(v));
  }
  for (const auto& [_, index] : newest)
    out[index].current = true;
  return out;
}

std::vector<contract::library_kernel> choose(const std::vector<stored_kernel>& kernels,
                                             const std::string& device_kind,
                                             const std::string& fingerprint) {
  auto eligible = [&](const stored_kernel& k) {
    if (fingerprint.empty())
      return k.record.device_kind == device_kind;
    return std::any_of(k.proofs.begin(), k.proofs.end(), [&](const auto& proof) {
      return proof.fingerprint == fingerprint && proof.device_kind == device_kind &&
             proof.outcome == contract::outcome::pass;
    });
  };
  struct candidate {
    const stored_kernel* kernel = nullptr;
    std::vector<contract::kernel_timing> timings; // on the bundle's toolchain
  };
  // Does `k` serve the operator better than `best`? On a fingerprint a timed kernel beats an
  // untimed one and a faster one a slower one; otherwise, and without one, the newer wins.
  auto better = [&](const candidate& k, const candidate& best) {
    if (!best.kernel)
      return true;
    if (!fingerprint.empty() && k.timings.empty() != best.timings.empty())
      return !k.timings.empty();
    if (!fingerprint.empty() && !k.timings.empty())
      if (auto relative = relative_time(k.timings, best.timings))
        return *relative < 1;
    return older(best.kernel->record, k.kernel->record);
  };
  std::vector<const stored_kernel*> by_age;
  for (const auto& k : kernels)
    if (eligible(k))
      by_age.push_back(&k);
  std::sort(by_age.begin(), by_age.end(),
            [](const auto* a, const auto* b) { return older(a->record, b->record); });
  std::map<std::string, candidate> chosen; // by operator id
  for (const auto* k : by_age) {
    candidate next{k, timings_on(k->record.timings, device_kind, fingerprint)};
    auto& best = chosen[id_of(k->record)];
    if (better(next, best))
      best = std::move(next);
  }
  std::vector<contract::library_kernel> out;
  for (auto& [_, c] : chosen) {
    out.push_back(to_library_kernel(c.kernel->record, c.kernel->proofs));
    out.back().timings = std::move(c.timings);
  }
  return out;
}

library_actor::behavior_type library(library_actor::stateful_pointer<library_state> self,
                                     store_actor store, std::shared_ptr<metrics> telemetry,
                                     std::string daemon_version) {
  self->state.store = std::move(store);
  self->state.telemetry = std::move(telemetry);
  self->state.daemon_version = std::move(daemon_version);
  scan_all(self, family::kernels, {}, {}, {}, [self](caf::expected<std::vector<key_value>> all) {
    if (!all) {
      spdlog::error("library: cannot count the stored kernels: {}", render(all.error()));
      return;
    }
    for (const auto& kv : *all)
      if (auto record = decode_kernel(kv.value))
        count_kernel(self, kv.key, record->device_kind);
      else
        spdlog::error("library: kernel '{}': {}", printable(kv.key), render(record.error()));
  });
  read_conformance(self, [self](caf::expected<std::vector<contract::conformance_report>> all) {
    if (!all) {
      spdlog::error("library: cannot read the conformance reports: {}", render(all.error()));
      return;
    }
    for (const auto& report : *all)
      meter_conformance(self, report);
  });
  return {
      [self](atom::add, contract::library_kernel& kernel) -> caf::result<kernel_version> {
        if (auto err = check_new(kernel))
          return err;
        auto record = from_library_kernel(kernel, kernel.proofs.front());
        if (record.accepted_at_ms <= 0)
          record.accepted_at_ms = now_ms();
        auto key = kernel_key(id_of(record), record.source);
        auto promise = self->make_response_promise<kernel_version>();
        write_batch batch{accept_kernel(record), true};
        self->request(self->state.store, caf::infinite, atom::write_v, std::move(batch))
            .then(
                [self, promise, key, record](atom::ok) mutable {
                  count_kernel(self, key, record.device_kind);
                  load(self, id_of(record),
                       [promise, hash = content_hash(record.source)](
                           caf::expected<std::vector<stored_kernel>> kernels) mutable {
                         if (!kernels) {
                           promise.deliver(kernels.error());
                           return;
                         }
                         for (auto& v : versions(std::move(*kernels), true))
                           if (v.kernel.hash == hash) {
                             promise.deliver(std::move(v));
                             return;
                           }
                         promise.deliver(caf::make_error(errc::store_corrupt,
                                                         "the added kernel is not stored"));
                       });
                },
                [promise](const caf::error& err) mutable { promise.deliver(err); });
        return promise;
      },
      [self](atom::validate, const std::string& hash,
             const contract::toolchain_proof& proof) -> caf::result<atom::ok> {
        if (hash.empty() || proof.fingerprint.empty() || proof.device_kind.empty())
          return caf::make_error(errc::request_invalid,
                                 "validate: name the kernel's hash, the fingerprint and the "
                                 "device kind");
        auto promise = self->make_response_promise<atom::ok>();
        write_batch batch{{add_validation(hash, proof)}, true};
        self->request(self->state.store, caf::infinite, atom::write_v, std::move(batch))
            .then([promise](atom::ok) mutable { promise.deliver(atom::ok_v); },
                  [promise](const caf::error& err) mutable { promise.deliver(err); });
        return promise;
      },
      [self](atom::timed, const std::string& op_id, const std::string& hash,
             std::vector<contract::kernel_timing>& timings) -> caf::result<atom::ok> {
        if (op_id.empty() || hash.empty())
          return caf::make_error(errc::request_invalid,
                                 "timings: name the kernel's operator id and hash");
        if (auto err = check_timings(timings))
          return err;
        auto promise = self->make_response_promise<atom::ok>();
        auto& updates = self->state.timing_updates;
        updates.push_back({prefix_of(op_id) + hash, std::move(timings), promise});
        if (updates.size() == 1)
          apply_timings(self);
        return promise;
      },
      [self](atom::list, const std::string& op_id,
             bool with_sources) -> caf::result<std::vector<kernel_version>> {
        auto promise = self->make_response_promise<std::vector<kernel_version>>();
        load(self, op_id,
             [promise, with_sources](caf::expected<std::vector<stored_kernel>> kernels) mutable {
               if (!kernels)
                 promise.deliver(kernels.error());
               else
                 promise.deliver(versions(std::move(*kernels), with_sources));
             });
        return promise;
      },
      [self](atom::bundle, const std::string& device_kind,
             const std::string& fingerprint) -> caf::result<contract::library_bundle> {
        if (device_kind.empty())
          return caf::make_error(errc::request_invalid, "export: name the device kind");
        auto promise = self->make_response_promise<contract::library_bundle>();
        load(self, {},
             [self, promise, device_kind,
              fingerprint](caf::expected<std::vector<stored_kernel>> kernels) mutable {
               if (!kernels) {
                 promise.deliver(kernels.error());
                 return;
               }
               promise.deliver(
                   contract::library_bundle{.device_kind = device_kind,
                                            .fingerprint = fingerprint,
                                            .daemon_version = self->state.daemon_version,
                                            .kernels = choose(*kernels, device_kind, fingerprint)});
             });
        return promise;
      },
      [self](atom::accepted, const std::string& key, const std::string& device_kind) {
        count_kernel(self, key, device_kind);
      },
      [self](atom::conformance, contract::conformance_report& report) -> caf::result<atom::ok> {
        if (report.device_kind.empty() || report.fingerprint.empty())
          return caf::make_error(errc::request_invalid,
                                 "conformance report: name the device kind and the fingerprint");
        auto promise = self->make_response_promise<atom::ok>();
        write_batch batch{{{family::meta, conformance_key(report.device_kind, report.fingerprint),
                            contract::codec::to_bytes(report)}},
                          true};
        self->request(self->state.store, caf::infinite, atom::write_v, std::move(batch))
            .then(
                [self, promise, report](atom::ok) mutable {
                  meter_conformance(self, report);
                  promise.deliver(atom::ok_v);
                },
                [promise](const caf::error& err) mutable { promise.deliver(err); });
        return promise;
      },
      [self](atom::conformance) -> caf::result<std::vector<contract::conformance_report>> {
        auto promise = self->make_response_promise<std::vector<contract::conformance_report>>();
        read_conformance(
            self,
            [promise](caf::expected<std::vector<contract::conformance_report>> reports) mutable {
              if (reports)
                promise.deliver(std::move(*reports));
              else
                promise.deliver(reports.error());
            });
        return promise;
      },
  };
}

} // namespace opforge
