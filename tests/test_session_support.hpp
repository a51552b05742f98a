#pragma once

// Scripted stand-ins for an LLM endpoint and the device manager, for tests and benchmarks of
// op_session and campaign. They speak the same typed interfaces as the real actors. Answers and
// verdicts come from per-operator queues, or from a function of the request (for runs that are
// killed and restarted); a request with nothing scripted is held unanswered (a model or a worker
// still busy) until it is cancelled.

#include "actors/sessions/op_session.hpp"
#include "actors/store/store.hpp"
#include "messages/actors.hpp"
#include "messages/device_messages.hpp"
#include "messages/errors.hpp"
#include "messages/llm_messages.hpp"
#include "messages/session_messages.hpp"
#include "messages/system_config.hpp"
#include "messages/wire.hpp"
#include "messages/write_batch.hpp"
#include "tests/test_diff_support.hpp"

#include <chrono>
#include <deque>
#include <functional>
#include <map>
#include <mutex>
#include <string>
#include <vector>

#include <caf/actor_system_config.hpp>
#include <caf/scoped_actor.hpp>
#include <caf/typed_event_based_actor.hpp>
#include <caf/typed_response_promise.hpp>

#include <nlohmann/json.hpp>

namespace opforge::testing {

/// What the scripted endpoint serves and what it saw. Shared with the test thread.
struct chat_script {
  std::mutex mutex;
  std::map<std::string, std::deque<chat_result>> answers; // by operator
  // When set, answers every request instead of the queues.
  std::function<chat_result(const chat_request&)> answer_for;
  std::vector<chat_request> requests; // in arrival order
  std::vector<uint64_t> cancelled;

  static chat_result answer(chat_outcome outcome, std::string content_or_error) {
    chat_result r;
    r.outcome = outcome;
    (outcome == chat_outcome::ok || outcome == chat_outcome::truncated ? r.content : r.error) =
        std::move(content_or_error);
    r.usage.prompt = 100;
    r.usage.completion = 50;
    return r;
  }

  void add(const std::string& op, chat_outcome outcome, std::string content_or_error) {
    std::lock_guard guard{mutex};
    answers[op].push_back(answer(outcome, std::move(content_or_error)));
  }

  size_t calls(const std::string& op) {
    std::lock_guard guard{mutex};
    size_t n = 0;
    for (const auto& r : requests)
      n += r.op == op;
    return n;
  }

  chat_request last_request(const std::string& op) {
    std::lock_guard guard{mutex};
    for (auto i = requests.rbegin(); i != requests.rend(); ++i)
      if (i->op == op)
        return *i;
    return {};
  }
};

struct scripted_chat_state {
  std::shared_ptr<chat_script> script;
  std::map<uint64_t, caf::typed_response_promise<chat_result>> held;
  static inline const char* name = "scripted_chat";
};

inline chat_actor::behavior_type
scripted_chat(chat_actor::stateful_pointer<scripted_chat_state> self,
              std::shared_ptr<chat_script> script) {
  self->state.script = std::move(script);
  return {
      [self](atom::complete, chat_request& request) -> caf::result<chat_result> {
        auto& script = *self->state.script;
        std::lock_guard guard{script.mutex};
        script.requests.push_back(request);
        chat_result result;
        if (script.answer_for) {
          result = script.answer_for(request);
        } else {
          auto& queue = script.answers[request.op];
          if (queue.empty()) {
            auto promise = self->make_response_promise<chat_result>();
            self->state.held.emplace(request.request_id, promise);
            return promise;
          }
          result = std::move(queue.front());
          queue.pop_front();
        }
        result.request_id = request.request_id;
        return result;
      },
      [self](atom::cancel, uint64_t request_id) {
        {
          std::lock_guard guard{self->state.script->mutex};
          self->state.script->cancelled.push_back(request_id);
        }
        auto held = self->state.held.find(request_id);
        if (held == self->state.held.end())
          return;
        chat_result r;
        r.request_id = request_id;
        r.outcome = chat_outcome::cancelled;
        held->second.deliver(std::move(r));
        self->state.held.erase(held);
      },
  };
}

/// One scripted reply of the job runner.
struct job_reply {
  contract::job_status status = contract::job_status::done;
  std::string payload;    // the result's msgpack bytes, when done
  std::string error;      // when failed
  caf::error reply_error; // replied instead of a result when set
  std::string host = "scripted-host";
};

inline job_reply done(const contract::test_result& result) {
  return {contract::job_status::done, contract::codec::to_bytes(result), {}, {}};
}

inline job_reply done(const contract::lint_result& result) {
  return {contract::job_status::done, contract::codec::to_bytes(result), {}, {}};
}

inline contract::lint_result clean_lint() {
  return {.ok = true};
}

/// A test result as the worker reports it: `run` tests of which `passed` passed.
inline contract::test_result test_verdict(contract::outcome outcome, int64_t run, int64_t passed,
                                          std::optional<contract::test_failure> failure = {}) {
  return {.outcome = outcome, .tests_run = run, .tests_passed = passed, .failure = failure};
}

/// What the scripted device manager serves and saw. Lint jobs with nothing scripted are clean;
/// test jobs with nothing scripted are held.
struct job_script {
  std::mutex mutex;
  std::map<std::string, std::deque<job_reply>> lint; // by operator
  std::map<std::string, std::deque<job_reply>> test; // by operator
  // When set, answers every job instead of the queues.
  std::function<job_reply(const device_job&, const nlohmann::json& request)> reply_for;
  std::vector<device_job> jobs;
  std::vector<std::string> cancelled;

