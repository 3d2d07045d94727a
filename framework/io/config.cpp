#include "io/config.h"

#include <fmt/core.h>
#include <fmt/ranges.h>
#include <yaml-cpp/eventhandler.h>
#include <yaml-cpp/parser.h>
#include <yaml-cpp/yaml.h>

#include <algorithm>
#include <cerrno>
#include <charconv>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <optional>
#include <sstream>
#include <string_view>
#include <utility>

#include "common/text.h"

namespace tessera::io {
namespace {

// ---------------------------------------------------------------------------------------------
// Text helpers

bool is_digit(char c) { return c >= '0' && c <= '9'; }
bool is_alpha(char c) { return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z'); }

// A value as an error quotes it: control bytes as \xNN, and at most max_bytes (cut at a character
// boundary) with its full size, so that a corpus or binary file given as a config does not pour
// itself into the terminal.
std::string excerpt(std::string_view s, std::size_t max_bytes = 60) {
  std::size_t end = std::min(s.size(), max_bytes);
  while (end < s.size() && end > 0 && (static_cast<unsigned char>(s[end]) & 0xC0) == 0x80) --end;  // UTF-8 continuation
  std::string out;
  for (const char c : s.substr(0, end)) {
    const auto u = static_cast<unsigned char>(c);
    out += u < 0x20 || u == 0x7F ? fmt::format("\\x{:02X}", u) : std::string(1, c);
  }
  if (end < s.size()) out += fmt::format("... ({} bytes)", s.size());
  return out;
}

std::string_view trim(std::string_view s) {
  const auto space = [](char c) { return c == ' ' || c == '\t' || c == '\r' || c == '\n'; };
  while (!s.empty() && space(s.front())) s.remove_prefix(1);
  while (!s.empty() && space(s.back())) s.remove_suffix(1);
  return s;
}

std::string join(const std::vector<std::string>& parts, std::string_view sep) {
  std::string out;
  for (std::size_t i = 0; i < parts.size(); ++i) {
    if (i > 0) out += sep;
    out += parts[i];
  }
  return out;
}

std::vector<std::string> split_key(const std::string& key) {
  std::vector<std::string> parts;
  std::size_t start = 0;
  for (;;) {
    const std::size_t dot = key.find('.', start);
    parts.push_back(key.substr(start, dot - start));
    if (dot == std::string::npos) return parts;
    start = dot + 1;
  }
}

std::string last_component(const std::string& key) {
  const std::size_t dot = key.rfind('.');
  return dot == std::string::npos ? key : key.substr(dot + 1);
}

// Dot-separated, non-empty names of [A-Za-z0-9_-]: safe as plain YAML keys and in "a.b=v".
bool is_valid_key(const std::string& key) {
  for (const std::string& part : split_key(key)) {
    if (part.empty()) return false;
    for (char c : part) {
      if (!is_alpha(c) && !is_digit(c) && c != '_' && c != '-') return false;
    }
  }
  return true;
}

// ---------------------------------------------------------------------------------------------
// Numbers: YAML 1.2 core-schema spellings, stored in one canonical form.

// [-+]? (\.[0-9]+ | [0-9]+ (\.[0-9]*)?) ([eE] [-+]? [0-9]+)?
bool is_decimal_number(std::string_view s) {
  std::size_t i = 0;
  const auto digits = [&] {
    const std::size_t start = i;
    while (i < s.size() && is_digit(s[i])) ++i;
    return i - start;
  };
  if (i < s.size() && (s[i] == '+' || s[i] == '-')) ++i;
  std::size_t mantissa_digits = digits();
  if (i < s.size() && s[i] == '.') {
    ++i;
    mantissa_digits += digits();
  }
  if (mantissa_digits == 0) return false;
  if (i < s.size() && (s[i] == 'e' || s[i] == 'E')) {
    ++i;
    if (i < s.size() && (s[i] == '+' || s[i] == '-')) ++i;
    if (digits() == 0) return false;
  }
  return i == s.size();
}

// A number past a double's range is infinity or zero, as strtod rounds it: the range check names
// the one, normalize refuses the other.
std::optional<double> parse_real(std::string_view s) {
  for (std::string_view inf : {".inf", ".Inf", ".INF"}) {
    if (s == inf || (s.size() == inf.size() + 1 && s.substr(1) == inf && s[0] == '+')) {
      return std::numeric_limits<double>::infinity();
    }
    if (s.size() == inf.size() + 1 && s.substr(1) == inf && s[0] == '-') {
      return -std::numeric_limits<double>::infinity();
    }
  }
  if (s == ".nan" || s == ".NaN" || s == ".NAN") return std::numeric_limits<double>::quiet_NaN();
  if (!is_decimal_number(s)) return std::nullopt;
  if (s.front() == '+') s.remove_prefix(1);  // from_chars does not take a '+'
  double value = 0;
  const auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), value);
  if (end != s.data() + s.size()) return std::nullopt;
  if (ec == std::errc::result_out_of_range) return std::strtod(std::string(s).c_str(), nullptr);
  if (ec != std::errc()) return std::nullopt;
  return value;
}

// Integral values only, but in any spelling of one ("6", "+6", "6.0", "1e3"), read exactly from
// the digits (never through a double, which would round "2.0000000000000001" to 2 and
// "9007199254740993.0" to ...992); `beyond_int64` (when given) tells a whole number outside int64
// ("1e400" too) from text that is no whole number at all.
std::optional<std::int64_t> parse_integer(std::string_view s, bool* beyond_int64 = nullptr) {
  if (beyond_int64 != nullptr) *beyond_int64 = false;
  if (!is_decimal_number(s)) return std::nullopt;
  const bool negative = s.front() == '-';
  if (s.front() == '+' || s.front() == '-') s.remove_prefix(1);
  // value = digits x 10^(exponent - fraction digits)
  const std::size_t e = s.find_first_of("eE");
  std::int64_t exponent = 0;
  if (e != std::string_view::npos) {
    std::string_view text = s.substr(e + 1);
    if (text.front() == '+') text.remove_prefix(1);
    if (std::from_chars(text.data(), text.data() + text.size(), exponent).ec != std::errc())
      exponent =
          text.front() == '-' ? std::numeric_limits<std::int32_t>::min() : std::numeric_limits<std::int32_t>::max();
    exponent = std::clamp<std::int64_t>(exponent, std::numeric_limits<std::int32_t>::min(),
                                        std::numeric_limits<std::int32_t>::max());  // no overflow below
  }
  std::string digits;
  std::int64_t shift = exponent;
  bool past_point = false;
  for (const char c : s.substr(0, e)) {
    if (c == '.') {
      past_point = true;
    } else {
      digits += c;
      shift -= past_point ? 1 : 0;
    }
  }
  digits.erase(0, std::min(digits.find_first_not_of('0'), digits.size()));
  if (digits.empty()) return 0;  // any zero, whatever its exponent
  if (shift < 0) {               // the last -shift digits are past the point: zeros, or no whole number
    if (-shift >= static_cast<std::int64_t>(digits.size()) ||
        digits.find_first_not_of('0', digits.size() - static_cast<std::size_t>(-shift)) != std::string::npos)
      return std::nullopt;
    digits.resize(digits.size() - static_cast<std::size_t>(-shift));
  } else if (static_cast<std::int64_t>(digits.size()) + shift > 19) {  // 20 digits and more: past int64
    if (beyond_int64 != nullptr) *beyond_int64 = true;
    return std::nullopt;
  } else {
    digits.append(static_cast<std::size_t>(shift), '0');
  }
  if (negative) digits.insert(0, "-");
  std::int64_t value = 0;
  if (std::from_chars(digits.data(), digits.data() + digits.size(), value).ec != std::errc()) {
    if (beyond_int64 != nullptr) *beyond_int64 = true;
    return std::nullopt;
  }
  return value;
}

// Shortest text that parses back to the same double, always recognisable as a real ("1.0").
std::string format_real(double v) {
  if (std::isnan(v)) return ".nan";
  if (std::isinf(v)) return v > 0 ? ".inf" : "-.inf";
  std::string s = fmt::format("{}", v);
  if (s.find_first_of(".e") == std::string::npos) s += ".0";
  return s;
}

// Integer bounds are stored as doubles in KeySpec; clamp so that 2^63 prints as INT64_MAX.
std::int64_t integer_bound(double bound) {
  if (bound >= 9223372036854775807.0) return std::numeric_limits<std::int64_t>::max();
  if (bound <= -9223372036854775808.0) return std::numeric_limits<std::int64_t>::min();
  return static_cast<std::int64_t>(bound);
}

bool has_range(const KeySpec& spec) {
  return (spec.type == ValueType::integer || spec.type == ValueType::real) && spec.min <= spec.max;
}

std::string format_range(const KeySpec& spec) {
  if (spec.type == ValueType::integer) {
    if (!has_range(spec)) return fmt::format("[{}, {}]", INT64_MIN, INT64_MAX);  // any int64: past it
    return fmt::format("[{}, {}]", integer_bound(spec.min), integer_bound(spec.max));
  }
  return fmt::format("[{}, {}]", format_real(spec.min), format_real(spec.max));
}

const char* expected_text(ValueType type) {
  switch (type) {
    case ValueType::integer:
      return "an integer";
    case ValueType::real:
      return "a number";
    case ValueType::boolean:
      return "true or false";
    case ValueType::string:
      return "a string";
  }
  return "a value";
}

const char* type_name(ValueType type) {
  switch (type) {
    case ValueType::integer:
      return "an integer";
    case ValueType::real:
      return "a real number";
    case ValueType::boolean:
      return "a boolean";
    case ValueType::string:
      return "a string";
  }
  return "a value";
}

// Checks `text` against the spec and returns its canonical form. `at` prefixes the error
// ("configs/x.yaml:3: ", "--set a=b: ").
std::string normalize(const KeySpec& spec, std::string_view text, const std::string& at) {
  const auto wrong_type = [&] {
    return ConfigError(
        fmt::format("{}'{}' expects {}, got '{}'", at, spec.key, expected_text(spec.type), excerpt(text)));
  };
  const auto out_of_range = [&] {
    return ConfigError(
        fmt::format("{}'{}' = {} is outside the allowed range {}", at, spec.key, excerpt(text), format_range(spec)));
  };
  switch (spec.type) {
    case ValueType::integer: {
      bool beyond_int64 = false;
      const std::optional<std::int64_t> v = parse_integer(text, &beyond_int64);
      if (!v) throw beyond_int64 ? out_of_range() : wrong_type();  // as a real past a double's range
      // long double holds every int64 exactly (x86 80-bit), so the comparison is exact.
      const auto x = static_cast<long double>(*v);
      if (has_range(spec) && (x < static_cast<long double>(spec.min) || x > static_cast<long double>(spec.max))) {
        throw out_of_range();
      }
      return fmt::format("{}", *v);
    }
    case ValueType::real: {
      const std::optional<double> v = parse_real(text);
      if (!v) throw wrong_type();
      // Rounded to 0 past a double's range ("1e-400"): 0 means "off" for some keys, not "tiny".
      if (*v == 0 && text.substr(0, text.find_first_of("eE")).find_first_of("123456789") != std::string_view::npos)
        throw ConfigError(
            fmt::format("{}'{}' = {} is too small for a double: it would be 0", at, spec.key, excerpt(text)));
      if (has_range(spec) && !(*v >= spec.min && *v <= spec.max)) throw out_of_range();  // NaN is outside too
      return format_real(*v);
    }
    case ValueType::boolean:
      if (text != "true" && text != "false") throw wrong_type();
      return std::string(text);
    case ValueType::string:
      // A path is cut at a NUL byte by every file call: another file than the one written.
      if (text.find('\0') != std::string_view::npos)
        throw ConfigError(fmt::format("{}'{}' contains a NUL byte", at, spec.key));
      if (!spec.choices.empty() && std::find(spec.choices.begin(), spec.choices.end(), text) == spec.choices.end()) {
        throw ConfigError(
            fmt::format("{}'{}' = '{}' is not one of: {}", at, spec.key, excerpt(text), join(spec.choices, ", ")));
      }
      return std::string(text);
  }
  return std::string(text);
}

// ---------------------------------------------------------------------------------------------
// Schema helpers (free functions so the header keeps only its public interface)

// True when `name` is a proper prefix section of some key ("model" for "model.layers").
bool is_section(const std::vector<KeySpec>& keys, const std::string& name) {
  if (name.empty()) return false;
  const std::string prefix = name + ".";
  return std::any_of(keys.begin(), keys.end(), [&](const KeySpec& k) { return k.key.starts_with(prefix); });
}

// Scores every candidate by edit distance over the full dotted key and over the last component
// alone (catches a key put in the wrong section); a full-key match wins a tie. Sections are
// candidates only when the unknown name holds a map (they cannot take a value).
std::string nearest_name(const std::vector<KeySpec>& keys, const std::string& query, bool include_sections) {
  std::vector<std::string> candidates;
  for (const KeySpec& k : keys) {
    if (include_sections) {
      for (std::size_t dot = k.key.find('.'); dot != std::string::npos; dot = k.key.find('.', dot + 1)) {
        std::string section = k.key.substr(0, dot);
        if (std::find(candidates.begin(), candidates.end(), section) == candidates.end()) {
          candidates.push_back(std::move(section));
        }
      }
    }
    candidates.push_back(k.key);
  }
  const std::string query_last = last_component(query);
  std::string best;
  std::size_t best_score = std::numeric_limits<std::size_t>::max();
  for (const std::string& candidate : candidates) {
    std::size_t score = std::numeric_limits<std::size_t>::max();
    const std::size_t full = edit_distance(query, candidate);
    if (is_close(full, query.size(), candidate.size())) score = full;
    const std::string candidate_last = last_component(candidate);
    const std::size_t last = edit_distance(query_last, candidate_last);
    if (is_close(last, query_last.size(), candidate_last.size())) score = std::min(score, last + 1);
    if (score < best_score) {
      best_score = score;
      best = candidate;
    }
  }
  return best;
}

std::string did_you_mean(const std::string& hint) {
  return hint.empty() ? std::string() : fmt::format(" (did you mean '{}'?)", hint);
}

void add_key(std::vector<KeySpec>& keys, KeySpec spec) {
  if (!is_valid_key(spec.key)) {
    throw ConfigError(fmt::format(
        "schema: invalid key '{}' (expected dot-separated names of letters, digits, '_' or '-')", spec.key));
  }
  for (const KeySpec& k : keys) {
    if (k.key == spec.key) throw ConfigError(fmt::format("schema: duplicate key '{}'", spec.key));
    // Nested YAML cannot hold both "a: 1" and "a: {b: 2}".
    if (k.key.starts_with(spec.key + ".") || spec.key.starts_with(k.key + ".")) {
      throw ConfigError(
          fmt::format("schema: key '{}' conflicts with '{}' (a key cannot also be a section)", spec.key, k.key));
    }
  }
  spec.default_value = normalize(spec, spec.default_value, "schema default: ");
  keys.push_back(std::move(spec));
}

// ---------------------------------------------------------------------------------------------
// YAML input

// YAML::LoadAll, with a bound on the documents: yaml-cpp 0.7 (Debian 12's) never returns on some
// malformed text, a ',' at the top level for one (jbeder/yaml-cpp#1040, fixed after 0.8): its
// parser yields one empty document after another, which LoadAll keeps until memory runs out. The
// documents are counted first by a parser that builds nothing (a config is a few kilobytes).
std::vector<YAML::Node> load_documents(const std::string& text) {
  constexpr int kMostDocuments = 16;  // a config is one; more are refused by the caller, by count
  struct Counter final : YAML::EventHandler {
    YAML::Mark start = YAML::Mark::null_mark();  // of the last document
    void OnDocumentStart(const YAML::Mark& mark) override { start = mark; }
    void OnDocumentEnd() override {}
    void OnNull(const YAML::Mark&, YAML::anchor_t) override {}
    void OnAlias(const YAML::Mark&, YAML::anchor_t) override {}
    void OnScalar(const YAML::Mark&, const std::string&, YAML::anchor_t, const std::string&) override {}
    void OnSequenceStart(const YAML::Mark&, const std::string&, YAML::anchor_t, YAML::EmitterStyle::value) override {}
    void OnSequenceEnd() override {}
    void OnMapStart(const YAML::Mark&, const std::string&, YAML::anchor_t, YAML::EmitterStyle::value) override {}
    void OnMapEnd() override {}
  } counter;
  std::istringstream in(text);
  YAML::Parser parser(in);
  for (int documents = 0; parser.HandleNextDocument(counter); ++documents)
    if (documents == kMostDocuments)
      throw YAML::ParserException(counter.start, fmt::format("more than {} documents, or text the YAML library reads "
                                                             "without end (a ',' at the top level, say)",
                                                             kMostDocuments));
  return YAML::LoadAll(text);
}

std::string describe(const YAML::Node& node) {
  switch (node.Type()) {
    case YAML::NodeType::Scalar:
      return fmt::format("'{}'", excerpt(node.Scalar()));
    case YAML::NodeType::Sequence:
      return "a list";
    case YAML::NodeType::Map:
      return "a map";
    case YAML::NodeType::Null:
    case YAML::NodeType::Undefined:
      break;
  }
  return "an empty value";
}

// The text of a value node; an empty value ("name:", "--set name=") is the empty string for
// string keys (clearing a path is common), an error for the others.
std::optional<std::string> scalar_text(const KeySpec& spec, const YAML::Node& value) {
  if (value.IsScalar()) return value.Scalar();
  if (value.IsNull() && spec.type == ValueType::string) return std::string();
  return std::nullopt;
}

// Walks one YAML document into `values`, validating as it goes.
class Loader {
 public:
  Loader(const Schema& schema, const std::string& source, std::map<std::string, std::string>& values,
         std::map<std::string, std::string>& origins)
      : schema_(schema), source_(source), values_(values), origins_(origins) {}

