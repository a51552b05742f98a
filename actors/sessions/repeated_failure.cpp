#include "actors/sessions/repeated_failure.hpp"

#include <algorithm>

namespace opforge {

namespace {

bool same_way(const session_attempt& a, const session_attempt& b) {
  return a.stage == b.stage && a.outcome == b.outcome && a.detail == b.detail;
}

} // namespace

uint32_t same_failure_streak(const session_record& record, uint32_t dialog) {
  const auto& history = record.history;
  auto last = std::find_if(history.rbegin(), history.rend(),
                           [dialog](const auto& a) { return a.dialog == dialog; });
  if (last == history.rend() || last->outcome == contract::attempt_outcome::pass)
    return 0;
  uint32_t streak = 0;
  for (auto it = last; it != history.rend() && it->dialog == dialog && same_way(*it, *last); ++it)
    ++streak;
  return streak;
}

bool dialog_repeats_failure(const session_record& record) {
  auto limit = record.budgets.same_failure_limit;
  return limit > 0 && same_failure_streak(record, record.dialog) >= limit;
}

std::string repeated_failure_reason(const session_record& record) {
  auto limit = record.budgets.same_failure_limit;
  if (limit == 0 || record.dialog == 0)
    return {};
  for (uint32_t d = 1; d <= record.dialog; ++d)
    if (same_failure_streak(record, d) < limit)
      return {};
  const auto& last = record.history.back();
  return "repeated failure: " + to_string(last.outcome) + " x " + std::to_string(limit) +
         " in each of " + std::to_string(record.dialog) + " dialogs (" +
         std::to_string(record.total_calls) + " calls in all; the last: " + to_string(last.stage) +
         (last.detail.empty() ? "" : ", " + last.detail) + ")";
}

} // namespace opforge
