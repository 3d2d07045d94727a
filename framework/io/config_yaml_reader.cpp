// Config input: the YAML file and `--set a.b=v` overrides, each value checked as it is read.
#include "io/config_yaml_reader.h"

#include <fmt/core.h>
#include <yaml-cpp/eventhandler.h>
#include <yaml-cpp/parser.h>
#include <yaml-cpp/yaml.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <optional>
#include <sstream>
#include <string_view>

#include "io/config_values.h"

namespace tessera::io::config_detail {
namespace {

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

}  // namespace

void load_yaml(const Schema& schema, const std::string& source, const std::string& text,
               std::map<std::string, std::string>& values, std::map<std::string, std::string>& origins) {
  Loader(schema, source, values, origins).load_text(text);
}

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

}  // namespace tessera::io::config_detail