  void load_text(const std::string& text) {
    std::vector<YAML::Node> documents;
    try {
      documents = load_documents(text);
    } catch (const YAML::Exception& e) {
      throw ConfigError(fmt::format("{}YAML syntax error: {}", at(e.mark), excerpt(e.msg, 200)));
    }
    if (documents.empty()) return;  // empty or comments only: all defaults
    if (documents.size() > 1) {
      throw ConfigError(
          fmt::format("{}expected one YAML document, found {}", at(documents[1].Mark()), documents.size()));
    }
    const YAML::Node& root = documents[0];
    if (root.IsNull()) return;
    if (!root.IsMap()) {
      throw ConfigError(
          fmt::format("{}expected a map of keys at the top level, got {}", at(root.Mark()), describe(root)));
    }
    walk(root, "");
  }

 private:
  // "file:line: " (1-based); just "file: " when yaml-cpp has no position.
  std::string at(const YAML::Mark& mark) const {
    if (mark.line < 0) return fmt::format("{}: ", source_);
    return fmt::format("{}:{}: ", source_, mark.line + 1);
  }

  void walk(const YAML::Node& map, const std::string& prefix) {
    std::map<std::string, int> seen;  // keys of this map -> 0-based line (yaml-cpp keeps duplicates)
    for (const auto& entry : map) {
      const YAML::Node& key = entry.first;
      const YAML::Node& value = entry.second;
      // Errors point at the key: an empty value's mark is on the following line.
      const std::string where = at(key.Mark());
      if (!key.IsScalar()) throw ConfigError(fmt::format("{}expected a key name, got {}", where, describe(key)));
      if (key.Scalar().empty()) throw ConfigError(fmt::format("{}empty key name", where));
      if (key.Scalar() == "<<" && key.Tag() == "?") {  // unquoted: a merge key, which yaml-cpp does not merge
        throw ConfigError(fmt::format("{}YAML merge keys ('<<') are not supported: write the keys out", where));
      }
      const std::string full = prefix.empty() ? key.Scalar() : prefix + "." + key.Scalar();
      if (const auto [first, fresh] = seen.emplace(key.Scalar(), key.Mark().line); !fresh) {
        throw ConfigError(fmt::format("{}duplicate key '{}' (first set on line {})", where, full, first->second + 1));
      }

      const std::vector<KeySpec>& keys = schema_.keys();
      if (const KeySpec* spec = schema_.find(full)) {
        const std::optional<std::string> text = scalar_text(*spec, value);
        if (!text) {
          throw ConfigError(
              fmt::format("{}'{}' expects {}, got {}", where, full, expected_text(spec->type), describe(value)));
        }
        // "model.layers: 2" and "model: {layers: 3}" in one file set the same key twice.
        if (const auto [first, fresh] = leaf_lines_.emplace(full, key.Mark().line); !fresh) {
          throw ConfigError(fmt::format("{}duplicate key '{}' (first set on line {})", where, full, first->second + 1));
        }
        values_[full] = normalize(*spec, *text, where);
        origins_[full] = where.substr(0, where.size() - 2);  // "file:line"
      } else if (is_section(keys, full)) {
        if (value.IsNull()) continue;  // "model:" with every key commented out
        if (!value.IsMap()) {
          throw ConfigError(
              fmt::format("{}'{}' is a section and expects a map of keys, got {}", where, full, describe(value)));
        }
        walk(value, full);
      } else if (value.IsMap() && value.size() > 0) {
        walk(value, full);  // unknown section: its first key's full path gives the best hint
      } else {
        const bool holds_map = value.IsMap() || value.IsNull();
        throw ConfigError(
            fmt::format("{}unknown key '{}'{}", where, full, did_you_mean(nearest_name(keys, full, holds_map))));
      }
    }
  }

