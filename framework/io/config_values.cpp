// Config text: key names, and values checked against their KeySpec and stored in one canonical
// form (YAML 1.2 core-schema spellings), shared by the YAML reader, the Schema and Config.
#include "io/config_values.h"

#include <fmt/core.h>

#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstdlib>
#include <limits>
#include <optional>
#include <string_view>
#include <utility>

#include "common/text.h"

namespace tessera::io::config_detail {

// ---------------------------------------------------------------------------------------------
// Text helpers

bool is_digit(char c) { return c >= '0' && c <= '9'; }
bool is_alpha(char c) { return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z'); }

// A value as an error quotes it: control bytes as \xNN, and at most max_bytes (cut at a character
// boundary) with its full size, so that a corpus or binary file given as a config does not pour
// itself into the terminal.
std::string excerpt(std::string_view s, std::size_t max_bytes) {
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

namespace {

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

}  // namespace

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
std::optional<std::int64_t> parse_integer(std::string_view s, bool* beyond_int64) {
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
  if (negative) digits.insert(digits.begin(), '-');  // not insert(0, "-"): GCC 12 warns falsely (-Wrestrict)
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

namespace {

// Integer bounds are stored as doubles in KeySpec; clamp so that 2^63 prints as INT64_MAX.
std::int64_t integer_bound(double bound) {
  if (bound >= 9223372036854775807.0) return std::numeric_limits<std::int64_t>::max();
  if (bound <= -9223372036854775808.0) return std::numeric_limits<std::int64_t>::min();
  return static_cast<std::int64_t>(bound);
}

}  // namespace

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
// Key names in a schema's keys (free functions so the header keeps only its public interface)

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

}  // namespace tessera::io::config_detail
