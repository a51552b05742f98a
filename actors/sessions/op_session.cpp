#include "actors/sessions/op_session.hpp"

#include "actors/library/kernels.hpp"
#include "actors/sessions/feedback.hpp"
#include "messages/contract.hpp"
#include "messages/device_messages.hpp"
#include "messages/errors.hpp"
#include "messages/jobs.hpp"
#include "messages/llm_messages.hpp"
#include "messages/wire.hpp"
#include "persistence/keys.hpp"

#include <algorithm>
#include <atomic>
#include <chrono>

#include <spdlog/spdlog.h>

namespace opforge {

namespace {

using self_pointer = op_session_actor::stateful_pointer<op_session_state>;

// Chat request ids are unique in the process, which is what an endpoint needs to cancel one.
std::atomic<uint64_t> next_request_id{1};

int64_t now_ms() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(
             std::chrono::system_clock::now().time_since_epoch())
      .count();
}

// The session's kernel, as it ends SUCCESS: its proposal with the verdict that passed it.
proved_version final_version(const session_record& r) {
  // Only a passing test verdict ends a session in SUCCESS.
  return {.source = r.proposal,
          .verdict = r.verdict.test() ? *r.verdict.test() : contract::test_result{},
          .toolchain = r.toolchain,
          .device_kind = r.device_kind,
          .toolchain_versions = r.toolchain_versions,
          .llm_calls = r.total_calls};
}

// A kernel is recorded for the dtypes it passed; the ones its test skipped are named apart. Its
// timings go with it unless its timer measured no kernel (the interpreter's): those checked the
// OPTIMIZE stage's logic and are no speed verdict.
kernel_record accepted_kernel(const session_record& r, const proved_version& v, int64_t at_ms) {
  const auto& verdict = v.verdict;
  auto tested = dtypes_of_pass(verdict, r.dtypes);
  kernel_record kernel;
  kernel.op = r.op;
  kernel.variant = r.variant;
  kernel.wrapper = r.wrapper;
  kernel.source = v.source;
  kernel.dtypes = std::move(tested.passed);
  for (auto& [dtype, reason] : tested.skipped)
    kernel.skipped_dtypes[dtype] = std::move(reason);
  kernel.aten_overloads = r.aten_overloads;
  // A session seeded with a stored kernel is repairing it.
  kernel.origin = r.seed_kernel.empty() ? "campaign" : "repair";
  kernel.campaign_id = r.campaign_id;
  kernel.session_id = r.session_id;
  kernel.endpoint = r.endpoint;
  kernel.model = r.model;
  kernel.dialogs = r.dialog;
  kernel.llm_calls = v.llm_calls;
  kernel.calls_in_last_dialog = r.calls_in_dialog;
  kernel.tests_run = verdict.tests_run;
  kernel.tests_passed = verdict.tests_passed;
  kernel.toolchain = v.toolchain;
  kernel.toolchain_versions = v.toolchain_versions;
  kernel.device_kind = v.device_kind;
  kernel.accepted_at_ms = at_ms;
  if (v.timer != logic_only_timer)
    kernel.timings = merge_timings({}, v.timings);
  return kernel;
}

// The writes of a SUCCESS: every proved version, the kept one accepted last (now), so that it is
// the operator's current kernel, the others when they were proved.
std::vector<write_op> accepted_versions(const session_record& r, int64_t at_ms) {
  std::vector<write_op> out;
  auto add = [&out](const kernel_record& kernel) {
    for (auto& op : accept_kernel(kernel))
      out.push_back(std::move(op));
  };
  auto kept = final_version(r);
  auto kept_at = at_ms;
  for (const auto& v : r.versions)
    if (v.source != kept.source) {
      add(accepted_kernel(r, v, v.proved_at_ms));
      kept_at = std::max(kept_at, v.proved_at_ms + 1);
    } else {
      kept = v;
    }
  add(accepted_kernel(r, kept, kept_at));
  return out;
}

void act(self_pointer self);

// Checkpoints a step and, once the store has it, carries out the next action.
void apply(self_pointer self, step_result result) {
  auto& st = self->state;
  if (result.transitions.empty())
    return;
  st.record = std::move(result.record);
  auto at = now_ms();
  for (auto& v : st.record.versions)
    if (v.proved_at_ms == 0)
      v.proved_at_ms = at;
  st.writing = true;
  auto batch = checkpoint(st.record, result.transitions, at);
  self->request(st.services.store, caf::infinite, atom::write_v, std::move(batch))
      .then(
          [self](atom::ok) {
            auto& st = self->state;
            st.writing = false;
            if (st.services.progress)
              self->send(st.services.progress, atom::progress_v, summarize(st.record));
            if (st.services.library && st.record.state == session_state::success) {
              auto op_id = operator_id(st.record.op, st.record.variant);
              for (const auto& v : st.record.versions)
                if (v.source != st.record.proposal)
                  self->send(st.services.library, atom::accepted_v, kernel_key(op_id, v.source),
                             v.device_kind);
              self->send(st.services.library, atom::accepted_v,
                         kernel_key(op_id, st.record.proposal), st.record.device_kind);
            }
            if (st.cancel_pending) {
              st.cancel_pending = false;
              auto ctx = session_context{*st.services.templates, st.services.examples};
              auto cancelled = step(st.record, cancel_requested{"by request"}, ctx);
              // A session that has just ended has nothing left to cancel: it finishes.
              if (!cancelled.transitions.empty()) {
                apply(self, std::move(cancelled));
                return;
              }
            }
            act(self);
          },
          [self](const caf::error& err) {
            // Without its checkpoint the session must not go on: it resumes from the last stored
            // state when the daemon starts again.
            self->state.promise.deliver(
                caf::make_error(errc::store_io_failed, "session " + self->state.record.session_id +
                                                           ": checkpoint failed: " + render(err)));
            self->quit(err);
          });
}

void on_event(self_pointer self, const session_event& event) {
  auto& st = self->state;
  st.llm_request.reset();
  st.job.reset();
  apply(self,
        step(st.record, event, session_context{*st.services.templates, st.services.examples}));
}

// Replies for an older revision (after a cancel) are dropped.
bool stale(self_pointer self, uint64_t revision) {
  return self->state.record.revision != revision;
}

void ask(self_pointer self, const ask_llm& action) {
  auto& st = self->state;
  chat_request request;
  request.request_id = next_request_id++;
  request.campaign_id = st.record.campaign_id;
  request.session_id = st.record.session_id;
  request.op = st.record.op;
  request.answer_index = st.record.total_calls;
  for (const auto& m : action.messages)
    request.messages.push_back({m.role, m.content});
  st.llm_request = request.request_id;
  auto revision = st.record.revision;
  self->request(st.services.llm, caf::infinite, atom::complete_v, std::move(request))
      .then(
          [self, revision](chat_result& r) {
            if (stale(self, revision))
              return;
            switch (r.outcome) {
            case chat_outcome::ok:
            case chat_outcome::truncated:
              if (auto& tokens = self->state.services.tokens)
                tokens->used += r.usage.prompt + r.usage.completion;
              on_event(self,
                       llm_answered{std::move(r.content), r.outcome == chat_outcome::truncated,
                                    r.usage.prompt, r.usage.completion});
              return;
            case chat_outcome::context_exhausted:
              on_event(self, llm_context_exhausted{r.error});
              return;
            case chat_outcome::endpoint_fault:
            case chat_outcome::cancelled:
            case chat_outcome::rejected:
              on_event(self, llm_faulted{std::string{to_string(r.outcome)} + ": " + r.error,
                                         r.outcome == chat_outcome::rejected});
              return;
            }
          },
          [self, revision](const caf::error& err) {
            if (!stale(self, revision))
              on_event(self, llm_faulted{render(err)});
          });
}

// The first log field from `from` on that is too long to feed back as it is.
std::optional<size_t> next_long_log(const op_session_state& st, const contract::test_result& result,
                                    size_t from) {
  if (!st.services.summarizer || !result.failure)
    return std::nullopt;
  for (auto i = from; i < log_fields.size(); ++i)
    if (((*result.failure).*log_fields[i]).size() > st.services.summarize_over_chars)
      return i;
  return std::nullopt;
}

// Feeds a test result back once each long log in its failure (compile log, traceback, crash
// output) has gone through the summarizer, one after the other. A log the summarizer fails on is
// fed back as it is; the feedback cuts it.
void on_test_result(self_pointer self, test_finished event, size_t from_field = 0) {
  auto field = next_long_log(self->state, event.result, from_field);
  if (!field) {
    on_event(self, std::move(event));
    return;
  }
  auto& st = self->state;
  auto revision = st.record.revision;
  auto log = log_fields[*field];
  summary_request request{st.record.session_id, st.record.op, (*event.result.failure).*log};
  self->request(st.services.summarizer, caf::infinite, atom::summarize_v, std::move(request))
      .then(
          [self, revision, event, log, next = *field + 1](summary_result& summary) mutable {
            if (stale(self, revision))
              return;
            (*event.result.failure).*log = std::move(summary.text);
            on_test_result(self, std::move(event), next);
          },
          [self, revision, event, next = *field + 1](const caf::error&) mutable {
            if (!stale(self, revision))
              on_test_result(self, std::move(event), next);
          });
}

std::string join_hosts(const std::vector<std::string>& hosts) {
  std::string out;
  for (const auto& host : hosts)
    out += (out.empty() ? "" : ", ") + host;
  return out;
}

// A verdict other than pass after `passed_on` passed the same candidate: it is the verdict, and
// says that the hosts disagreed.
void disagree(self_pointer self, test_finished& verdict, std::vector<std::string> passed_on,
              const std::string& host) {
  auto prefix = "the hosts disagree: it passed on " + join_hosts(passed_on) + ", but on " + host;
  spdlog::warn("session {}: {} it ended {}", self->state.record.session_id, prefix,
               to_string(verdict.result.outcome));
  auto& failure = verdict.result.failure;
  if (!failure)
    failure.emplace();
  failure->message = prefix + ": " + failure->message;
  verdict.hosts.passed_on = std::move(passed_on);
  verdict.hosts.failed_on = host;
}

// Submits `job`; a test that passed on fewer distinct hosts than acceptance.confirmations asks
// for is submitted again to a host not in `passed_on`.
void submit(self_pointer self, device_job job, std::vector<std::string> passed_on = {}) {
  auto& st = self->state;
  st.job = job.id;
  auto revision = st.record.revision;
  bool is_lint = job.kind == contract::job_kind::lint;
  bool is_benchmark = job.kind == contract::job_kind::benchmark;
  self->request(st.services.jobs, caf::infinite, atom::submit_v, job)
      .then(
          [self, revision, is_lint, is_benchmark, job,
           passed_on](device_job_result& result) mutable {
            if (stale(self, revision))
              return;
            if (result.status != contract::job_status::done) {
              on_event(self, harness_faulted{to_string(result.status) + ": " + result.error});
              return;
            }
            if (is_benchmark) {
              auto timed =
                  wire::decode_as<contract::benchmark_result>(result.payload, "benchmark_result");
              if (!timed)
                on_event(self, harness_faulted{render(timed.error())});
              else
                on_event(self, benchmark_finished{std::move(*timed), result.fingerprint,
                                                  self->state.services.device_kind, now_ms()});
              return;
            }
            if (is_lint) {
              auto lint = wire::decode_as<contract::lint_result>(result.payload, "lint_result");
              if (!lint)
                on_event(self, harness_faulted{render(lint.error())});
              else
                on_event(self, lint_finished{std::move(*lint)});
              return;
            }
            auto test = wire::decode_as<contract::test_result>(result.payload, "test_result");
            if (!test) {
              on_event(self, harness_faulted{render(test.error())});
              return;
            }
            test_finished verdict{std::move(*test), result.fingerprint,
                                  self->state.services.device_kind};
            verdict.toolchain_versions = std::move(result.toolchain);
            auto passed = verdict.result.outcome == contract::outcome::pass;
            if (passed)
              passed_on.push_back(result.host);
            else if (!passed_on.empty())
              disagree(self, verdict, std::move(passed_on), result.host);
            auto wanted = self->state.services.confirmations;
            if (passed && static_cast<int64_t>(passed_on.size()) < wanted) {
              job.id = self->state.record.session_id +
                       ":test:" + std::to_string(self->state.record.revision) + ":confirm" +
                       std::to_string(passed_on.size());
              job.avoid_hosts = passed_on;
              submit(self, std::move(job), std::move(passed_on));
              return;
            }
            if (passed && wanted > 1)
              verdict.hosts.confirmed_on = std::move(passed_on);
            on_test_result(self, std::move(verdict));
          },
          // A worker that vanished under the job says nothing about the candidate: only a death
          // of its candidate process, which the worker reports as a `crash` verdict, does.
          [self, revision](const caf::error& err) {
            if (stale(self, revision))
              return;
            on_event(self, harness_faulted{render(err)});
          });
}

std::string job_id(const op_session_state& st, contract::job_kind kind) {
  return st.record.session_id + ":" + to_string(kind) + ":" + std::to_string(st.record.revision);
}

test_limits limits_of(const op_session_state& st) {
  return {st.services.device_kind, st.services.sample_timeout_s, st.services.job_deadline_ms,
          st.services.extra_sets,  st.services.model_samples,    st.services.fingerprint};
}

void run_job(self_pointer self, contract::job_kind kind, const std::string& source) {
  auto& st = self->state;
  const auto& r = st.record;
  auto id = job_id(st, kind);
  // The campaign took only dtypes of the contract (campaign_manager's accept).
  submit(self, kind == contract::job_kind::lint
                   ? lint_job(std::move(id), source, r.op, r.wrapper, st.services.device_kind,
                              st.services.job_deadline_ms)
                   : test_job(std::move(id), r.op, r.variant, source, r.wrapper, r.dtypes,
                              limits_of(st)));
}

// Times a proved version against the baseline on the inputs a test runs (its model sets too).
void run_benchmark(self_pointer self, const benchmark_candidate& action) {
  auto& st = self->state;
  const auto& r = st.record;
  submit(self, benchmark_job(job_id(st, contract::job_kind::benchmark), r.op, r.variant,
                             action.source, r.wrapper, action.dtypes, limits_of(st)));
}

// Carries out what the record asks for next; after faults, once the back-off has passed.
void issue(self_pointer self, const session_action& action) {
  std::visit(
      [self](const auto& a) {
        using type = std::decay_t<decltype(a)>;
        if constexpr (std::is_same_v<type, ask_llm>) {
          if (auto& tokens = self->state.services.tokens; tokens && tokens->spent())
            on_event(self, tokens_spent{tokens->describe()});
          else
            ask(self, a);
        } else if constexpr (std::is_same_v<type, lint_candidate>)
          run_job(self, contract::job_kind::lint, a.source);
        else if constexpr (std::is_same_v<type, test_candidate>)
          run_job(self, contract::job_kind::test, a.source);
        else if constexpr (std::is_same_v<type, benchmark_candidate>)
          run_benchmark(self, a);
        else {
          self->state.promise.deliver(summarize(self->state.record));
          self->quit();
        }
      },
      action);
}

std::chrono::milliseconds delay_of(const session_action& action) {
  return std::visit(
      [](const auto& a) -> std::chrono::milliseconds {
        if constexpr (std::is_same_v<std::decay_t<decltype(a)>, finish_session>)
          return std::chrono::milliseconds{0};
        else
          return a.delay;
      },
      action);
}

void act(self_pointer self) {
  auto action = next_action(self->state.record);
  if (auto delay = delay_of(action); delay.count() > 0) {
    self->delayed_send(self, delay, atom::retry_v, self->state.record.revision);
    return;
  }
  issue(self, action);
}

} // namespace