  const Schema& schema_;
  const std::string& source_;
  std::map<std::string, std::string>& values_;
  std::map<std::string, std::string>& origins_;
  std::map<std::string, int> leaf_lines_;  // dotted key -> 0-based line where the file set it
};

// "a.b=v": v is parsed as one YAML scalar, except for string keys, whose value is v itself
// (trimmed; a quoted v is unquoted as YAML does): a path with " #" in it, or a value YAML reads as
// null ("~", "null"), is not silently changed.
void apply_override(const Schema& schema, const std::string& override_text, std::map<std::string, std::string>& values,
                    std::map<std::string, std::string>& origins) {
  const std::string where = fmt::format("--set {}: ", override_text);
  const std::size_t eq = override_text.find('=');
  const std::string key(trim(std::string_view(override_text).substr(0, eq)));
  if (eq == std::string::npos || key.empty()) throw ConfigError(where + "expected KEY=VALUE");

  const KeySpec* spec = schema.find(key);
  if (spec == nullptr) {
    if (is_section(schema.keys(), key)) {
      throw ConfigError(fmt::format("{}'{}' is a section, not a key", where, key));
    }
    throw ConfigError(fmt::format("{}unknown key '{}'{}", where, key, did_you_mean(schema.nearest(key))));
  }
  origins[key] = "--set " + override_text;  // a failure below throws: the config is not made
  const std::string raw(trim(std::string_view(override_text).substr(eq + 1)));
  const bool quoted = raw.size() >= 2 && (raw.front() == '"' || raw.front() == '\'') && raw.back() == raw.front();
  if (spec->type == ValueType::string && !quoted) {
    values[key] = normalize(*spec, raw, where);
    return;
  }
  // Read as the value of a key in a file would be: YAML::Load of the bare text would return its
  // first node and drop the rest ('"a" "b"', "3\n---\n5"), which a file refuses.
  YAML::Node value;
  try {
    const std::vector<YAML::Node> documents = load_documents("value: " + override_text.substr(eq + 1));
    if (documents.size() != 1 || !documents[0].IsMap() || documents[0].size() != 1)
      throw ConfigError(fmt::format("{}invalid YAML value: not one value (as a key in a file would take)", where));
    value = documents[0]["value"];
  } catch (const YAML::Exception& e) {
    throw ConfigError(fmt::format("{}invalid YAML value: {}", where, excerpt(e.msg, 200)));
  }
  const std::optional<std::string> text = scalar_text(*spec, value);
  if (!text) {
    throw ConfigError(fmt::format("{}'{}' expects {}, got {}", where, key, expected_text(spec->type), describe(value)));
  }
  values[key] = normalize(*spec, *text, where);
}

// Whole file; the message carries strerror (ENOENT, EACCES, EISDIR, ...).
std::string read_file(const std::string& path) {
  std::FILE* file = std::fopen(path.c_str(), "rb");
  if (file == nullptr) {
    throw ConfigError(fmt::format("cannot read config file '{}': {}", path, std::strerror(errno)));
  }
  // A config is a few KB: a device or a huge file given by mistake (/dev/zero) is refused before it
  // takes the memory.
  constexpr std::size_t kMaxBytes = std::size_t{16} << 20;
  std::string text;
  char buffer[8192];
  std::size_t n = 0;
  while ((n = std::fread(buffer, 1, sizeof buffer, file)) > 0) {
    text.append(buffer, n);
    if (text.size() > kMaxBytes) {
      std::fclose(file);
      throw ConfigError(fmt::format("config file '{}' is larger than 16 MiB: not a config", path));
    }
  }
  const bool failed = std::ferror(file) != 0;
  const int error = errno;
  std::fclose(file);
  if (failed) throw ConfigError(fmt::format("cannot read config file '{}': {}", path, std::strerror(error)));
  return text;
}

// ---------------------------------------------------------------------------------------------
// YAML output

// Plain when unambiguous; otherwise double-quoted with escapes (so "true", "", "3", "a: b"
// stay strings).
std::string yaml_string(const std::string& s) {
  static const char* const reserved[] = {"true", "false", "yes", "no", "on", "off", "y", "n", "null"};
  bool plain = !s.empty() && (is_alpha(s[0]) || s[0] == '_' || s[0] == '/');
  for (char c : s) {
    if (!plain) break;
    plain = is_alpha(c) || is_digit(c) || c == '_' || c == '-' || c == '.' || c == '/';
  }
  if (plain) {
    std::string lower = s;
    for (char& c : lower) c = static_cast<char>(c >= 'A' && c <= 'Z' ? c - 'A' + 'a' : c);
    for (const char* word : reserved) plain = plain && lower != word;
  }
  if (plain) return s;
  std::string out = "\"";
  for (char c : s) {
    switch (c) {
      case '"':
        out += "\\\"";
        break;
      case '\\':
        out += "\\\\";
        break;
      case '\n':
        out += "\\n";
        break;
      case '\t':
        out += "\\t";
        break;
      case '\r':
        out += "\\r";
        break;
      default:
        if (static_cast<unsigned char>(c) < 0x20 || c == 0x7f) {
          out += fmt::format("\\x{:02x}", static_cast<unsigned>(static_cast<unsigned char>(c)));
        } else {
          out += c;  // UTF-8 passes through
        }
    }
  }
  return out + "\"";
}

// Key components are [A-Za-z0-9_-]+ (see is_valid_key); only the null spellings would not
// read back as the same name.
std::string yaml_key(const std::string& name) {
  return name == "null" || name == "Null" || name == "NULL" ? "\"" + name + "\"" : name;
}

// " # doc [range]" for one key; empty when there is nothing to say.
std::string doc_comment(const KeySpec& spec) {
  std::string text = spec.doc;
  std::replace_if(
      text.begin(), text.end(), [](char c) { return c == '\n' || c == '\r'; }, ' ');
  std::string detail;
  if (has_range(spec)) detail = format_range(spec);
  if (spec.type == ValueType::string && !spec.choices.empty()) {
    detail = fmt::format("[one of: {}]", join(spec.choices, ", "));
  }
  if (!text.empty() && !detail.empty()) text += ' ';
  text += detail;
  return text.empty() ? std::string() : "  # " + text;
}

// Keys grouped by section, each level in order of first appearance in the schema.
struct TreeNode {
  std::string name;
  const KeySpec* spec = nullptr;  // leaves only
  std::vector<TreeNode> children;
};

TreeNode build_tree(const std::vector<KeySpec>& keys) {
  TreeNode root;
  for (const KeySpec& spec : keys) {
    TreeNode* node = &root;
    for (const std::string& part : split_key(spec.key)) {
      auto it = std::find_if(node->children.begin(), node->children.end(),
                             [&](const TreeNode& child) { return child.name == part; });
      if (it == node->children.end()) {
        node->children.push_back(TreeNode{part, nullptr, {}});
        it = node->children.end() - 1;
      }
      node = &*it;
    }
    node->spec = &spec;
  }
  return root;
}

void emit(const TreeNode& node, const std::map<std::string, std::string>& values, bool with_docs, int depth,
          std::string& out) {
  const std::string indent(static_cast<std::size_t>(depth) * 2, ' ');
  for (const TreeNode& child : node.children) {
    out += indent + yaml_key(child.name) + ":";
    if (child.spec == nullptr) {
      out += "\n";
      emit(child, values, with_docs, depth + 1, out);
      continue;
    }
    const std::string& value = values.at(child.spec->key);
    out += " " + (child.spec->type == ValueType::string ? yaml_string(value) : value);
    if (with_docs) out += doc_comment(*child.spec);
    out += "\n";
  }
}

}  // namespace

