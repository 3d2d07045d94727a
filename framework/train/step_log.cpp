#include "train/step_log.h"

#include <fmt/core.h>

#include <algorithm>
#include <cmath>
#include <cstdio>

#include "tensor/allocator.h"
#include "train/metrics_log.h"

namespace tessera::train {

// Forward + backward = 3 x forward, 2 FLOPs per multiply-add. Per layer and real token: the
// encoder's 4 projections and FFN on source tokens; the decoder's self-attention projections, the
// cross-attention's query and output projections and the FFN on target tokens, and the
// cross-attention's key and value projections on the source tokens (the memory, projected once a
// layer); attention scores and sums per real query against its batch's padded key length
// (causal: half); the output layer on target tokens.
double training_flops(const models::TransformerConfig& m, const data::Batch& b) {
  const double d = static_cast<double>(m.d_model), ff = static_cast<double>(m.d_ff);
  const double ls = static_cast<double>(b.src.size(1)), lt = static_cast<double>(b.tgt_in.size(1));
  const double src = static_cast<double>(b.src_tokens), tgt = static_cast<double>(b.tgt_tokens);
  const double enc = static_cast<double>(m.encoder_layers) * src * (4 * d * d + 2 * d * ff + 2 * ls * d);
  const double dec =
      static_cast<double>(m.decoder_layers) * (tgt * (6 * d * d + 2 * d * ff + lt * d + 2 * ls * d) + src * 2 * d * d);
  const double out = tgt * d * static_cast<double>(m.tgt_vocab);
  return 3.0 * 2.0 * (enc + dec + out);
}

void LogWindow::restart(std::int64_t step) {
  start_ = Clock::now();
  first_step_ = step;
  losses_ = {};
  padded_ = slots_ = 0;
  flops_ = comm_wait_ = imbalance_wait_ = 0;
}

void LogWindow::add_batch(const models::TransformerConfig& model, const data::Batch& b) {
  losses_.tokens += b.tgt_tokens;
  flops_ += training_flops(model, b);
  padded_ += b.padded_slots - b.src_tokens - b.tgt_tokens;
  slots_ += b.padded_slots;
}

void LogWindow::add_losses(double smoothed, double nll) {
  losses_.smoothed += smoothed;
  losses_.nll += nll;
}

void LogWindow::add_waits(double comm_seconds, double imbalance_seconds) {
  comm_wait_ += comm_seconds;
  imbalance_wait_ += imbalance_seconds;
}

std::string LogWindow::report(const StepReport& r) {
  const double seconds = std::chrono::duration<double>(Clock::now() - start_).count();
  const auto tokens = static_cast<double>(losses_.tokens);
  const double loss = losses_.smoothed / tokens, ppl = std::exp(losses_.nll / tokens);
  const double tps = tokens / seconds, tflops = flops_ / seconds / 1e12;  // all ranks together
  const MemoryStats gpu = device_memory_stats(), host = host_memory_stats();
  const double pad = static_cast<double>(padded_) / static_cast<double>(std::max<std::int64_t>(slots_, 1));
  // Data parallelism: time per step spent waiting for gradient all-reduces after backward.
  const auto steps = static_cast<double>(std::max<std::int64_t>(r.step - first_step_, 1));
  const double wait_ms = 1000 * comm_wait_ / steps, imbalance_ms = 1000 * imbalance_wait_ / steps;
  constexpr double kGiB = 1024.0 * 1024.0 * 1024.0;
  fmt::print(
      "step {} | epoch {} | loss {:.4f} | ppl {:.2f} | lr {:.3e} | gnorm {:.3f} | {:.0f} tok/s | {}pad {:.1f}% | "
      "{}elapsed {} | eta {}\n",
      r.step, r.epoch, loss, ppl, r.lr, r.grad_norm, tps,
      r.on_gpu ? fmt::format("{:.1f} model TFLOP/s | gpu peak {:.2f} GiB | ", tflops,
                             static_cast<double>(gpu.peak_in_use) / kGiB)
               : fmt::format("mem peak {:.2f} GiB | ", static_cast<double>(host.peak_in_use) / kGiB),
      100 * pad,
      r.data_parallel ? fmt::format("allreduce wait {:.1f} ms/step{} | ", wait_ms,
                                    r.measure_comm ? fmt::format(" (+ {:.1f} imbalance)", imbalance_ms) : std::string())
                      : std::string(),
      format_duration(r.elapsed), format_duration(r.eta));
  std::fflush(stdout);
  const std::string line = fmt::format(
      "{{\"step\": {}, \"epoch\": {}, \"loss\": {}, \"ppl\": {}, \"lr\": {}, \"grad_norm\": {}, \"tokens_per_s\": {}, "
      "\"model_tflops\": {}, \"gpu_peak_bytes\": {}, \"host_peak_bytes\": {}, \"padding\": {}, \"allreduce_wait_ms\": "
      "{}, "
      "\"imbalance_wait_ms\": {}, \"elapsed_s\": {}, \"eta_s\": {}}}\n",
      r.step, r.epoch, json_number(loss), json_number(ppl), json_number(r.lr), json_number(r.grad_norm),
      json_number(tps), json_number(tflops), gpu.peak_in_use, host.peak_in_use, json_number(pad), json_number(wait_ms),
      json_number(imbalance_ms), json_number(r.elapsed), json_number(r.eta));
  restart(r.step);
  return line;
}

}  // namespace tessera::train
