#include <fmt/core.h>

#include <string>
#include <vector>

#include "io/run_config.h"
#include "launch/commands.h"
#include "plan/memory_model.h"
#include "plan/preflight.h"

namespace tessera::launch {
namespace {

using plan::format_bytes;

struct PlanOptions {
  std::string config;
  std::vector<std::string> overrides;
  std::int64_t gpus = 0;  // 0: parallel.tensor x parallel.data
  double gpu_memory_gib = 80;
  plan::Hardware hw;
};

std::string layout_text(const plan::Layout& l) {
  return fmt::format("tensor {} x data {}, zero {}, recompute {}, vocab_parallel {}, {}", l.tensor, l.data,
                     l.zero ? 1 : 0, l.recompute ? "layer" : "none", l.vocab_parallel ? "on" : "off",
                     l.bf16 ? "bf16" : "fp32");
}

// The config's own layout: the per-rank breakdown and the step-time model.
void print_breakdown(const io::RunConfig& cfg, const PlanOptions& o) {
  const plan::VocabularySizes v = plan::planned_vocabulary_sizes(cfg);
  const plan::ModelShape m = plan::model_shape(cfg, v.src, v.tgt);
  const plan::Layout l = plan::layout_of(cfg);
  const plan::MemoryEstimate e = plan::estimate_memory(m, l, cfg.train.batch_tokens);
  fmt::print("plan: {}: {} layers, d_model {}, d_ff {}, {} heads, vocabularies {} / {}\n", o.config, m.layers,
             m.d_model, m.d_ff, m.heads, v.src, v.tgt);
  fmt::print("layout: {} on {}; batch_tokens {} ({} token slots per side on each rank)\n", layout_text(l),
             l.gpu ? "cuda" : "cpu", cfg.train.batch_tokens, e.tokens_per_rank);
  fmt::print("per rank:\n");
  fmt::print("  parameters        {:>10}  ({} parameters)\n", format_bytes(e.parameter_bytes), e.parameters);
  fmt::print("  gradients         {:>10}\n", format_bytes(e.gradient_bytes));
  fmt::print("  optimizer state   {:>10}  (Adam's two moments)\n", format_bytes(e.optimizer_bytes));
  fmt::print("  gradient buckets  {:>10}\n", format_bytes(e.bucket_bytes));
  fmt::print("  positional table  {:>10}\n", format_bytes(e.table_bytes));
  fmt::print("  activations       {:>10}  (recompute none: {}, layer: {})\n", format_bytes(e.activation_bytes),
             format_bytes(e.activation_bytes_no_recompute), format_bytes(e.activation_bytes_recompute));
  fmt::print("  logits            {:>10}  (logits and their gradient, {} x {}, the output layer's gradient)\n",
             format_bytes(e.logits_bytes), e.tokens_per_rank, v.tgt);
  const double overhead = plan::outside_tensors_bytes(e, l.gpu);
  fmt::print("  peak              {:>10}  ({:.0f} bytes) at backward's {}; with {} outside tensors: {}\n",
             format_bytes(e.peak_bytes), e.peak_bytes, e.peak_at_start ? "start" : "end", format_bytes(overhead),
             format_bytes(e.peak_bytes + overhead));
  const plan::StepEstimate s = plan::estimate_step(m, l, cfg.train.batch_tokens, o.hw);
  fmt::print(
      "step (one batch): {:.3f} TFLOP in {:.1f} ms at {} TFLOP/s; data-parallel {} in {:.1f} ms; tensor-parallel {} "
      "in {:.1f} ms; {:.1f} ms in all\n",
      s.flops / 1e12, 1e3 * s.compute_s, o.hw.tflops, format_bytes(s.data_bytes), 1e3 * s.data_s,
      format_bytes(s.tensor_bytes), 1e3 * s.tensor_s, 1e3 * s.step_s);
  fmt::print(
      "  (ring collectives: an all-reduce of n bytes over p ranks takes 2(p-1)(alpha + n/(p beta)), alpha {} us, "
      "beta {} GB/s; no overlap with compute)\n",
      o.hw.latency_us, o.hw.bandwidth_gbs);
}

// Which layouts of the paper's base and big fit `gpus` GPUs of `gib` GiB at the config's batch.
void print_layouts(const io::RunConfig& cfg, const PlanOptions& o, std::int64_t gpus) {
  const double memory = o.gpu_memory_gib * 1024 * 1024 * 1024;
  fmt::print(
      "\nlayouts of base and big (vocabulary 37000) on {} GPUs of {} GiB at batch_tokens {}, {} (peak per rank with "
      "{} for the CUDA context):\n",
      gpus, o.gpu_memory_gib, cfg.train.batch_tokens, cfg.train.precision == io::Precision::bf16 ? "bf16" : "fp32",
      format_bytes(plan::outside_tensors_bytes({}, true)));
  fmt::print("{:<6}{:>7}{:>6}{:>6}{:>11}{:>11}{:>20}  {:<12}{:>9}\n", "model", "tensor", "data", "zero", "vocab_par",
             "peak", "with recompute", "fits", "step ms");
  for (const char* name : {"base", "big"}) {
    const plan::ModelShape m = plan::paper_model(name);
    for (std::int64_t tp = 1; tp <= gpus && m.heads % tp == 0; tp *= 2) {
      if (gpus % tp != 0) continue;
      for (int zero = 0; zero <= (gpus / tp > 1 ? 1 : 0); ++zero) {
        for (int vp = 0; vp <= (tp > 1 ? 1 : 0); ++vp) {
          plan::Layout l{.tensor = tp,
                         .data = gpus / tp,
                         .zero = zero == 1,
                         .recompute = false,
                         .vocab_parallel = vp == 1,
                         .bf16 = cfg.train.precision == io::Precision::bf16,
                         .gpu = true};
          const plan::MemoryEstimate none = plan::estimate_memory(m, l, cfg.train.batch_tokens);
          l.recompute = true;
          const plan::MemoryEstimate layer = plan::estimate_memory(m, l, cfg.train.batch_tokens);
          const double extra = plan::outside_tensors_bytes(none, true);
          const bool fits_none = none.peak_bytes + extra <= memory, fits_layer = layer.peak_bytes + extra <= memory;
          l.recompute = !fits_none && fits_layer;
          const double step_ms = 1e3 * plan::estimate_step(m, l, cfg.train.batch_tokens, o.hw).step_s;
          fmt::print("{:<6}{:>7}{:>6}{:>6}{:>11}{:>11}{:>20}  {:<12}{:>9.1f}\n", name, tp, gpus / tp, zero,
                     vp == 1 ? "on" : "off", format_bytes(none.peak_bytes + extra),
                     format_bytes(layer.peak_bytes + extra),
                     fits_none    ? "yes"
                     : fits_layer ? "with layer"
                                  : "no",
                     step_ms);
        }
      }
    }
  }
}

}  // namespace

Command add_plan_command(CLI::App& parent) {
  auto o = std::make_shared<PlanOptions>();
  CLI::App* cmd = parent.add_subcommand(
      "plan", "Predict memory per rank and step time for a config's layout, and which layouts of base and big fit");
  cmd->add_option("--config,-c", o->config, "YAML experiment config")->required()->type_name("TEXT:FILE");
  cmd->add_option("--set", o->overrides, "Override one key, e.g. --set train.batch_tokens=6000 (repeatable)");
  add_whole_number_option(cmd, "--gpus", o->gpus, 1, 4096,
                          "GPUs for the table of layouts (default: parallel.tensor x parallel.data)");
  cmd->add_option("--gpu-memory", o->gpu_memory_gib, "memory of one GPU in GiB")
      ->check(finite_range(0.001, 1e6))
      ->capture_default_str();
  cmd->add_option("--tflops", o->hw.tflops, "sustained training TFLOP/s of one GPU (the step-time model)")
      ->check(finite_range(1e-6, 1e6))
      ->capture_default_str();
  cmd->add_option("--bandwidth-gbs", o->hw.bandwidth_gbs, "bandwidth of a collective's link in GB/s")
      ->check(finite_range(1e-6, 1e6))
      ->capture_default_str();
  cmd->add_option("--latency-us", o->hw.latency_us, "latency of one step of a ring collective in microseconds")
      ->check(finite_range(0, 1e6))
      ->capture_default_str();
  return {cmd,
          [o] {
            const io::RunConfig cfg = io::RunConfig::load(o->config, o->overrides);
            print_breakdown(cfg, *o);
            print_layouts(cfg, *o, o->gpus > 0 ? o->gpus : cfg.parallel.tensor * cfg.parallel.data);
            return 0;
          },
          /*one_process=*/true};
}

}  // namespace tessera::launch
