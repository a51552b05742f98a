#include "actors/sessions/prompt_templates.hpp"

#include "messages/errors.hpp"

#include <algorithm>
#include <fstream>
#include <set>
#include <sstream>

namespace opforge {

namespace {

using node = prompt_templates::node;

const std::map<prompt_kind, placeholder_spec>& specs() {
  static const std::map<prompt_kind, placeholder_spec> table{
      {prompt_kind::initial, {{"op", "wrapper", "dtypes", "docstring", "examples"}, {"device"}}},
      {prompt_kind::debug_existing,
       {{"op", "wrapper", "dtypes", "docstring", "kernel"}, {"status", "examples", "device"}}},
      {prompt_kind::feedback_format, {{"problem", "wrapper"}, {}}},
      {prompt_kind::feedback_lint, {{"lint_report"}, {"wrapper"}}},
      {prompt_kind::feedback_compile_error, {{"compile_log"}, {"dtype", "sample", "message"}}},
      {prompt_kind::feedback_runtime_error, {{"message"}, {"dtype", "sample", "backtrace"}}},
      {prompt_kind::feedback_crash, {{"message"}, {"dtype", "sample", "backtrace", "cuda_error"}}},
      {prompt_kind::feedback_accuracy, {{"diff"}, {"dtype", "sample", "message"}}},
      {prompt_kind::feedback_timeout, {{"message"}, {"dtype", "sample"}}},
      {prompt_kind::feedback_cheat, {{"message"}, {"dtype", "sample"}}},
      {prompt_kind::feedback_layout, {{"message"}, {"dtype", "sample"}}},
      {prompt_kind::feedback_device_defect, {{"defect", "workaround"}, {"dtype", "sample"}}},
      {prompt_kind::optimize,
       {{"op", "wrapper", "dtypes", "kernel", "timings", "speedup", "target"},
        {"docstring", "timer_note", "last_version"}}},
  };
  return table;
}

bool is_name_char(char c) {
  return (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '_';
}

size_t line_of(std::string_view text, size_t pos) {
  return 1 + std::count(text.begin(), text.begin() + pos, '\n');
}

// Parses one template into nodes, checking tags and names against the kind's spec.
class template_parser {
public:
  template_parser(std::string_view text, const placeholder_spec& spec, std::string file)
      : text_{text}, spec_{spec}, file_{std::move(file)} {}

  caf::expected<std::vector<node>> parse() {
    std::vector<node> root;
    if (auto err = parse_into(root, ""))
      return err;
    for (const auto& name : spec_.required)
      if (!used_.count(name))
        return fail(0, "required placeholder {{" + name + "}} is missing");
    return root;
  }

private:
  caf::error fail(size_t pos, const std::string& what) const {
    std::string where = file_;
    if (pos > 0) {
      where += ':';
      where += std::to_string(line_of(text_, pos));
    }
    where += ": ";
    where += what;
    return caf::make_error(errc::config_invalid, std::move(where));
  }

  bool known(const std::string& name) const {
    auto has = [&](const std::vector<std::string>& names) {
      return std::find(names.begin(), names.end(), name) != names.end();
    };
    return has(spec_.required) || has(spec_.optional);
  }

  std::string known_list() const {
    std::string out;
    for (const auto* names : {&spec_.required, &spec_.optional})
      for (const auto& name : *names)
        out += (out.empty() ? "" : ", ") + name;
    return out;
  }

  // A section tag alone on its line takes the line's newline with it, so that sections do not
  // leave blank lines behind.
  void skip_standalone_newline(size_t tag_start) {
    bool at_line_start = tag_start == 0 || text_[tag_start - 1] == '\n';
    if (at_line_start && pos_ < text_.size() && text_[pos_] == '\n')
      ++pos_;
  }

  // Parses until the closing tag of `section` (or the end when `section` is empty).
  caf::error parse_into(std::vector<node>& out, const std::string& section) {
    std::string literal;
    auto flush = [&] {
      if (!literal.empty())
        out.push_back(node{node::type::text, std::move(literal), {}});
      literal.clear();
    };
    while (pos_ < text_.size()) {
      auto open = text_.find("{{", pos_);
      if (open == std::string_view::npos) {
        literal += text_.substr(pos_);
        pos_ = text_.size();
        break;
      }
      literal += text_.substr(pos_, open - pos_);
      auto close = text_.find("}}", open + 2);
      if (close == std::string_view::npos)
        return fail(open, "'{{' without a closing '}}'");
      auto tag = text_.substr(open + 2, close - open - 2);
      char sigil = tag.empty() ? '\0' : tag.front();
      if (sigil == '#' || sigil == '/')
        tag.remove_prefix(1);
      std::string name{tag};
      if (name.empty() || !std::all_of(name.begin(), name.end(), is_name_char))
        return fail(open, "malformed placeholder '{{" +
                              std::string{text_.substr(open + 2, close - open - 2)} +
                              "}}' (names are lower_case)");
      if (!known(name))
        return fail(open, "unknown placeholder {{" + name +
                              "}} (this template knows: " + known_list() + ")");
      pos_ = close + 2;
      if (sigil == '/') {
        if (name != section)
          return fail(open, section.empty()
                                ? "{{/" + name + "}} closes a section that was never opened"
                                : "{{/" + name + "}} closes section {{#" + section + "}}");
        skip_standalone_newline(open);
        flush();
        return {};
      }
      flush();
      if (sigil == '#') {
        skip_standalone_newline(open);
        node child{node::type::section, name, {}};
        if (auto err = parse_into(child.children, name))
          return err;
        out.push_back(std::move(child));
      } else {
        used_.insert(name);
        out.push_back(node{node::type::value, name, {}});
      }
    }
    flush();
    if (!section.empty())
      return fail(0, "section {{#" + section + "}} is never closed");
    return {};
  }

  std::string_view text_;
  const placeholder_spec& spec_;
  std::string file_;
  size_t pos_ = 0;
  std::set<std::string> used_;
};

void render_nodes(const std::vector<node>& nodes, const prompt_values& values, std::string& out) {
  auto value_of = [&](const std::string& name) -> std::string_view {
    auto i = values.find(name);
    return i == values.end() ? std::string_view{} : std::string_view{i->second};
  };
  for (const auto& n : nodes) {
    switch (n.kind) {
    case node::type::text:
      out += n.text;
      break;
    case node::type::value:
      out += value_of(n.text);
      break;
    case node::type::section:
      if (!value_of(n.text).empty())
        render_nodes(n.children, values, out);
      break;
    }
  }
}

} // namespace

const std::vector<prompt_kind>& all_prompt_kinds() {
  static const std::vector<prompt_kind> kinds = [] {
    std::vector<prompt_kind> out;
    for (const auto& [kind, spec] : specs())
      out.push_back(kind);
    return out;
  }();
  return kinds;
}

const placeholder_spec& placeholders_of(prompt_kind kind) {
  return specs().at(kind);
}

caf::expected<prompt_templates> prompt_templates::load(const std::filesystem::path& dir) {
  std::map<prompt_kind, std::string> texts;
  for (auto kind : all_prompt_kinds()) {
    auto path = dir / (std::string{to_string(kind)} + ".md");
    std::ifstream in{path, std::ios::binary};
    if (!in)
      return caf::make_error(errc::config_unreadable,
                             path.string() + ": cannot read the prompt template");
    std::ostringstream text;
    text << in.rdbuf();
    texts.emplace(kind, text.str());
  }
  return from_texts(texts, dir.string());
}

caf::expected<prompt_templates>
prompt_templates::from_texts(const std::map<prompt_kind, std::string>& texts,
                             const std::string& origin) {
  prompt_templates result;
  for (auto kind : all_prompt_kinds()) {
    auto file = origin + "/" + to_string(kind) + ".md";
    auto text = texts.find(kind);
    if (text == texts.end())
      return caf::make_error(errc::config_invalid, file + ": the prompt template is missing");
    auto nodes = template_parser{text->second, placeholders_of(kind), file}.parse();
    if (!nodes)
      return nodes.error();
    result.templates_.emplace(kind, std::make_shared<const std::vector<node>>(std::move(*nodes)));
  }
  return result;
}

caf::expected<std::string> load_worked_examples(const std::filesystem::path& dir) {
  std::error_code ec;
  std::vector<std::filesystem::path> files;
  for (std::filesystem::directory_iterator i{dir, ec}, end; !ec && i != end; i.increment(ec))
    if (i->path().extension() == ".py")
      files.push_back(i->path());
  if (ec)
    return caf::make_error(errc::config_unreadable,
                           dir.string() + ": cannot list the worked examples: " + ec.message());
  if (files.empty())
    return caf::make_error(errc::config_invalid, dir.string() + ": no worked examples (*.py)");
  std::sort(files.begin(), files.end());
  std::string out;
  for (const auto& file : files) {
    std::ifstream in{file, std::ios::binary};
    if (!in)
      return caf::make_error(errc::config_unreadable, file.string() + ": cannot read");
    std::ostringstream text;
    text << in.rdbuf();
    auto body = text.str();
    if (!body.empty() && body.back() != '\n')
      body += '\n';
    if (!out.empty())
      out += '\n';
    out += "### `";
    out += file.stem().string();
    out += "`\n```python\n";
    out += body;
    out += "```\n";
  }
  return out;
}

std::string prompt_templates::render(prompt_kind kind, const prompt_values& values) const {
  std::string out;
  render_nodes(*templates_.at(kind), values, out);
  return out;
}

} // namespace opforge
