#include "io/config.h"

#include <fmt/core.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <utility>

#include "io/config_values.h"
#include "io/config_yaml_reader.h"

namespace tessera::io {
using namespace config_detail;  // the helpers of config_values.h and config_yaml_reader.h
namespace {

// ---------------------------------------------------------------------------------------------
// Schema helpers (free functions so the header keeps only its public interface)

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
  load_yaml(schema, source_name, yaml_text, config.values_, config.origins_);
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