// -------------------------------------------------------------------------------------------------
// Schema

Schema& Schema::integer(const std::string& key, std::int64_t def, std::int64_t min, std::int64_t max,
                        const std::string& doc) {
  add_key(keys_, KeySpec{key,
                         ValueType::integer,
                         fmt::format("{}", def),
                         static_cast<double>(min),
                         static_cast<double>(max),
                         {},
                         doc});
  return *this;
}

Schema& Schema::real(const std::string& key, double def, double min, double max, const std::string& doc) {
  add_key(keys_, KeySpec{key, ValueType::real, format_real(def), min, max, {}, doc});
  return *this;
}

Schema& Schema::boolean(const std::string& key, bool def, const std::string& doc) {
  add_key(keys_, KeySpec{key, ValueType::boolean, def ? "true" : "false", 0, 0, {}, doc});
  return *this;
}

Schema& Schema::string(const std::string& key, const std::string& def, std::vector<std::string> choices,
                       const std::string& doc) {
  add_key(keys_, KeySpec{key, ValueType::string, def, 0, 0, std::move(choices), doc});
  return *this;
}

const KeySpec* Schema::find(const std::string& key) const {
  const auto it = std::find_if(keys_.begin(), keys_.end(), [&](const KeySpec& k) { return k.key == key; });
  return it == keys_.end() ? nullptr : &*it;
}

