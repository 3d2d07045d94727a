// `tessera average`: the element-wise mean of checkpoints' weights.
#include <algorithm>

#include "io/checkpoint.h"

namespace tessera::io {

Checkpoint average_checkpoints(const std::vector<std::string>& paths, Progress* progress) {
  TESSERA_CHECK(!paths.empty(), "average: no checkpoints given");
  Checkpoint first = load_checkpoint(paths[0], /*weights_only=*/true);
  std::map<std::string, std::vector<double>> sums;
  for (const auto& [name, t] : first.model) sums[name] = t.to_doubles();
  std::int64_t step = first.step;
  std::string vocab_from = paths[0];  // the first file with vocabularies
  if (progress != nullptr) progress->set(1);
  for (std::size_t i = 1; i < paths.size(); ++i) {
    const Checkpoint c = load_checkpoint(paths[i], /*weights_only=*/true);
    for (const auto& [name, t] : c.model) {
      auto it = first.model.find(name);
      if (it == first.model.end())
        fail("average: '{}' has '/model/{}', which '{}' does not have", paths[i], name, paths[0]);
      if (it->second.shape() != t.shape())
        fail("average: '/model/{}' has shape {} in '{}' but {} in '{}'", name, shape_str(t.shape()), paths[i],
             shape_str(it->second.shape()), paths[0]);
      const std::vector<double> v = t.to_doubles();
      std::vector<double>& sum = sums[name];
      for (std::size_t j = 0; j < v.size(); ++j) sum[j] += v[j];
    }
    for (const auto& [name, t] : first.model)
      if (!c.model.contains(name)) fail("average: '{}' has no '/model/{}', which '{}' has", paths[i], name, paths[0]);
    // Files written before checkpoints held vocabularies have none; any two that do must agree.
    if (!c.vocabularies.empty() && !first.vocabularies.empty() && c.vocabularies != first.vocabularies)
      fail("average: '{}' was trained with other vocabularies (/vocab) than '{}'", paths[i], vocab_from);
    if (first.vocabularies.empty() && !c.vocabularies.empty()) {
      first.vocabularies = c.vocabularies;
      vocab_from = paths[i];
    }
    step = std::max(step, c.step);  // the newest input's, whatever the order they are given in
    if (progress != nullptr) progress->set(static_cast<std::int64_t>(i) + 1);
  }
  Checkpoint out;
  out.step = step;
  out.config_yaml = first.config_yaml;
  out.vocabularies = first.vocabularies;
  const double n = static_cast<double>(paths.size());
  for (auto& [name, sum] : sums) {
    Tensor t = Tensor::empty(first.model.at(name).shape(), DType::f32);
    float* d = t.data<float>();
    for (std::size_t j = 0; j < sum.size(); ++j) d[j] = static_cast<float>(sum[j] / n);
    out.model.emplace(name, std::move(t));
  }
  return out;
}

}  // namespace tessera::io
