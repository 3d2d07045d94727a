// Reading whole checkpoints, and matching their tensors to a model's parameters.
#include "io/checkpoint.h"

#include <isa-l/crc.h>

#include <algorithm>

#include "io/checkpoint_reader.h"

namespace tessera::io {

using detail::H5Handle;
using detail::open_for_reading;
using detail::read_header;
using detail::Reader;

CheckpointHeader read_checkpoint_header(const std::string& path) {
  H5Handle file{open_for_reading(path), H5Fclose};
  const Reader r(path, file.id());
  CheckpointHeader h;
  std::optional<TrainingState> state;
  read_header(r, file.id(), h.step, h.config_yaml, state);
  h.full = state.has_value() && r.has(file.id(), "optimizer");
  return h;
}

std::int64_t checkpoint_step(const std::string& path) { return read_checkpoint_header(path).step; }

std::map<std::string, std::string> load_vocabularies(const std::string& path) {
  H5Handle file{open_for_reading(path), H5Fclose};
  const Reader r(path, file.id());
  Checkpoint c;
  read_header(r, file.id(), c.step, c.config_yaml, c.state);
  return r.byte_strings("/vocab");
}

Checkpoint load_checkpoint(const std::string& path, bool weights_only) {
  H5Handle file{open_for_reading(path), H5Fclose};
  const Reader r(path, file.id());
  Checkpoint c;
  read_header(r, file.id(), c.step, c.config_yaml, c.state);
  c.model = r.tensors("/model");
  if (!weights_only && r.has(file.id(), "optimizer")) {
    c.exp_avg = r.tensors("/optimizer/exp_avg");
    c.exp_avg_sq = r.tensors("/optimizer/exp_avg_sq");
  }
  c.vocabularies = r.byte_strings("/vocab");
  r.check(file.close(), "closing the file failed");
  return c;
}

std::uint32_t checksum(const void* data, std::size_t bytes) {
  // ISA-L's reflected CRC-32 is zlib's (same polynomial, init and final xor), with carry-less
  // multiplication: ~10x zlib's speed, so verifying a checkpoint costs little next to reading it.
  return crc32_gzip_refl(0, static_cast<const unsigned char*>(data), bytes);
}

TensorMap named_values(const std::vector<ag::Var>& params) {
  TensorMap out;
  for (const ag::Var& p : params) out.emplace(p.name(), p.value());
  return out;
}

std::vector<Tensor> match_parameters(const TensorMap& tensors, const std::vector<ag::Var>& params,
                                     const std::string& path, const std::string& group) {
  std::vector<Tensor> out;
  for (const ag::Var& p : params) {
    auto it = tensors.find(p.name());
    if (it == tensors.end())
      fail("checkpoint '{}' has no '{}/{}': it does not fit the configured model", path, group, p.name());
    if (it->second.shape() != p.shape())
      fail("checkpoint '{}': '{}/{}' has shape {}, the configured model needs {}", path, group, p.name(),
           shape_str(it->second.shape()), shape_str(p.shape()));
    out.push_back(it->second.to(p.value().dtype()));
  }
  if (tensors.size() != params.size()) {
    for (const auto& entry : tensors) {  // not a structured binding: lambdas capture those only from clang 16
      const std::string& name = entry.first;
      const bool known = std::any_of(params.begin(), params.end(), [&](const ag::Var& p) { return p.name() == name; });
      if (!known) fail("checkpoint '{}' has '{}/{}', which the configured model does not have", path, group, name);
    }
  }
  return out;
}

void assign_weights(const Checkpoint& ckpt, const std::string& path, std::vector<ag::Var>& params) {
  const std::vector<Tensor> values = match_parameters(ckpt.model, params, path, "/model");
  for (std::size_t i = 0; i < params.size(); ++i) {
    params[i].value().copy_from(values[i]);
    params[i].refresh_compute_copy();  // mixed precision's bfloat16 weights follow the loaded ones
  }
}

}  // namespace tessera::io