std::string Schema::nearest(const std::string& key) const { return nearest_name(keys_, key, false); }

// -------------------------------------------------------------------------------------------------
// Config

Config Config::load(const Schema& schema, const std::string& yaml_path, const std::vector<std::string>& overrides) {
  const std::string text = yaml_path.empty() ? std::string() : read_file(yaml_path);
  return parse(schema, text, yaml_path, overrides);
}

Config Config::parse(const Schema& schema, const std::string& yaml_text, const std::string& source_name,
                     const std::vector<std::string>& overrides) {
  Config config;
  config.schema_ = &schema;
  for (const KeySpec& spec : schema.keys()) config.values_[spec.key] = spec.default_value;
  Loader(schema, source_name, config.values_, config.origins_).load_text(yaml_text);
  for (const std::string& override_text : overrides)
    apply_override(schema, override_text, config.values_, config.origins_);
  return config;
}

std::string Config::origin(const std::string& key) const {
  const auto it = origins_.find(key);
  return it == origins_.end() ? std::string() : it->second;
}

std::string Config::where(std::initializer_list<std::string> keys) const {
  std::vector<std::string> set;
  for (const std::string& key : keys)
    if (std::string o = origin(key); !o.empty() && std::find(set.begin(), set.end(), o) == set.end())
      set.push_back(std::move(o));
  return set.empty() ? std::string("config") : fmt::format("{}", fmt::join(set, ", "));
}

