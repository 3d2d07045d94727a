// Config input (internal to framework/io/; the public header is config.h): the YAML file and
// `--set a.b=v` overrides, each value checked against the schema as it is read.
#pragma once

#include <map>
#include <string>

#include "io/config.h"

namespace tessera::io::config_detail {

// Walks the one YAML document of `text` into `values` (canonical text by dotted key) and
// `origins` ("file:line"); `source` names the text in errors. Throws ConfigError.
void load_yaml(const Schema& schema, const std::string& source, const std::string& text,
               std::map<std::string, std::string>& values, std::map<std::string, std::string>& origins);
// Applies one "a.b=v" override to `values` and `origins`. Throws ConfigError.
void apply_override(const Schema& schema, const std::string& override_text, std::map<std::string, std::string>& values,
                    std::map<std::string, std::string>& origins);
// The whole file; throws ConfigError naming it (strerror, or past 16 MiB).
std::string read_file(const std::string& path);

}  // namespace tessera::io::config_detail
