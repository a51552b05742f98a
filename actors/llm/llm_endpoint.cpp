#include "actors/llm/llm_endpoint.hpp"

#include "messages/errors.hpp"

#include <algorithm>
#include <cstdlib>

#include <caf/actor_cast.hpp>
#include <caf/send.hpp>

#include <spdlog/spdlog.h>

namespace opforge {

namespace {

using namespace std::chrono_literals;

// The HTTP thread's key for a health probe's transfer: requests' tickets start at 1.
constexpr uint64_t health_probe_ticket = 0;

int64_t wall_ms() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(
             std::chrono::system_clock::now().time_since_epoch())
      .count();
}

double breaker_gauge(breaker_state state) {
  switch (state) {
  case breaker_state::closed:
    return 0;
  case breaker_state::half_open:
    return 1;
  case breaker_state::open:
    return 2;
  }
  return 0;
}

} // namespace

// -- the actor ----------------------------------------------------------------------------------

llm_endpoint_state::llm_endpoint_state(
    llm_endpoint_actor::stateful_pointer<llm_endpoint_state> self)
    : self_{self}, rng_{std::random_device{}()} {}

llm_endpoint_state::~llm_endpoint_state() {
  for (auto& [ticket, held] : held_) {
    chat_result result;
    result.request_id = held.request.request_id;
    result.outcome = chat_outcome::cancelled;
    result.attempts = held.attempts;
    result.error = "endpoint " + cfg_.name + " stopped";
    held.promise.deliver(std::move(result));
  }
}

void llm_endpoint_state::init(endpoint_config config, std::shared_ptr<opforge::metrics> m) {
  cfg_ = std::move(config);
  metrics_ = std::move(m);
  if (!cfg_.api_key_env.empty()) {
    if (const char* key = std::getenv(cfg_.api_key_env.c_str()); key && *key)
      api_key_ = key;
    else
      spdlog::warn("llm {}: environment variable {} is not set; requests go without an API key",
                   cfg_.name, cfg_.api_key_env);
  }
  auto now = this->now();
  requests_bucket_.emplace(cfg_.requests_per_minute, now);
  tokens_bucket_.emplace(cfg_.tokens_per_minute, now);
  retry_budget_ = cfg_.retry_budget_max;
  health_probe_wait_ = cfg_.probe_interval;
  in_flight_gauge_ = &metrics_->llm_in_flight(cfg_.name);
  breaker_gauge_ = &metrics_->llm_breaker_state(cfg_.name);
  down_gauge_ = &metrics_->llm_down(cfg_.name);
  latency_histogram_ = &metrics_->llm_latency(cfg_.name);
  prompt_tokens_ = &metrics_->llm_tokens(cfg_.name, "prompt");
  completion_tokens_ = &metrics_->llm_tokens(cfg_.name, "completion");
  reasoning_tokens_ = &metrics_->llm_tokens(cfg_.name, "reasoning");
  in_flight_gauge_->Set(0);
  breaker_gauge_->Set(0);
  down_gauge_->Set(0);
  auto weak = caf::actor_cast<caf::weak_actor_ptr>(self_);
  http_ = std::make_unique<http_client>(
      [weak](http_exchange x) {
        if (auto strong = caf::actor_cast<caf::strong_actor_ptr>(weak))
          caf::anon_send(caf::actor_cast<llm_endpoint_actor>(strong), atom::http_done_v,
                         std::move(x));
      },
      cfg_.record_to);
  spdlog::info("llm {}: {} at {} (context {}, concurrency {}, recording {})", cfg_.name, cfg_.model,
               cfg_.base_url, cfg_.context_window, cfg_.concurrency,
               cfg_.record_to.empty() ? "off" : cfg_.record_to);
}