namespace {

// The spec of `key` if it has the requested type; ConfigError naming the key otherwise.
const KeySpec& typed_spec(const Schema* schema, const std::string& key, ValueType type) {
  const KeySpec* spec = schema == nullptr ? nullptr : schema->find(key);
  if (spec == nullptr) {
    throw ConfigError(fmt::format("unknown config key '{}'{}", key,
                                  did_you_mean(schema == nullptr ? std::string() : schema->nearest(key))));
  }
  if (spec->type != type) {
    throw ConfigError(fmt::format("config key '{}' is {}, not {}", key, type_name(spec->type), type_name(type)));
  }
  return *spec;
}

}  // namespace

std::int64_t Config::integer(const std::string& key) const {
  typed_spec(schema_, key, ValueType::integer);
  return *parse_integer(values_.at(key));  // canonical text always parses
}

double Config::real(const std::string& key) const {
  typed_spec(schema_, key, ValueType::real);
  return *parse_real(values_.at(key));
}

bool Config::boolean(const std::string& key) const {
  typed_spec(schema_, key, ValueType::boolean);
  return values_.at(key) == "true";
}

const std::string& Config::string(const std::string& key) const {
  typed_spec(schema_, key, ValueType::string);
  return values_.at(key);
}

std::string Config::to_yaml(bool with_docs) const {
  if (schema_ == nullptr) return std::string();
  std::string out;
  emit(build_tree(schema_->keys()), values_, with_docs, 0, out);
  return out;
}

}  // namespace tessera::io
