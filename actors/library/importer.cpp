#include "actors/library/importer.hpp"

// CAF 0.17 deserializes a vector's items into a default-initialized local, which GCC takes for
// uninitialized when the item is an enum (library_kernel's dtypes, in the request to the library).
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"

#include "actors/library/kernels.hpp"
#include "messages/device_kind.hpp"
#include "messages/device_messages.hpp"
#include "messages/errors.hpp"
#include "messages/jobs.hpp"
#include "messages/library_messages.hpp"
#include "messages/utc_time.hpp"
#include "messages/wire.hpp"
#include "persistence/import_records.hpp"
#include "persistence/keys.hpp"

#include <algorithm>
#include <chrono>
#include <functional>
#include <memory>

#include <spdlog/fmt/ranges.h>
#include <spdlog/spdlog.h>

namespace opforge {

namespace {

using self_pointer = importer_actor::stateful_pointer<importer_state>;

// Scans read whole families; this only bounds a runaway store.
constexpr uint64_t scan_limit = 1'000'000;

caf::error invalid(std::string what) {
  return caf::make_error(errc::request_invalid, std::move(what));
}

// Stores the import's status now, or once the write under way ends: at most one write of an
// import at a time, the last one holding its latest status.
void persist(self_pointer self, const std::string& id) {
  auto& run = self->state.imports[id];
  if (run.storing) {
    run.stale = true;
    return;
  }
  run.storing = true;
  run.stale = false;
  write_batch batch{{{family::meta, import_key(id), encode_import(run.status)}}};
  auto written = [self, id] {
    auto& run = self->state.imports[id];
    run.storing = false;
    if (run.stale)
      persist(self, id);
  };
  self->request(self->state.setup.store, caf::infinite, atom::write_v, std::move(batch))
      .then([written](atom::ok) { written(); },
            [id, written](const caf::error& err) {
              spdlog::warn("import {}: its status was not stored: {}", id, render(err));
              written();
            });
}

import_run* find_run(self_pointer self, const std::string& id) {
  auto found = self->state.imports.find(id);
  return found == self->state.imports.end() ? nullptr : &found->second;
}

// Ends the import: a repair campaign first, when one was asked for and something failed.
void finish(self_pointer self, const std::string& id) {
  auto& run = self->state.imports[id];
  auto done = [self, id](std::string error) {
    auto& run = self->state.imports[id];
    run.status.state = import_state::done;
    run.status.error = std::move(error);
    run.status.ended_ms = unix_ms_now();
    spdlog::info("import {} done: {} of {} tests accepted", id, run.status.accepted,
                 run.status.tests);
    persist(self, id);
  };
  if (!run.repair || run.seeds.empty())
    return done({});
  campaign_request request;
  request.dtypes = run.status.dtypes;
  request.device_kind = run.status.device_kind;
  request.seeds = run.seeds;
  self->request(self->state.setup.campaigns, caf::infinite, atom::submit_v, std::move(request))
      .then(
          [self, id, done](campaign_status& campaign) {
            self->state.imports[id].status.repair_campaign = campaign.campaign_id;
            done({});
          },
          [done](const caf::error& err) {
            done("the repair campaign did not start: " + message(err));
          });
}

// Records one verdict; the last one ends the import.
void decide(self_pointer self, const std::string& id, import_verdict verdict) {
  auto& run = self->state.imports[id];
  if (verdict.verdict == to_import_outcome(contract::outcome::pass))
    ++run.status.accepted;
  run.status.verdicts.push_back(std::move(verdict));
  ++run.status.decided;
  if (run.status.state == import_state::testing && run.pending == 0 &&
      run.status.decided == run.status.tests)
    finish(self, id);
  else
    persist(self, id);
}

// A failure that a repair session can start from: the candidate's fault, not the harness's.
void seed(import_run& run, const parsed_kernel& kernel, const import_target& target,
          std::string feedback) {
  for (const auto& s : run.seeds)
    if (s.op == target.op && s.variant == target.variant)
      return;
  run.seeds.push_back({target.op, target.variant, kernel.source, std::move(feedback)});
}

void accept(self_pointer self, const std::string& id, const parsed_kernel& kernel,
            const import_target& target, const contract::test_result& test,
            const device_job_result& job, import_verdict verdict) {
  auto& run = self->state.imports[id];
  contract::library_kernel k;
  k.op = target.op;
  k.variant = target.variant;
  k.wrapper = target.wrapper;
  k.source = kernel.source;
  k.hash = content_hash(kernel.source);
  for (const auto& [name, result] : test.per_dtype)
    if (result.outcome == contract::dtype_outcome::pass)
      if (auto dtype = contract::from_string<contract::dtype>(name))
        k.dtypes.push_back(*dtype);
  k.aten_overloads = target.aten_overloads;
  k.provenance = {
      {"origin", "imported:" + run.status.source}, {"import_id", id}, {"file", kernel.path}};
  k.proofs.push_back({.fingerprint = job.fingerprint,
                      .device_kind = run.status.device_kind,
                      .toolchain = job.toolchain,
                      .outcome = contract::outcome::pass,
                      .tests_run = test.tests_run,
                      .tests_passed = test.tests_passed,
                      .validated_at_ms = unix_ms_now()});
  self->request(self->state.setup.library, caf::infinite, atom::add_v, std::move(k))
      .then(
          [self, id, verdict](kernel_version&) mutable {
            verdict.verdict = to_import_outcome(contract::outcome::pass);
            decide(self, id, std::move(verdict));
          },
          [self, id, verdict](const caf::error& err) mutable {
            verdict.verdict = to_import_outcome(contract::outcome::harness_error);
            verdict.detail = "it passed, but the library did not take it: " + message(err);
            decide(self, id, std::move(verdict));
          });
}

// Lint, then test, then the library: what a session does with a candidate.
void judge(self_pointer self, const std::string& id, size_t index, import_target target,
           std::vector<std::string> dtypes) {
  auto& run = self->state.imports[id];
  const auto& kernel = run.kernels[index];
  auto job_id = id + ":" + kernel.path + ":" + operator_id(target.op, target.variant);
  import_verdict verdict{.path = kernel.path,
                         .op = operator_id(target.op, target.variant),
                         .hash = content_hash(kernel.source)};
  const auto& setup = self->state.setup;
  ++run.pending;
  auto fault = [self, id](import_verdict verdict, const std::string& what) {
    --self->state.imports[id].pending;
    verdict.verdict = to_import_outcome(contract::outcome::harness_error);
    verdict.detail = what;
    decide(self, id, std::move(verdict));
  };
  auto lint = lint_job(job_id + ":lint", kernel.source, target.op, target.wrapper,
                       run.status.device_kind, setup.job_deadline_ms);
  auto test =
      test_job(job_id + ":test", target.op, target.variant, kernel.source, target.wrapper, dtypes,
               {run.status.device_kind, setup.sample_timeout_s, setup.job_deadline_ms});
  self->request(setup.jobs, caf::infinite, atom::submit_v, std::move(lint))
      .then(
          [self, id, index, target, verdict, fault,
           test = std::move(test)](device_job_result& linted) mutable {
            if (linted.status != contract::job_status::done)
              return fault(verdict, "lint job " + to_string(linted.status) + ": " + linted.error);
            auto lint = wire::decode_as<contract::lint_result>(linted.payload, "lint_result");
            if (!lint)
              return fault(verdict, render(lint.error()));
            if (!lint->ok || lint->syntax_error) {
              auto& run = self->state.imports[id];
              --run.pending;
              seed(run, run.kernels[index], target, failure_feedback(*lint));
              verdict.verdict = to_import_outcome(lint->gate_outcome == contract::outcome::pass
                                                      ? contract::outcome::lint_violation
                                                      : lint->gate_outcome);
              verdict.detail = verdict_line(*lint);
              return decide(self, id, std::move(verdict));
            }
            self->request(self->state.setup.jobs, caf::infinite, atom::submit_v, std::move(test))
                .then(
                    [self, id, index, target, verdict, fault](device_job_result& tested) mutable {
                      if (tested.status != contract::job_status::done)
                        return fault(verdict,
                                     "test job " + to_string(tested.status) + ": " + tested.error);
                      auto result =
                          wire::decode_as<contract::test_result>(tested.payload, "test_result");
                      if (!result)
                        return fault(verdict, render(result.error()));
                      auto& run = self->state.imports[id];
                      --run.pending;
                      const auto& kernel = run.kernels[index];
                      if (result->outcome == contract::outcome::pass)
                        return accept(self, id, kernel, target, *result, tested,
                                      std::move(verdict));
                      verdict.verdict = to_import_outcome(result->outcome);
                      verdict.detail = verdict_line(*result);
                      if (result->outcome == contract::outcome::runtime_error &&
                          !kernel.overload.empty())
                        verdict.detail += " (the impl is called as the OpInfo of " + target.op +
                                          " calls it, which may not be the schema of " +
                                          kernel.overload + ")";
                      if (result->outcome != contract::outcome::harness_error)
                        seed(run, kernel, target, failure_feedback(*result));
                      decide(self, id, std::move(verdict));
                    },
                    [fault, verdict](const caf::error& err) { fault(verdict, render(err)); });
          },
          [fault, verdict](const caf::error& err) { fault(verdict, render(err)); });
}

// Decides what needs no device, and sends the rest to be judged.
void test_all(self_pointer self, const std::string& id, const contract::catalog_result& catalog) {
  auto& run = self->state.imports[id];
  run.status.state = import_state::testing;
  persist(self, id);
  std::vector<std::pair<size_t, resolution>> resolved;
  for (size_t i = 0; i < run.kernels.size(); ++i) {
    auto r = resolve(catalog, run.kernels[i]);
    run.status.tests += r.targets.empty() ? 1 : r.targets.size();
    resolved.emplace_back(i, std::move(r));
  }
  // Counted first, so that no early verdict looks like the last one.
  ++run.pending;
  for (auto& [index, r] : resolved) {
    const auto& kernel = self->state.imports[id].kernels[index];
    auto hash = content_hash(kernel.source);
    if (r.targets.empty()) {
      decide(self, id, {kernel.path, "", r.verdict, r.detail, hash});
      continue;
    }
    for (auto& target : r.targets) {
      auto& run = self->state.imports[id];
      auto op = operator_id(target.op, target.variant);
      if (run.present.count(kernel_key(op, kernel.source))) {
        decide(self, id,
               {kernel.path, op, import_outcome::present, "the library has this source for " + op,
                hash});
        continue;
      }
      std::vector<std::string> dtypes;
      for (const auto& dtype : run.status.dtypes)
        if (std::ranges::find(target.dtypes, dtype) != target.dtypes.end())
          dtypes.push_back(dtype);
      if (dtypes.empty()) {
        decide(self, id,
               {kernel.path, op, import_outcome::skipped,
                fmt::format("{} supports none of the requested dtypes ({})", op,
                            fmt::join(run.status.dtypes, ", ")),
                hash});
        continue;
      }
      judge(self, id, index, std::move(target), std::move(dtypes));
    }
  }
  --self->state.imports[id].pending;
  auto& status = self->state.imports[id].status;
  if (self->state.imports[id].pending == 0 && status.decided == status.tests)
    finish(self, id);
}

void fail(self_pointer self, const std::string& id, const std::string& why) {
  auto& status = self->state.imports[id].status;
  status.state = import_state::failed;
  status.error = why;
  status.ended_ms = unix_ms_now();
  spdlog::warn("import {} failed: {}", id, why);
  persist(self, id);
}

// Whether a kernel is left unmapped that the full catalog may map: one none of whose names the
// catalog knew. One whose name is an OpInfo that does not dispatch to its overload (abs_ read as
// abs) or that the catalog excludes is decided; the full catalog would say the same.
bool unmapped(const contract::catalog_result& catalog, const std::vector<parsed_kernel>& kernels) {
  std::set<std::string> known;
  for (const auto& op : catalog.operators)
    known.insert(op.name);
  for (const auto& op : catalog.excluded)
    known.insert(op.name);
  return std::any_of(kernels.begin(), kernels.end(), [&](const parsed_kernel& kernel) {
    auto guesses = catalog_guesses(kernel);
    return resolve(catalog, kernel).verdict == import_outcome::unmapped &&
           std::none_of(guesses.begin(), guesses.end(),
                        [&](const std::string& name) { return known.count(name) > 0; });
  });
}

// Submits `job` (a job of `what`, e.g. "catalog") and hands its decoded `Result` to `then`; a
// job that did not finish, or an answer that does not decode, fails the import.
template <class Result>
void ask_worker(self_pointer self, const std::string& id, device_job job, const std::string& what,
                std::function<void(Result&)> then) {
  self->request(self->state.setup.jobs, caf::infinite, atom::submit_v, std::move(job))
      .then(
          [self, id, what, then = std::move(then)](device_job_result& result) {
            if (result.status != contract::job_status::done)
              return fail(self, id,
                          "the " + what + " job " + to_string(result.status) + ": " + result.error);
            auto decoded = wire::decode_as<Result>(result.payload, what + "_result");
            if (!decoded)
              return fail(self, id, render(decoded.error()));
            then(*decoded);
          },
          [self, id, what](const caf::error& err) {
            fail(self, id, "no " + what + " result from a worker: " + render(err));
          });
}

// Asks a worker for the catalog of `names` (every operator when empty).
void ask_catalog(self_pointer self, const std::string& id, const std::string& job,
                 std::vector<std::string> names,
                 std::function<void(contract::catalog_result&)> then) {
  auto& run = self->state.imports[id];
  ask_worker(self, id,
             catalog_job(id + job, run.status.device_kind, std::move(names), catalog_deadline_ms),
             "catalog", std::move(then));
}

// The catalog of every operator, for kernels whose names did not lead to theirs.
void full_catalog(self_pointer self, const std::string& id) {
  ask_catalog(self, id, ":catalog", {},
              [self, id](contract::catalog_result& catalog) { test_all(self, id, catalog); });
}

// Asks the catalog for the operators the files' names suggest, in one job (a name no OpInfo has
// comes back in `unknown`, an answer, not a failed job); what they leave unmapped, the full
// catalog resolves.
void resolve_all(self_pointer self, const std::string& id) {
  auto& run = self->state.imports[id];
  run.status.state = import_state::resolving;
  persist(self, id);
  std::set<std::string> names;
  for (const auto& kernel : run.kernels)
    for (auto& name : catalog_guesses(kernel))
      names.insert(std::move(name));
  if (names.empty())
    return test_all(self, id, {});
  ask_catalog(self, id, ":catalog:named", {names.begin(), names.end()},
              [self, id](contract::catalog_result& catalog) {
                if (!catalog.unknown.empty())
                  spdlog::info("import {}: no OpInfo named {} (guessed from file names)", id,
                               fmt::join(catalog.unknown, ", "));
                if (unmapped(catalog, self->state.imports[id].kernels))
                  return full_catalog(self, id);
                test_all(self, id, catalog);
              });
}

// An installed backend, judged by a device worker in one job through the dispatcher: a verdict
// per overload it registered. None enters the library: its kernels are the package's code, not
// a Triton file of a candidate's form.
void judge_backend(self_pointer self, const std::string& id) {
  auto& run = self->state.imports[id];
  run.status.state = import_state::testing;
  persist(self, id);
  const auto& setup = self->state.setup;
  auto job = backend_job(id + ":backend", run.backend, run.status.dtypes,
                         {run.status.device_kind, setup.sample_timeout_s, setup.job_deadline_ms});
  ask_worker<contract::backend_result>(self, id, std::move(job), "backend",
                                       [self, id](contract::backend_result& judged) {
                                         auto& run = self->state.imports[id];
                                         run.status.files = judged.overloads.size();
                                         run.status.tests = judged.overloads.size();
                                         for (const auto& overload : judged.overloads)
                                           decide(self, id, overload_verdict(overload));
                                         if (judged.overloads.empty())
                                           finish(self, id);
                                       });
}

// The library's kernels now, so that a kernel imported before is not tested again.
void start(self_pointer self, const std::string& id) {
  self->request(self->state.setup.store, caf::infinite, atom::scan_v, family::kernels,
                std::string{}, scan_limit)
      .then(
          [self, id](std::vector<key_value>& kernels) {
            auto& run = self->state.imports[id];
            for (const auto& kv : kernels)
              run.present.insert(kv.key);
            resolve_all(self, id);
          },
          [self, id](const caf::error& err) {
            fail(self, id, "cannot read the library: " + render(err));
          });
}

// Checks a new import's settings and fills in the defaults.
caf::expected<import_status> open_import(const importer_setup& setup, import_request& request) {
  if (request.source.empty())
    return invalid("name the kernel set's source (its provenance: imported:<source>)");
  import_status status;
  status.layout = request.layout;
  status.source = request.source;
  status.device_kind = request.device_kind.empty() ? setup.device_kind : request.device_kind;
  if (!is_device_kind(status.device_kind) || status.device_kind == no_device_kind)
    return invalid("device kind '" + status.device_kind +
                   "': must be a device kind other than none (" + std::string{device_kind_rule} +
                   ")");
  status.dtypes = request.dtypes.empty() ? setup.dtypes : request.dtypes;
  for (const auto& dtype : status.dtypes)
    if (!contract::from_string<contract::dtype>(dtype))
      return invalid("dtype '" + dtype + "': must be one of " +
                     contract::one_of<contract::dtype>());
  if (request.repair && !setup.campaigns)
    return invalid("this daemon runs no campaigns, so it cannot repair");
  bool installed = request.layout == import_layout::torch_library;
  if (installed && request.package.empty())
    return invalid("the torch-library layout judges an installed package: name it (package)");
  if (!installed && (!request.package.empty() || !request.enable.empty() || !request.ops.empty()))
    return invalid("package, enable and ops go with the torch-library layout, not " +
                   to_string(request.layout));
  if (installed && request.repair)
    return invalid("an installed backend cannot be repaired: its kernels are the package's code");
  if (installed) {
    // The worker reads the job by the contract's rules (backend_request's charset and lengths):
    // a request they refuse is refused here, by the same reader, before anything is queued.
    auto job = backend_job("", {request.package, request.enable, request.ops}, status.dtypes,
                           {status.device_kind, setup.sample_timeout_s, setup.job_deadline_ms});
    if (auto checked = wire::decode_as<contract::backend_request>(job.payload, "import"); !checked)
      return invalid(message(checked.error()));
  }
  status.created_ms = unix_ms_now();
  status.state = import_state::receiving;
  return status;
}

// An import the store holds as running was cut off when the last daemon stopped: it is said to
// have failed, its verdicts so far kept (the kernels it accepted are in the library).
void end_interrupted(self_pointer self) {
  self->request(self->state.setup.store, caf::infinite, atom::scan_v, family::meta,
                imports_prefix(), scan_limit)
      .then(
          [self](std::vector<key_value>& stored) {
            std::vector<write_op> cut_off;
            for (const auto& kv : stored) {
              auto status = decode_import(kv.value);
              if (!status) {
                spdlog::warn("{}", render(status.error()));
                continue;
              }
              // One this daemon opened since it started is live, whatever the scan read.
              if (ended(status->state) || find_run(self, status->import_id))
                continue;
              status->error = "the daemon stopped while the import was " +
                              to_string(status->state) + "; the verdicts before that stand";
              status->state = import_state::failed;
              status->ended_ms = unix_ms_now();
              cut_off.push_back({family::meta, kv.key, encode_import(*status)});
            }
            if (cut_off.empty())
              return;
            spdlog::info("{} imports cut off by the last stop are marked failed", cut_off.size());
            self->request(self->state.setup.store, caf::infinite, atom::write_v,
                          write_batch{std::move(cut_off)})
                .then([](atom::ok) {},
                      [](const caf::error& err) {
                        spdlog::warn("imports cut off by the last stop: not stored: {}",
                                     render(err));
                      });
          },
          [](const caf::error& err) {
            spdlog::warn("cannot read the stored imports: {}", render(err));
          });
}

} // namespace

importer_actor::behavior_type importer(importer_actor::stateful_pointer<importer_state> self,
                                       importer_setup setup) {
  self->state.setup = std::move(setup);
  end_interrupted(self);
  return {
      [self](atom::onboard, import_request& request) -> caf::result<import_status> {
        auto id = request.import_id;
        if (id.empty()) {
          auto status = open_import(self->state.setup, request);
          if (!status)
            return status.error();
          id = "import-" + timestamped_id();
          status->import_id = id;
          auto& run = self->state.imports[id];
          run.status = std::move(*status);
          run.repair = request.repair;
          run.backend = {request.package, request.enable, request.ops};
          spdlog::info("import {} opened: {} layout from {} on {}", id,
                       to_string(run.status.layout), run.status.source, run.status.device_kind);
          persist(self, id);
        }
        auto* run = find_run(self, id);
        if (!run)
          return invalid("no import '" + id + "' in this daemon");
        if (run->status.state != import_state::receiving)
          return invalid("import " + id + " takes no more files (it is " +
                         to_string(run->status.state) + ")");
        if (run->status.layout == import_layout::torch_library) {
          if (!request.files.empty() || request.more) {
            fail(self, id,
                 "the torch-library layout takes no files: the worker imports the package");
            return run->status;
          }
          judge_backend(self, id);
          return run->status;
        }
        for (const auto& file : request.files)
          run->kernels.push_back(parse_kernel(run->status.layout, file));
        run->status.files = run->kernels.size();
        if (!request.more) {
          if (run->kernels.empty()) {
            fail(self, id, "the kernel set has no files");
            return run->status;
          }
          start(self, id);
        }
        return run->status;
      },
      [self](atom::status, const std::string& id) -> caf::result<import_status> {
        if (auto* run = find_run(self, id))
          return run->status;
        auto promise = self->make_response_promise<import_status>();
        self->request(self->state.setup.store, caf::infinite, atom::get_v, family::meta,
                      import_key(id))
            .then(
                [promise, id](stored_value& stored) mutable {
                  if (!stored.value) {
                    promise.deliver(invalid("no import '" + id + "' in this daemon's store"));
                    return;
                  }
                  auto status = decode_import(*stored.value);
                  if (!status) {
                    promise.deliver(status.error());
                    return;
                  }
                  promise.deliver(std::move(*status));
                },
                [promise](const caf::error& err) mutable { promise.deliver(err); });
        return promise;
      },
      [self](atom::list) -> caf::result<std::vector<import_status>> {
        auto promise = self->make_response_promise<std::vector<import_status>>();
        self->request(self->state.setup.store, caf::infinite, atom::scan_v, family::meta,
                      imports_prefix(), scan_limit)
            .then(
                [self, promise](std::vector<key_value>& stored) mutable {
                  std::vector<import_status> out;
                  for (const auto& kv : stored) {
                    auto status = decode_import(kv.value);
                    if (!status) {
                      promise.deliver(status.error());
                      return;
                    }
                    // What this daemon holds is newer than a write still under way.
                    if (auto* run = find_run(self, status->import_id))
                      *status = run->status;
                    status->verdicts.clear(); // a list of imports, not of their verdicts
                    out.push_back(std::move(*status));
                  }
                  promise.deliver(std::move(out));
                },
                [promise](const caf::error& err) mutable { promise.deliver(err); });
        return promise;
      },
  };
}

} // namespace opforge