caf::result<chat_result> llm_endpoint_state::accept(chat_request request) {
  auto owner = caf::actor_cast<caf::actor_addr>(self_->current_sender());
  if (tickets_.count({owner, request.request_id}))
    return caf::make_error(errc::request_invalid, "llm " + cfg_.name + ": request id " +
                                                      std::to_string(request.request_id) +
                                                      " is already held");
  auto ticket = next_ticket_++;
  auto& held = held_[ticket];
  held.accepted = now();
  held.promise = self_->make_response_promise<chat_result>();
  held.prompt_estimate = estimate_prompt_tokens(request.messages);
  retry_budget_ = std::min(cfg_.retry_budget_max, retry_budget_ + cfg_.retry_budget_ratio);
  held.owner = owner;
  tickets_[{owner, request.request_id}] = ticket;
  auto promise = held.promise;
  if (held.prompt_estimate >= cfg_.context_window) {
    held.request = std::move(request);
    chat_result result;
    result.outcome = chat_outcome::context_exhausted;
    result.error = "a prompt of about " + std::to_string(held.prompt_estimate) +
                   " tokens does not fit the context window of " +
                   std::to_string(cfg_.context_window);
    finish(ticket, std::move(result));
    return promise;
  }
  uint64_t wanted = request.max_tokens > 0 ? request.max_tokens : cfg_.max_tokens;
  uint64_t room = cfg_.context_window - held.prompt_estimate;
  held.window_limited = room < wanted;
  auto max_tokens = std::min(wanted, room);
  held.reserved_tokens = static_cast<double>(held.prompt_estimate + max_tokens);
  held.body = chat_body(cfg_, request.messages, max_tokens);
  held.request = std::move(request);
  queue_.push_back(ticket);
  pump();
  return promise;
}

void llm_endpoint_state::cancel(uint64_t request_id) {
  auto owner = caf::actor_cast<caf::actor_addr>(self_->current_sender());
  auto found = tickets_.find({owner, request_id});
  if (found == tickets_.end())
    return;
  auto ticket = found->second;
  auto& held = held_.at(ticket);
  if (held.in_flight) {
    http_->cancel(ticket);
    --in_flight_;
    in_flight_gauge_->Set(in_flight_);
    if (breaker_ == breaker_state::half_open)
      probe_in_flight_ = false; // the probe never finished: let the next request probe
  }
  queue_.erase(std::remove(queue_.begin(), queue_.end(), ticket), queue_.end());
  chat_result result;
  result.outcome = chat_outcome::cancelled;
  result.error = "cancelled by the caller";
  finish(ticket, std::move(result));
  pump();
}

void llm_endpoint_state::on_wakeup() {
  wakeup_pending_ = false;
  pump();
}

void llm_endpoint_state::pump() {
  auto now = this->now();
  if (breaker_ == breaker_state::open && now >= open_until_)
    set_breaker(breaker_state::half_open);
  if (breaker_ == breaker_state::open) {
    fail_queued(hung_ ? "endpoint " + cfg_.name + " " + last_error_ + "; circuit breaker open"
                      : "circuit breaker open after " + std::to_string(consecutive_failures_) +
                            " consecutive failures");
    return;
  }
  while (!queue_.empty() && in_flight_ < cfg_.concurrency) {
    if (breaker_ == breaker_state::half_open && probe_in_flight_)
      return; // one probe at a time; the rest wait for its verdict
    auto ticket = queue_.front();
    auto& held = held_.at(ticket);
    auto cost = held.reserved_tokens;
    if (!requests_bucket_->try_take(1, now)) {
      schedule_wakeup(requests_bucket_->wait_for(1, now));
      return;
    }
    if (!tokens_bucket_->try_take(cost, now)) {
      requests_bucket_->adjust(1);
      schedule_wakeup(tokens_bucket_->wait_for(cost, now));
      return;
    }
    queue_.pop_front();
    start_attempt(ticket, held);
  }
}

void llm_endpoint_state::start_attempt(uint64_t ticket, held_request& held) {
  held.in_flight = true;
  held.silent = false;
  held.backing_off = false;
  ++held.attempts;
  ++in_flight_;
  in_flight_gauge_->Set(in_flight_);
  if (breaker_ == breaker_state::half_open)
    probe_in_flight_ = true;
  http_post post;
  post.ticket = ticket;
  post.attempt = held.attempts;
  post.url = cfg_.base_url + "/chat/completions";
  post.headers = request_headers(auth_headers(), held.request);
  post.body = held.body;
  post.connect_timeout = cfg_.connect_timeout;
  post.total_timeout = cfg_.total_timeout;
  post.first_byte_timeout = cfg_.first_byte_timeout;
  http_->post(std::move(post));
}

