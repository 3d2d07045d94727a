#include "plan/preflight.h"

#include <fmt/core.h>

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <functional>
#include <optional>
#include <vector>

#include "common/error.h"
#include "common/fault_injection.h"
#include "data/synthetic.h"
#include "data/task_data.h"
#include "data/vocab.h"
#include "tensor/allocator.h"

namespace tessera::plan {
namespace {

namespace fs = std::filesystem;
constexpr double kGiB = 1024.0 * 1024.0 * 1024.0;
constexpr double kNear = 0.9;  // a warning above this share of the budget

// A model that cannot be read counts as data.vocab_size here: loading the data names the problem.
std::int64_t vocabulary_size(const io::RunConfig& cfg, const std::string& path) {
  std::error_code ec;
  try {
    if (fs::exists(path, ec)) return data::Vocab::load(path).size();
  } catch (const Error&) {
  }
  return cfg.data.vocab_size;
}

// The first line of `path` as a number of bytes; nullopt when unreadable or no limit ("max", or
// v1's 2^63 rounded down to a page).
std::optional<double> limit_in_file(const fs::path& path) {
  std::ifstream in(path);
  std::string text;
  if (!(in >> text) || text == "max") return std::nullopt;
  char* end = nullptr;
  const double v = std::strtod(text.c_str(), &end);
  if (*end != '\0' || v <= 0 || v >= 0x1p62) return std::nullopt;
  return v;
}

// This process's cgroup memory limit (v2 memory.max, else v1 memory.limit_in_bytes): at the path
// /proc/self/cgroup names, or at the mount's root where a namespace shows the cgroup as the root.
std::optional<double> cgroup_limit() {
  std::ifstream in("/proc/self/cgroup");
  std::string line;
  while (std::getline(in, line)) {
    const std::size_t a = line.find(':'), b = line.find(':', a + 1);
    if (a == std::string::npos || b == std::string::npos) continue;
    const std::string controllers = line.substr(a + 1, b - a - 1), path = line.substr(b + 1);
    const auto first = [&](const fs::path& root, const char* file) {
      const std::optional<double> at_path = limit_in_file(root / fs::path(path).relative_path() / file);
      return at_path ? at_path : limit_in_file(root / file);
    };
    if (controllers.empty()) {
      if (const auto v = first("/sys/fs/cgroup", "memory.max")) return v;
    } else if (controllers == "memory" || controllers.find("memory,") == 0 ||
               controllers.find(",memory") != std::string::npos) {
      if (const auto v = first("/sys/fs/cgroup/memory", "memory.limit_in_bytes")) return v;
    }
  }
  return std::nullopt;
}

double mem_available() {
  std::ifstream in("/proc/meminfo");
  std::string key, unit;
  double kb = 0;
  while (in >> key >> kb >> unit)
    if (key == "MemAvailable:") return kb * 1024;
  return 0;
}

double gib(double bytes) { return bytes / kGiB; }

MemoryEstimate estimate_with(const io::RunConfig& cfg, const VocabularySizes& v) {
  return estimate_memory(model_shape(cfg, v.src, v.tgt), layout_of(cfg), cfg.train.batch_tokens);
}

double needed_bytes(const io::RunConfig& cfg, const MemoryEstimate& e) {
  return e.peak_bytes + outside_tensors_bytes(e, cfg.train.device == Device::cuda);
}

// The prediction with `change` applied to a copy of the config; nullopt where this build refuses
// the changed config (a feature not built yet, a tensor-parallel size the model does not split into).
std::optional<double> needed_with(const io::RunConfig& cfg, const VocabularySizes& v,
                                  const std::function<void(io::RunConfig&)>& change) {
  io::RunConfig changed = cfg;
  change(changed);
  try {
    io::check_key_combinations(changed);
    return needed_bytes(changed, estimate_with(changed, v));
  } catch (const Error&) {
    return std::nullopt;
  }
}

// The settings that fit `budget`, each with its prediction.
std::vector<std::string> settings_that_fit(const io::RunConfig& cfg, const VocabularySizes& v, double budget) {
  std::vector<std::string> fit;
  const auto fits = [&](const std::optional<double>& needed) { return needed && *needed <= kNear * budget; };
  const std::int64_t tokens = cfg.train.batch_tokens;
  for (std::int64_t split = 2; split <= 64 && tokens / split >= 1; ++split) {
    const std::int64_t batch = tokens / split, accumulate = cfg.train.accumulate * split;
    const auto needed = needed_with(cfg, v, [&](io::RunConfig& c) {
      c.train.batch_tokens = batch;
      c.train.accumulate = accumulate;
    });
    if (!fits(needed)) continue;
    fit.push_back(fmt::format("--set train.batch_tokens={} --set train.accumulate={} (~{:.1f} GiB)", batch, accumulate,
                              gib(*needed)));
    break;
  }
  if (cfg.train.recompute == io::Recompute::none)
    if (const auto n = needed_with(cfg, v, [](io::RunConfig& c) { c.train.recompute = io::Recompute::layer; }); fits(n))
      fit.push_back(fmt::format("--set train.recompute=layer (~{:.1f} GiB)", gib(*n)));
  if (cfg.parallel.zero == 0 && cfg.parallel.data > 1)
    if (const auto n = needed_with(cfg, v, [](io::RunConfig& c) { c.parallel.zero = 1; }); fits(n))
      fit.push_back(fmt::format("--set parallel.zero=1 (~{:.1f} GiB)", gib(*n)));
  // More GPUs each hold a share; on one host, more ranks share its memory.
  for (std::int64_t tp = cfg.parallel.tensor * 2; cfg.train.device == Device::cuda && tp <= cfg.model.heads; tp *= 2) {
    const auto n = needed_with(cfg, v, [&](io::RunConfig& c) { c.parallel.tensor = tp; });
    if (!fits(n)) continue;
    fit.push_back(
        fmt::format("--set parallel.tensor={} on {} GPUs (~{:.1f} GiB)", tp, tp * cfg.parallel.data, gib(*n)));
    break;
  }
  return fit;
}

}  // namespace

double outside_tensors_bytes(const MemoryEstimate& e, bool gpu) {
  constexpr double kMiB = 1024.0 * 1024.0;
  return gpu ? 768 * kMiB : 256 * kMiB + std::min(512 * kMiB, e.peak_bytes / 2);
}

VocabularySizes planned_vocabulary_sizes(const io::RunConfig& cfg) {
  if (cfg.data.synthetic()) {
    const std::int64_t v = cfg.data.synthetic_vocab + data::kFirstSymbol;
    return {v, v};
  }
  const data::VocabPaths paths = data::vocab_paths(cfg);
  const std::int64_t src = vocabulary_size(cfg, paths.src);
  return {src, paths.joint() ? src : vocabulary_size(cfg, paths.tgt)};
}

MemoryEstimate estimate_for(const io::RunConfig& cfg) { return estimate_with(cfg, planned_vocabulary_sizes(cfg)); }

MemoryBudget rank_memory_budget(bool gpu, int local_ranks) {
  MemoryBudget b;
  if (const char* given = fault::setting("MEMORY_AVAILABLE_MB")) {
    b.bytes = std::strtod(given, nullptr) * 1024 * 1024;
    b.source = fmt::format("TESSERA_FAULT_MEMORY_AVAILABLE_MB={}", given);
  } else if (gpu) {
    b.bytes = static_cast<double>(device_free_memory());
    return {b.bytes, fmt::format("GPU: {:.1f} GiB free", gib(b.bytes))};
  } else {
    b.bytes = mem_available();
    b.source = fmt::format("host: MemAvailable {:.1f} GiB", gib(b.bytes));
    if (const auto limit = cgroup_limit(); limit && *limit < b.bytes) {
      b.bytes = *limit;
      b.source += fmt::format(", cgroup limit {:.1f} GiB", gib(*limit));
    }
  }
  if (!gpu && local_ranks > 1) {
    b.bytes /= local_ranks;
    b.source += fmt::format(", shared by {} ranks on this machine", local_ranks);
  }
  return b;
}

MemoryCheck check_memory(const io::RunConfig& cfg, const MemoryBudget& budget) {
  const VocabularySizes v = planned_vocabulary_sizes(cfg);
  const MemoryEstimate e = estimate_with(cfg, v);
  MemoryCheck c;
  c.needed_bytes = needed_bytes(cfg, e);
  if (budget.bytes <= 0 || c.needed_bytes <= kNear * budget.bytes) return c;  // no budget: a prediction only
  c.verdict = c.needed_bytes > budget.bytes ? Verdict::over : Verdict::near;
  const std::string needs = fmt::format(
      "needs ~{:.1f} GiB per rank at batch_tokens {} (parameters {:.1f}, optimizer state {:.1f}, activations {:.1f}, "
      "logits {:.1f}, other {:.1f} GiB); {:.1f} GiB available ({})",
      gib(c.needed_bytes), cfg.train.batch_tokens, gib(e.parameter_bytes), gib(e.optimizer_bytes),
      gib(e.activation_bytes), gib(e.logits_bytes),
      gib(c.needed_bytes - e.parameter_bytes - e.optimizer_bytes - e.activation_bytes - e.logits_bytes),
      gib(budget.bytes), budget.source);
  if (c.verdict == Verdict::near) {
    c.message = fmt::format("memory is tight: {}, {:.0f}% of it", needs, 100 * c.needed_bytes / budget.bytes);
    return c;
  }
  const std::vector<std::string> fit = settings_that_fit(cfg, v, budget.bytes);
  std::string tries;
  for (std::size_t i = 0; i < fit.size(); ++i) tries += (i == 0 ? "" : ", or ") + fit[i];
  c.message =
      fmt::format("{}: {} (or --set train.memory_check=false to start anyway)", needs,
                  fit.empty() ? std::string("no setting of this build fits: use a smaller model") : "try " + tries);
  return c;
}

}  // namespace tessera::plan