write_batch checkpoint(const session_record& record,
                       const std::vector<session_transition>& transitions, int64_t at_ms) {
  write_batch batch;
  batch.ops.push_back({family::sessions,
                       session_key(record.campaign_id, operator_id(record.op, record.variant)),
                       encode_record(record)});
  for (auto t : transitions) {
    t.at_ms = at_ms;
    batch.ops.push_back(
        {family::events, event_key(record.session_id, t.revision), encode_transition(t)});
  }
  if (record.state == session_state::success)
    for (auto& op : accepted_versions(record, at_ms))
      batch.ops.push_back(std::move(op));
  batch.sync = record.state == session_state::success || record.state == session_state::failed;
  return batch;
}

session_summary summarize(const session_record& r) {
  session_summary s;
  s.session_id = r.session_id;
  s.op = r.op;
  s.variant = r.variant;
  s.state = r.state;
  s.end_reason = r.end_reason;
  s.dialogs = r.dialog;
  s.llm_calls = r.total_calls;
  s.faults = r.total_faults;
  s.prompt_tokens = r.prompt_tokens;
  s.completion_tokens = r.completion_tokens;
  s.endpoint = r.endpoint;
  if (r.state == session_state::success)
    s.kernel_key = kernel_key(operator_id(r.op, r.variant), r.proposal);
  return s;
}