std::vector<std::string> llm_endpoint_state::auth_headers() const {
  std::vector<std::string> headers;
  if (!api_key_.empty())
    headers.push_back("Authorization: Bearer " + api_key_);
  for (const auto& [name, value] : cfg_.headers)
    headers.push_back(name + ": " + value);
  return headers;
}

void llm_endpoint_state::on_exchange(http_exchange x) {
  if (x.stalled)
    return on_stall(x);
  if (x.ticket == health_probe_ticket)
    return on_health_probe_answer(x);
  auto found = held_.find(x.ticket);
  if (found == held_.end() || !found->second.in_flight)
    return; // cancelled while the answer was on its way
  auto ticket = found->first;
  auto& held = found->second;
  held.in_flight = false;
  --in_flight_;
  in_flight_gauge_->Set(in_flight_);
  auto verdict =
      classify_exchange(x, cfg_.context_window, held.prompt_estimate, held.window_limited);
  verdict.error = redact_secret(api_key_, std::move(verdict.error));
  if (!cfg_.record_to.empty())
    http_->record(cassette_line(held.request, recorded_per_op_[held.request.op]++, held.body, x,
                                redact_secret(api_key_, x.body), verdict));
  note_attempt(verdict);
  if (verdict.endpoint_ok)
    tokens_bucket_->adjust(held.reserved_tokens -
                           static_cast<double>(verdict.usage.prompt + verdict.usage.completion));
  else
    tokens_bucket_->adjust(held.reserved_tokens); // nothing was generated
  if (verdict.retryable) {
    std::string refusal;
    if (held.attempts >= cfg_.max_attempts)
      refusal = "gave up after " + std::to_string(held.attempts) + " attempts";
    else if (verdict.retry_after && *verdict.retry_after > cfg_.max_retry_after)
      refusal = "Retry-After of " + std::to_string(verdict.retry_after->count()) +
                " ms exceeds max_retry_after";
    else if (retry_budget_ < 1)
      refusal = "the endpoint's retry budget is spent";
    else if (breaker_ == breaker_state::open)
      refusal = "circuit breaker open";
    if (refusal.empty()) {
      retry_budget_ -= 1;
      ++retries_;
      metrics_->llm_retries(cfg_.name, verdict.reason).Increment();
      auto delay = verdict.retry_after ? *verdict.retry_after
                                       : full_jitter_backoff(cfg_.backoff_base, cfg_.backoff_cap,
                                                             held.attempts, rng_);
      held.backing_off = true;
      spdlog::info("llm {}: request {} attempt {} failed ({}); retrying in {} ms", cfg_.name,
                   held.request.request_id, held.attempts, verdict.error, delay.count());
      self_->delayed_send(self_, delay, atom::retry_v, ticket);
      pump();
      return;
    }
    verdict.error += "; " + refusal;
  }
  chat_result result;
  result.outcome = verdict.outcome;
  result.content = redact_secret(api_key_, std::move(verdict.content));
  result.finish_reason = std::move(verdict.finish_reason);
  result.usage = verdict.usage;
  result.error = std::move(verdict.error);
  finish(ticket, std::move(result));
  pump();
}

void llm_endpoint_state::on_backoff_over(uint64_t ticket) {
  auto found = held_.find(ticket);
  if (found == held_.end() || !found->second.backing_off)
    return;
  found->second.backing_off = false;
  queue_.push_front(ticket); // it waited its turn once already
  pump();
}

void llm_endpoint_state::note_answering() {
  if (failing_since_ && down_logged_)
    spdlog::info("llm {}: up again after {} s down", cfg_.name,
                 std::chrono::duration_cast<std::chrono::seconds>(now() - *failing_since_).count());
  failing_since_.reset();
  failing_since_ms_ = 0;
  hung_ = false;
  down_logged_ = false;
  down_gauge_->Set(0);
  health_probe_wait_ = cfg_.probe_interval;
}

