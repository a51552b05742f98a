#pragma once

// The budget rule that stops waste (campaigns.same_failure_limit): a dialog whose answers fail
// the same way `limit` times in a row starts the next dialog early, and a session whose dialogs
// all ended that way ends with a "repeated failure" reason instead of "budget spent". "The same
// way" is the same stage, outcome and detail of the recorded attempt (session_attempt: the
// detail is already the failure's first line, with its dtype or lint rules). Both are read from
// the record's history alone, so a session restored from the store after a crash counts on
// exactly where it stood: there is no counter to lose or to disagree with its history.

#include "persistence/records.hpp"

#include <cstdint>
#include <string>

namespace opforge {

/// How many of `dialog`'s latest attempts in `record.history` failed the same way as its last
/// one; 0 when its last attempt passed or it has none.
uint32_t same_failure_streak(const session_record& record, uint32_t dialog);

/// Whether the current dialog's answers have now failed the same way the limit's times in a row
/// (never with the limit 0, which turns the rule off).
bool dialog_repeats_failure(const session_record& record);

/// The end reason of a session whose every dialog ended by repeating a failure, "repeated
/// failure: format_error x 4 ..."; "" when the rule is off or some dialog did not.
std::string repeated_failure_reason(const session_record& record);

} // namespace opforge