op_session_actor::behavior_type
op_session(op_session_actor::stateful_pointer<op_session_state> self, session_record record,
           session_services services) {
  self->state.record = std::move(record);
  self->state.services = std::move(services);
  return {
      [self](atom::run) -> caf::result<session_summary> {
        auto& st = self->state;
        if (st.running)
          return caf::make_error(errc::request_invalid,
                                 "session " + st.record.session_id + " is already running");
        st.running = true;
        st.promise = self->make_response_promise<session_summary>();
        if (st.record.state == session_state::prompt)
          apply(self,
                start(st.record, session_context{*st.services.templates, st.services.examples}));
        else
          act(self);
        return st.promise;
      },
      [self](atom::cancel) {
        auto& st = self->state;
        if (st.writing) {
          st.cancel_pending = true;
          return;
        }
        if (st.llm_request)
          self->send(st.services.llm, atom::cancel_v, *st.llm_request);
        if (st.job)
          self->send(st.services.jobs, atom::cancel_v, *st.job);
        if (st.running)
          on_event(self, cancel_requested{"by request"});
      },
      [self](atom::retry, uint64_t revision) {
        if (!stale(self, revision) && !self->state.writing)
          issue(self, next_action(self->state.record));
      },
      [self](atom::failover, std::string& endpoint, std::string& reason) {
        auto& st = self->state;
        // Mid-checkpoint or past GENERATE the move would redo a step: the campaign asks again.
        if (!st.running || st.writing || st.record.state != session_state::generate ||
            st.record.endpoint == endpoint)
          return;
        auto target = std::find_if(st.services.endpoints.begin(), st.services.endpoints.end(),
                                   [&](const session_endpoint& e) { return e.name == endpoint; });
        if (target == st.services.endpoints.end())
          return;
        spdlog::warn("session {}: failover from endpoint {} to {}: {}", st.record.session_id,
                     st.record.endpoint, endpoint, reason);
        if (st.llm_request)
          self->send(st.services.llm, atom::cancel_v, *st.llm_request);
        st.services.llm = target->actor;
        on_event(self, endpoint_moved{target->name, target->model, std::move(reason)});
      },
  };
}

} // namespace opforge