void llm_endpoint_state::note_up() {
  note_answering();
  consecutive_failures_ = 0;
  probe_in_flight_ = false;
  if (breaker_ != breaker_state::closed)
    set_breaker(breaker_state::closed);
}

void llm_endpoint_state::note_attempt(const attempt_verdict& verdict) {
  if (verdict.endpoint_ok)
    return note_up();
  last_error_ = verdict.error;
  last_error_ms_ = wall_ms();
  unreachable_ = verdict.unreachable;
  if (!failing_since_) {
    failing_since_ = now();
    failing_since_ms_ = last_error_ms_;
  }
  schedule_health_probe();
  ++consecutive_failures_;
  if (breaker_ == breaker_state::half_open ||
      (breaker_ == breaker_state::closed && consecutive_failures_ >= cfg_.breaker_failures)) {
    probe_in_flight_ = false;
    open_until_ = now() + cfg_.breaker_open_for;
    set_breaker(breaker_state::open);
  }
}

void llm_endpoint_state::on_stall(const http_exchange& notice) {
  if (notice.ticket == health_probe_ticket) {
    if (!health_probe_on_wire_)
      return;
    http_->cancel(health_probe_ticket);
    health_probe_on_wire_ = false;
    note_hung();
    return probe_later();
  }
  auto found = held_.find(notice.ticket);
  if (found == held_.end() || !found->second.in_flight || found->second.attempts != notice.attempt)
    return; // it ended or was cancelled while the notice was on its way
  found->second.silent = true;
  spdlog::info(
      "llm {}: request {} has no byte after {}; asking whether the endpoint answers at all",
      cfg_.name, found->second.request.request_id, seconds_text(cfg_.first_byte_timeout));
  // A busy server answers a probe while it computes a long answer; a hung one answers nothing.
  if (cfg_.probe == endpoint_probe::off)
    note_hung();
  else if (!health_probe_on_wire_)
    send_health_probe();
}

void llm_endpoint_state::note_hung() {
  last_error_ = "hung: no first byte after " + seconds_text(cfg_.first_byte_timeout);
  last_error_ms_ = wall_ms();
  unreachable_ = true; // answering a `models` probe again shows it is over
  if (!failing_since_) {
    failing_since_ = now();
    failing_since_ms_ = last_error_ms_;
  }
  hung_ = true;
  health(); // says it is down now, with nobody asking
  ++consecutive_failures_;
  probe_in_flight_ = false;
  open_until_ = now() + cfg_.breaker_open_for;
  if (breaker_ != breaker_state::open)
    set_breaker(breaker_state::open);
  // Not retried here: another attempt would wait out the same silence. The caller's campaign
  // moves the session to an endpoint that is not down.
  std::vector<uint64_t> silent;
  for (const auto& [ticket, held] : held_)
    if (held.in_flight && held.silent)
      silent.push_back(ticket);
  for (auto ticket : silent) {
    auto& held = held_.at(ticket);
    http_->cancel(ticket);
    held.in_flight = false;
    --in_flight_;
    tokens_bucket_->adjust(held.reserved_tokens); // nothing was generated
    chat_result result;
    result.outcome = chat_outcome::endpoint_fault;
    result.error = "endpoint " + cfg_.name + " " + last_error_;
    finish(ticket, std::move(result));
  }
  in_flight_gauge_->Set(in_flight_);
  pump();
}

void llm_endpoint_state::schedule_health_probe() {
  if (cfg_.probe == endpoint_probe::off || health_probe_pending_)
    return;
  health_probe_pending_ = true;
  // No later than the moment it counts as down, so that it is said when it happens.
  auto delay = std::chrono::duration_cast<clock::duration>(health_probe_wait_);
  if (failing_since_) {
    auto until_down = *failing_since_ + cfg_.outage_after - now();
    if (until_down > clock::duration::zero())
      delay = std::min(delay, until_down + 1ms);
  }
  self_->delayed_send(self_, delay, atom::probe_v);
}

