#include "actors/llm/summarizer.hpp"

#include "messages/errors.hpp"

#include <algorithm>
#include <cctype>
#include <unordered_map>
#include <vector>

#include <spdlog/spdlog.h>

namespace opforge {

namespace {

bool is_hex(char c) {
  return std::isxdigit(static_cast<unsigned char>(c)) != 0;
}
bool is_digit(char c) {
  return std::isdigit(static_cast<unsigned char>(c)) != 0;
}

// Drops ANSI escape sequences (colours, cursor movement, OSC titles) and other control bytes.
std::string strip_ansi(std::string_view in) {
  std::string out;
  out.reserve(in.size());
  for (size_t i = 0; i < in.size(); ++i) {
    auto c = static_cast<unsigned char>(in[i]);
    if (c == 0x1b && i + 1 < in.size()) {
      auto kind = in[++i];
      if (kind == '[') { // CSI: parameters, then one final byte in 0x40..0x7e
        while (i + 1 < in.size() && !(in[i + 1] >= 0x40 && in[i + 1] <= 0x7e))
          ++i;
        ++i;
      } else if (kind == ']') { // OSC: up to BEL or ESC backslash
        while (i + 1 < in.size() && in[i + 1] != '\a' && in[i + 1] != 0x1b)
          ++i;
        ++i;
        if (i < in.size() && in[i] == 0x1b)
          ++i;
      }
      continue;
    }
    if (c < 0x20 && c != '\n' && c != '\r' && c != '\t')
      continue;
    out.push_back(static_cast<char>(c));
  }
  return out;
}

// Splits on newlines; a lone carriage return redraws the line (progress bars), so only what
// follows the last one counts. Trailing whitespace goes.
std::vector<std::string> split_lines(std::string_view text) {
  std::vector<std::string> lines;
  size_t start = 0;
  while (start <= text.size()) {
    auto end = text.find('\n', start);
    if (end == std::string_view::npos)
      end = text.size();
    auto line = text.substr(start, end - start);
    if (!line.empty() && line.back() == '\r')
      line.remove_suffix(1);
    if (auto redraw = line.rfind('\r'); redraw != std::string_view::npos)
      line.remove_prefix(redraw + 1);
    auto last = line.find_last_not_of(" \t");
    lines.emplace_back(last == std::string_view::npos ? std::string_view{}
                                                      : line.substr(0, last + 1));
    start = end + 1;
  }
  while (!lines.empty() && lines.back().empty())
    lines.pop_back();
  return lines;
}

// A line with numbers, addresses and column padding blanked out: lines of one shape say the same
// thing about different samples, offsets or pointers.
std::string shape_of(std::string_view line) {
  std::string out;
  out.reserve(line.size());
  for (size_t i = 0; i < line.size();) {
    if (line[i] == '0' && i + 2 < line.size() && (line[i + 1] == 'x' || line[i + 1] == 'X') &&
        is_hex(line[i + 2])) {
      out += "0x#";
      for (i += 2; i < line.size() && is_hex(line[i]); ++i) {
      }
    } else if (is_digit(line[i])) {
      out += '#';
      for (; i < line.size() && is_digit(line[i]); ++i) {
      }
    } else if (line[i] == ' ' && !out.empty() && out.back() == ' ') {
      ++i; // column padding ("sample   9", "sample  10") says nothing
    } else {
      out += line[i++];
    }
  }
  return out;
}

bool is_progress(std::string_view line) {
  return line.find("%|") != std::string_view::npos &&
         (line.find("it/s") != std::string_view::npos ||
          line.find("s/it") != std::string_view::npos);
}

bool starts_block(std::string_view line) {
  return line.rfind("Traceback (most recent call last)", 0) == 0 ||
         line.rfind("During handling of the above exception", 0) == 0 ||
         line.rfind("The above exception was the direct cause", 0) == 0;
}

bool looks_like_error(std::string_view line) {
  std::string lower{line};
  std::transform(lower.begin(), lower.end(), lower.begin(),
                 [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
  static constexpr std::string_view markers[] = {"error",     "traceback (most recent call last)",
                                                 "exception", "failed",
                                                 "fatal",     "assert",
                                                 "abort",     "segmentation fault"};
  return std::any_of(std::begin(markers), std::end(markers), [&](std::string_view marker) {
    return lower.find(marker) != std::string::npos;
  });
}

std::string shorten_line(std::string line, size_t limit) {
  if (line.size() <= limit)
    return line;
  auto head = limit * 2 / 3;
  auto tail = limit / 4;
  auto dropped = line.size() - head - tail;
  return line.substr(0, head) + " [... " + std::to_string(dropped) + " chars ...] " +
         line.substr(line.size() - tail);
}

// Blocks are paragraphs (blank-line separated) or Python tracebacks. A block whose shape was seen
// before becomes one line naming it: the same traceback printed once per sample says nothing new.
std::vector<std::string> dedupe_blocks(const std::vector<std::string>& lines) {
  std::vector<std::string> out;
  std::unordered_map<std::string, size_t> seen; // block shape -> its size
  size_t i = 0;
  while (i < lines.size()) {
    if (lines[i].empty()) {
      out.emplace_back();
      ++i;
      continue;
    }
    auto end = i + 1;
    while (end < lines.size() && !lines[end].empty() && !starts_block(lines[end]))
      ++end;
    std::string shape;
    for (auto k = i; k < end; ++k)
      shape += shape_of(lines[k]) + '\n';
    if (end - i >= 3 && !seen.emplace(shape, end - i).second)
      out.push_back("[repeat of the " + std::to_string(end - i) +
                    "-line block above that starts: " + shorten_line(lines[i], 80) + "]");
    else
      out.insert(out.end(), lines.begin() + i, lines.begin() + end);
    i = end;
  }
  return out;
}

// A run of lines that repeats with a period of up to four lines (a warning and its source line,
// say) keeps its first period and a count; runs of blank lines keep one.
std::vector<std::string> collapse_repeats(const std::vector<std::string>& lines) {
  constexpr size_t max_period = 4;
  std::vector<std::string> shapes;
  shapes.reserve(lines.size());
  for (const auto& line : lines)
    shapes.push_back(shape_of(line));
  auto n = lines.size();
  auto same_period = [&](size_t a, size_t b, size_t period) {
    return std::equal(shapes.begin() + a, shapes.begin() + a + period, shapes.begin() + b);
  };
  std::vector<std::string> out;
  size_t i = 0;
  while (i < n) {
    size_t period = 1;
    size_t reps = 1;
    for (size_t p = 1; p <= max_period; ++p) {
      size_t r = 1;
      while (i + (r + 1) * p <= n && same_period(i, i + r * p, p))
        ++r;
      if (r >= 2 && r * p > reps * period) {
        period = p;
        reps = r;
      }
    }
    out.insert(out.end(), lines.begin() + i, lines.begin() + i + period);
    bool identical = true;
    for (size_t k = period; k < reps * period; ++k)
      identical = identical && lines[i + k] == lines[i + k % period];
    auto more = std::to_string(reps - 1);
    if (reps > 1 && !(period == 1 && lines[i].empty())) {
      if (period == 1)
        out.push_back(identical ? "[previous line repeated " + more + " more times]"
                                : "[... " + more + " more lines like the previous]");
      else
        out.push_back("[the previous " + std::to_string(period) + " lines repeat " + more +
                      (identical ? " more times]" : " more times with other numbers]"));
    }
    i += reps * period;
  }
  return out;
}

size_t joined_size(const std::vector<std::string>& lines) {
  size_t total = 0;
  for (const auto& line : lines)
    total += line.size() + 1;
  return total;
}

std::string join(const std::vector<std::string>& lines) {
  std::string out;
  out.reserve(joined_size(lines));
  for (const auto& line : lines) {
    out += line;
    out += '\n';
  }
  return out;
}

// Keeps the first error with its context, the end of the block it starts (a traceback's final
// exception line), and the end of the log; everything else becomes "[... N lines omitted ...]".
std::vector<std::string> keep_first_error(const std::vector<std::string>& lines,
                                          size_t context_lines) {
  auto n = lines.size();
  auto first = std::find_if(lines.begin(), lines.end(), looks_like_error) - lines.begin();
  if (static_cast<size_t>(first) == n)
    first = 0;
  size_t block_end = first + 1;
  while (block_end < n && !lines[block_end].empty() && !starts_block(lines[block_end]))
    ++block_end;
  std::vector<bool> keep(n, false);
  auto mark = [&](size_t from, size_t to) {
    for (auto k = from; k < std::min(to, n); ++k)
      keep[k] = true;
  };
  mark(first > static_cast<ptrdiff_t>(context_lines) ? first - context_lines : 0,
       first + 2 * context_lines + 1);
  mark(block_end > 3 ? block_end - 3 : 0, block_end);
  mark(n > context_lines ? n - context_lines : 0, n);
  std::vector<std::string> out;
  for (size_t k = 0; k < n;) {
    if (keep[k]) {
      out.push_back(lines[k++]);
      continue;
    }
    auto skip_end = k;
    while (skip_end < n && !keep[skip_end])
      ++skip_end;
    out.push_back("[... " + std::to_string(skip_end - k) + " lines omitted ...]");
    k = skip_end;
  }
  return out;
}

// The last resort for a result still over budget: the head and the tail, cut on line boundaries.
std::string cut_middle(const std::string& text, size_t max_chars) {
  static constexpr std::string_view marker = "[... middle of the log omitted ...]\n";
  auto budget = max_chars > marker.size() ? max_chars - marker.size() : 0;
  auto head_end = text.rfind('\n', budget / 2);
  head_end = head_end == std::string::npos ? 0 : head_end + 1;
  auto tail_start = text.find('\n', text.size() - (budget - head_end));
  tail_start = tail_start == std::string::npos ? text.size() : tail_start + 1;
  return text.substr(0, head_end) + std::string{marker} + text.substr(tail_start);
}

} // namespace

std::string condense_log(std::string_view log, const condense_options& options) {
  auto lines = split_lines(strip_ansi(log));
  std::vector<std::string> kept;
  kept.reserve(lines.size());
  for (auto& line : lines)
    if (!is_progress(line))
      kept.push_back(shorten_line(std::move(line), options.max_line_chars));
  kept = collapse_repeats(dedupe_blocks(kept));
  if (joined_size(kept) > options.max_chars)
    kept = keep_first_error(kept, options.context_lines);
  auto text = join(kept);
  if (text.size() > options.max_chars)
    text = cut_middle(text, options.max_chars);
  return text;
}

std::string render_summary_prompt(std::string_view prompt_template, std::string_view op,
                                  std::string_view log) {
  std::string out;
  out.reserve(prompt_template.size() + log.size());
  for (size_t i = 0; i < prompt_template.size();) {
    if (prompt_template.compare(i, 12, "{{operator}}") == 0) {
      out += op;
      i += 12;
    } else if (prompt_template.compare(i, 7, "{{log}}") == 0) {
      out += log;
      i += 7;
    } else {
      out += prompt_template[i++];
    }
  }
  return out;
}

summarizer_actor::behavior_type
summarizer(summarizer_actor::stateful_pointer<summarizer_state> self, summarizer_config config,
           std::string prompt_template, llm_endpoint_actor endpoint,
           std::shared_ptr<metrics> metrics_ptr) {
  auto& st = self->state;
  st.cfg = std::move(config);
  st.prompt_template = std::move(prompt_template);
  st.endpoint = std::move(endpoint);
  st.metrics_ptr = std::move(metrics_ptr);
  return {
      [self](atom::summarize, summary_request& request) -> caf::result<summary_result> {
        auto& st = self->state;
        auto done = [self](summary_result result) {
          self->state.metrics_ptr->summaries(to_string(result.method)).Increment();
          return result;
        };
        summary_result result;
        result.original_chars = request.log.size();
        if (st.cfg.mode == summarizer_mode::off) {
          result.text = std::move(request.log);
          result.method = summary_method::raw;
          return done(std::move(result));
        }
        condense_options options;
        options.max_chars = st.cfg.max_chars;
        options.context_lines = st.cfg.context_lines;
        result.text = condense_log(request.log, options);
        result.method = summary_method::deterministic;
        if (st.cfg.mode != summarizer_mode::llm || !st.endpoint ||
            result.text.size() <= st.cfg.llm_threshold_chars)
          return done(std::move(result));
        chat_request chat;
        chat.request_id = st.next_request_id++;
        chat.session_id = request.session_id;
        chat.op = request.op;
        chat.max_tokens = st.cfg.max_tokens;
        chat.messages.push_back(
            {"user", render_summary_prompt(st.prompt_template, request.op, result.text)});
        auto promise = self->make_response_promise<summary_result>();
        auto fallback = [promise, done, result](std::string why, token_usage usage) mutable {
          spdlog::info("summarizer: falling back to the deterministic summary: {}", why);
          result.method = summary_method::deterministic_fallback;
          result.error = std::move(why);
          result.usage = usage;
          promise.deliver(done(std::move(result)));
        };
        self->request(st.endpoint, caf::infinite, atom::complete_v, std::move(chat))
            .then(
                [promise, done, fallback, result](chat_result& answer) mutable {
                  if (answer.outcome != chat_outcome::ok)
                    return fallback(std::string{to_string(answer.outcome)} + ": " + answer.error,
                                    answer.usage);
                  if (answer.content.empty())
                    return fallback("the endpoint answered with no text", answer.usage);
                  result.text = std::move(answer.content);
                  result.method = summary_method::llm;
                  result.usage = answer.usage;
                  promise.deliver(done(std::move(result)));
                },
                [fallback](const caf::error& err) mutable { fallback(render(err), {}); });
        return promise;
      },
  };
}

} // namespace opforge