  void add_test(const std::string& op, job_reply reply) {
    std::lock_guard guard{mutex};
    test[op].push_back(std::move(reply));
  }

  void add_lint(const std::string& op, job_reply reply) {
    std::lock_guard guard{mutex};
    lint[op].push_back(std::move(reply));
  }

  size_t count(const std::string& kind) {
    std::lock_guard guard{mutex};
    size_t n = 0;
    for (const auto& j : jobs)
      n += to_string(j.kind) == kind;
    return n;
  }
};

struct scripted_jobs_state {
  std::shared_ptr<job_script> script;
  std::map<std::string, caf::typed_response_promise<device_job_result>> held;
  static inline const char* name = "scripted_jobs";
};

inline job_runner_actor::behavior_type
scripted_jobs(job_runner_actor::stateful_pointer<scripted_jobs_state> self,
              std::shared_ptr<job_script> script) {
  self->state.script = std::move(script);
  return {
      [self](atom::submit, device_job& job) -> caf::result<device_job_result> {
        auto& script = *self->state.script;
        std::lock_guard guard{script.mutex};
        script.jobs.push_back(job);
        auto request = nlohmann::json::from_msgpack(job.payload);
        job_reply reply;
        if (script.reply_for) {
          reply = script.reply_for(job, request);
        } else {
          auto op = request.at("op").get<std::string>();
          auto& queue = job.kind == contract::job_kind::lint ? script.lint[op] : script.test[op];
          if (queue.empty() && job.kind == contract::job_kind::lint)
            queue.push_back(done(clean_lint()));
          if (queue.empty()) {
            auto promise = self->make_response_promise<device_job_result>();
            self->state.held.emplace(job.id, promise);
            return promise;
          }
          reply = std::move(queue.front());
          queue.pop_front();
        }
        if (reply.reply_error)
          return reply.reply_error;
        device_job_result result;
        result.job_id = job.id;
        result.status = reply.status;
        result.payload = reply.payload;
        result.error = reply.error;
        result.worker_id = "scripted";
        result.fingerprint = "scripted-toolchain";
        result.host = reply.host;
        result.toolchain = {{"torch", "scripted-torch"}};
        return result;
      },
      [self](atom::cancel, const std::string& job_id) {
        {
          std::lock_guard guard{self->state.script->mutex};
          self->state.script->cancelled.push_back(job_id);
        }
        auto held = self->state.held.find(job_id);
        if (held == self->state.held.end())
          return;
        held->second.deliver(device_job_result{
            job_id, contract::job_status::cancelled, {}, {}, "scripted", {}, 0, 1});
        self->state.held.erase(held);
      },
  };
}

/// Forwards checkpoints to the store and calls `observe` with each one's latency once the store
/// has acknowledged it.
struct observed_store_state {
  observed_store_state() = default; // not an aggregate: CAF would try to build it from `self`
  store_actor store;
  std::function<void(std::chrono::steady_clock::duration)> observe;
  static inline const char* name = "observed_store";
};

inline checkpoint_actor::behavior_type
observed_store(checkpoint_actor::stateful_pointer<observed_store_state> self, store_actor store,
               std::function<void(std::chrono::steady_clock::duration)> observe) {
  self->state.store = store;
  self->state.observe = std::move(observe);
  return {
      [self](atom::write, write_batch& batch) -> caf::result<atom::ok> {
        auto promise = self->make_response_promise<atom::ok>();
        auto started = std::chrono::steady_clock::now();
        self->request(self->state.store, caf::infinite, atom::write_v, std::move(batch))
            .then(
                [self, promise, started](atom::ok) mutable {
                  self->state.observe(std::chrono::steady_clock::now() - started);
                  promise.deliver(atom::ok_v);
                },
                [promise](const caf::error& err) mutable { promise.deliver(err); });
        return promise;
      },
  };
}

/// Stops the stand-ins and the checkpoint proxy, then closes the database (it must be closed
/// before its directory goes, and the actor system waits for the store).
inline void stop(caf::scoped_actor& self, const session_services& services, store_actor store) {
  for (auto actor :
       {caf::actor_cast<caf::actor>(services.store), caf::actor_cast<caf::actor>(services.llm),
        caf::actor_cast<caf::actor>(services.jobs)})
    self->send_exit(actor, caf::exit_reason::user_shutdown);
  self->request(store, caf::infinite, atom::shutdown_v)
      .receive([](atom::ok) {}, [](const caf::error&) {});
}

} // namespace opforge::testing
