// Model weights in HDF5: /model/<dotted.parameter.name> as full float32 datasets, and root
// attributes format_version, step, config (the effective YAML) and created_by. Written to
// "<path>.tmp" in the same folder, flushed to disk, then renamed: a crash never leaves a
// partial file under the final name.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "autograd/var.h"

namespace tessera::io {

inline constexpr std::int64_t kCheckpointFormatVersion = 1;

struct WeightsFile {
  std::int64_t format_version = 0;
  std::int64_t step = 0;
  std::string config_yaml;
  std::map<std::string, Tensor> tensors;  // by dotted parameter name
};

void save_weights(const std::string& path, const std::vector<ag::Var>& params, const std::string& config_yaml,
                  std::int64_t step);
WeightsFile load_weights(const std::string& path);
// Copies the file's tensors into `params` by name; throws naming the file and the parameter
// when one is missing or has another shape.
void assign_weights(const WeightsFile& file, const std::string& path, std::vector<ag::Var>& params);

}  // namespace tessera::io