void llm_endpoint_state::on_health_probe_due() {
  health_probe_pending_ = false;
  // A request got through meanwhile, or a probe is on the wire (its answer schedules the next).
  if (!failing_since_ || health_probe_on_wire_)
    return;
  // Listing the models proves only that the server is reached again, which says nothing about
  // an endpoint that answered with errors: there only a chat probe can tell, else the next
  // request (through the breaker's half-open state).
  if (cfg_.probe != endpoint_probe::chat && !unreachable_)
    return probe_later();
  send_health_probe();
}

void llm_endpoint_state::send_health_probe() {
  http_post probe;
  probe.ticket = health_probe_ticket;
  probe.headers = auth_headers();
  probe.connect_timeout = cfg_.connect_timeout;
  probe.total_timeout = cfg_.connect_timeout; // a silent probe while requests wait: hung
  probe.first_byte_timeout = cfg_.first_byte_timeout;
  health_probe_chats_ = cfg_.probe == endpoint_probe::chat;
  if (!health_probe_chats_) {
    probe.url = cfg_.base_url + "/models";
    probe.get = true;
  } else {
    probe.url = cfg_.base_url + "/chat/completions";
    // The endpoint's own settings (extra_body too): a server that needs them refuses without.
    probe.body = chat_body(cfg_, {{"user", "ping"}}, 1);
  }
  health_probe_on_wire_ = true;
  http_->post(std::move(probe));
}

void llm_endpoint_state::on_health_probe_answer(const http_exchange& x) {
  health_probe_on_wire_ = false;
  auto waiting_silently = std::any_of(held_.begin(), held_.end(), [](const auto& item) {
    return item.second.in_flight && item.second.silent;
  });
  // Any HTTP answer shows the server alive: its silent requests are long, not lost.
  if (!x.transport_error.empty() && waiting_silently) {
    note_hung();
    return probe_later();
  }
  if (!failing_since_)
    return; // a request got through meanwhile, or the probe only asked after a silent request
  auto answered = x.transport_error.empty() && x.status >= 200 && x.status < 300;
  if (answered && health_probe_chats_)
    answered = classify_exchange(x, cfg_.context_window, 1, false).endpoint_ok;
  if (answered) {
    spdlog::info("llm {}: answers a health probe again", cfg_.name);
    note_answering();
    // The next request tests it, alone, as after the breaker's pause.
    if (breaker_ == breaker_state::open)
      set_breaker(breaker_state::half_open);
    pump();
    return;
  }
  last_error_ = redact_secret(api_key_, "health probe: " + (x.transport_error.empty()
                                                                ? "HTTP " + std::to_string(x.status)
                                                                : x.transport_error));
  last_error_ms_ = wall_ms();
  unreachable_ = !x.transport_error.empty();
  probe_later();
}

void llm_endpoint_state::probe_later() {
  health(); // says so the moment it is down, with nobody asking
  health_probe_wait_ = std::min(health_probe_wait_ * 2, cfg_.probe_interval_max);
  schedule_health_probe();
}

void llm_endpoint_state::set_breaker(breaker_state next) {
  spdlog::log(next == breaker_state::open ? spdlog::level::warn : spdlog::level::info,
              "llm {}: circuit breaker {} -> {}", cfg_.name, to_string(breaker_), to_string(next));
  breaker_ = next;
  breaker_gauge_->Set(breaker_gauge(next));
}

void llm_endpoint_state::fail_queued(const std::string& why) {
  auto queued = std::move(queue_);
  queue_.clear();
  for (auto ticket : queued) {
    chat_result result;
    result.outcome = chat_outcome::endpoint_fault;
    result.error = why;
    finish(ticket, std::move(result));
  }
}

void llm_endpoint_state::schedule_wakeup(clock::duration delay) {
  if (wakeup_pending_)
    return;
  wakeup_pending_ = true;
  self_->delayed_send(self_, std::max<clock::duration>(delay, 1ms), atom::wakeup_v);
}

