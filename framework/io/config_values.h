// Config text, shared by the YAML reader, the Schema and Config (internal to framework/io/; the
// public header is config.h): key names, and values checked against their KeySpec and stored in
// one canonical form.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "io/config.h"

namespace tessera::io::config_detail {

// Text helpers
bool is_digit(char c);
bool is_alpha(char c);
// A value as an error quotes it: control bytes as \xNN, and at most max_bytes with its full size.
std::string excerpt(std::string_view s, std::size_t max_bytes = 60);
std::string_view trim(std::string_view s);
std::string join(const std::vector<std::string>& parts, std::string_view sep);
std::vector<std::string> split_key(const std::string& key);
std::string last_component(const std::string& key);
// Dot-separated, non-empty names of [A-Za-z0-9_-].
bool is_valid_key(const std::string& key);

// Numbers and values
std::optional<double> parse_real(std::string_view s);
// Integral values only, in any spelling of one; `beyond_int64` (when given) tells a whole number
// outside int64 from text that is no whole number at all.
std::optional<std::int64_t> parse_integer(std::string_view s, bool* beyond_int64 = nullptr);
// Shortest text that parses back to the same double, always recognisable as a real ("1.0").
std::string format_real(double v);
bool has_range(const KeySpec& spec);
std::string format_range(const KeySpec& spec);
const char* expected_text(ValueType type);
const char* type_name(ValueType type);
// Checks `text` against the spec and returns its canonical form; `at` prefixes the error.
std::string normalize(const KeySpec& spec, std::string_view text, const std::string& at);

// Key names in a schema's keys
// True when `name` is a proper prefix section of some key ("model" for "model.layers").
bool is_section(const std::vector<KeySpec>& keys, const std::string& name);
// The key (or, with include_sections, section) closest to `query`; empty if none is close.
std::string nearest_name(const std::vector<KeySpec>& keys, const std::string& query, bool include_sections);
// " (did you mean 'hint'?)", or empty for an empty hint.
std::string did_you_mean(const std::string& hint);

}  // namespace tessera::io::config_detail
