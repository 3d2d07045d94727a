// Experiment configuration: one schema (type, default, allowed range, one-line doc per key),
// values from a YAML file and `--set a.b=v` overrides, validated in one pass before any work.
//
// Keys are dotted paths ("model.layers") that map to nested YAML maps:
//   model:
//     layers: 6
// Errors name the key, the file and the line (e.g. "configs/x.yaml:7: unknown key 'model.layer'
// (did you mean 'model.layers'?)"); --set errors name the override instead of a file.
#pragma once

#include <cstdint>
#include <initializer_list>
#include <map>
#include <string>
#include <vector>

#include "common/error.h"

namespace tessera::io {

class ConfigError : public EveryRankError {  // every rank reads the same config
 public:
  using EveryRankError::EveryRankError;
};

enum class ValueType { integer, real, boolean, string };

struct KeySpec {
  std::string key;  // dotted path
  ValueType type = ValueType::integer;
  std::string default_value;         // as it would be written in YAML ("6", "0.1", "true", "post")
  double min = 0, max = 0;           // inclusive range for integer / real (ignored when min > max)
  std::vector<std::string> choices;  // allowed values for strings (empty: any string)
  std::string doc;                   // one line
};

class Schema {
 public:
  // Adds a key; throws if the key is already present or its default is invalid.
  Schema& integer(const std::string& key, std::int64_t def, std::int64_t min, std::int64_t max, const std::string& doc);
  Schema& real(const std::string& key, double def, double min, double max, const std::string& doc);
  Schema& boolean(const std::string& key, bool def, const std::string& doc);
  // choices empty: any string is allowed.
  Schema& string(const std::string& key, const std::string& def, std::vector<std::string> choices,
                 const std::string& doc);

  const KeySpec* find(const std::string& key) const;
  // The valid key closest to `key` by edit distance (for "did you mean"); empty if none is close.
  std::string nearest(const std::string& key) const;
  const std::vector<KeySpec>& keys() const { return keys_; }

 private:
  std::vector<KeySpec> keys_;
};

class Config {
 public:
  // Defaults, then the YAML file (when yaml_path is not empty), then each "a.b=v" override in order.
  // Validates everything; throws ConfigError on the first problem.
  static Config load(const Schema& schema, const std::string& yaml_path, const std::vector<std::string>& overrides);
  // Same, from YAML text; `source_name` names it in errors.
  static Config parse(const Schema& schema, const std::string& yaml_text, const std::string& source_name,
                      const std::vector<std::string>& overrides = {});

  // Typed access; throws ConfigError for an unknown key or a type the schema does not give it.
  std::int64_t integer(const std::string& key) const;
  double real(const std::string& key) const;
  bool boolean(const std::string& key) const;
  const std::string& string(const std::string& key) const;

  // The effective config as YAML (nested maps, schema order). With docs, each key carries its
  // one-line description and range as a comment. Parsing it back gives the same config.
  std::string to_yaml(bool with_docs) const;
  // Every key's value as canonical text (what to_yaml writes), by dotted key.
  const std::map<std::string, std::string>& values() const { return values_; }

  // Where `key`'s value was set: "file:line", "--set key=value", or "" for its default.
  std::string origin(const std::string& key) const;
  // For an error about keys that are each valid alone but not together: where those of `keys` that
  // are not defaults were set ("configs/x.yaml:12, --set train.valid_every=0"), or "config" when all
  // are; the prefix of the message, as a single key's error is prefixed with its file and line.
  std::string where(std::initializer_list<std::string> keys) const;

 private:
  const Schema* schema_ = nullptr;
  std::map<std::string, std::string> values_;   // canonical text of each value, by key
  std::map<std::string, std::string> origins_;  // see origin(); keys left at their default are absent
};

}  // namespace tessera::io