void llm_endpoint_state::finish(uint64_t ticket, chat_result result) {
  auto found = held_.find(ticket);
  auto& held = found->second;
  result.request_id = held.request.request_id;
  result.attempts = held.attempts;
  result.latency = now() - held.accepted;
  auto outcome = to_string(result.outcome);
  ++finished_[outcome];
  metrics_->llm_requests(cfg_.name, outcome).Increment();
  latency_histogram_->Observe(std::chrono::duration<double>{result.latency}.count());
  prompt_tokens_->Increment(result.usage.prompt);
  completion_tokens_->Increment(result.usage.completion);
  reasoning_tokens_->Increment(result.usage.reasoning);
  total_ += result.usage;
  by_campaign_[held.request.campaign_id] += result.usage;
  by_session_[held.request.session_id] += result.usage;
  if (result.outcome == chat_outcome::ok)
    spdlog::debug("llm {}: request {} ({}) ok after {} attempts", cfg_.name, result.request_id,
                  held.request.op, result.attempts);
  else
    spdlog::info("llm {}: request {} ({}) {} after {} attempts: {}", cfg_.name, result.request_id,
                 held.request.op, outcome, result.attempts, result.error);
  held.promise.deliver(std::move(result));
  tickets_.erase({held.owner, held.request.request_id});
  held_.erase(found);
}

endpoint_health llm_endpoint_state::health() {
  endpoint_health h;
  h.name = cfg_.name;
  h.breaker = to_string(breaker_);
  h.last_error = last_error_;
  h.last_error_ms = last_error_ms_;
  h.failing_since_ms = failing_since_ms_;
  h.outage_after_ms = cfg_.outage_after.count();
  if (!failing_since_)
    return h;
  auto failing_for = now() - *failing_since_;
  h.state =
      hung_ || failing_for >= cfg_.outage_after ? endpoint_state::down : endpoint_state::failing;
  if (h.state == endpoint_state::down && !down_logged_) {
    down_logged_ = true;
    down_gauge_->Set(1);
    if (hung_)
      spdlog::warn("llm {}: down: {}", cfg_.name, last_error_);
    else
      spdlog::warn("llm {}: down: every attempt for {} s failed; last error: {}", cfg_.name,
                   std::chrono::duration_cast<std::chrono::seconds>(failing_for).count(),
                   last_error_);
  }
  return h;
}

endpoint_status llm_endpoint_state::status() {
  endpoint_status s;
  s.name = cfg_.name;
  s.model = cfg_.model;
  s.breaker = to_string(breaker_);
  s.concurrency = cfg_.concurrency;
  s.in_flight = in_flight_;
  s.queued = static_cast<uint32_t>(queue_.size());
  s.backing_off = static_cast<uint32_t>(std::count_if(
      held_.begin(), held_.end(), [](const auto& item) { return item.second.backing_off; }));
  s.retry_budget = retry_budget_;
  s.retries = retries_;
  s.requests = finished_;
  s.total = total_;
  s.by_campaign = by_campaign_;
  s.by_session = by_session_;
  s.health = health();
  return s;
}

llm_endpoint_actor::behavior_type
llm_endpoint(llm_endpoint_actor::stateful_pointer<llm_endpoint_state> self, endpoint_config config,
             std::shared_ptr<metrics> metrics_ptr) {
  self->state.init(std::move(config), std::move(metrics_ptr));
  return {
      [self](atom::complete, chat_request& request) -> caf::result<chat_result> {
        return self->state.accept(std::move(request));
      },
      [self](atom::cancel, uint64_t request_id) { self->state.cancel(request_id); },
      [self](atom::status) { return self->state.status(); },
      [self](atom::health) { return self->state.health(); },
      [self](atom::http_done, http_exchange& x) { self->state.on_exchange(std::move(x)); },
      [self](atom::retry, uint64_t ticket) { self->state.on_backoff_over(ticket); },
      [self](atom::wakeup) { self->state.on_wakeup(); },
      [self](atom::probe) { self->state.on_health_probe_due(); },
  };
}

} // namespace opforge
