#include "kernels/types.h"

#include <fmt/ranges.h>

#include <limits>

#include "kernels/beam_topk_types.h"

namespace tessera::kernels {

std::vector<std::int64_t> kv_row_indices(const Tensor& kv_rows, std::int64_t q_batch, std::int64_t kv_batch) {
  check_cpu("attention", kv_rows);
  TESSERA_CHECK(kv_rows.dtype() == DType::i32 && kv_rows.shape() == Shape{q_batch},
                "attention: kv_rows must be int32 [B={}], got {}", q_batch, kv_rows.describe());
  std::vector<std::int64_t> out(static_cast<std::size_t>(q_batch));
  for (std::int64_t b = 0; b < q_batch; ++b) {
    const std::int32_t r = kv_rows.data<std::int32_t>()[b];
    TESSERA_CHECK(r >= 0 && r < kv_batch, "attention: kv_rows[{}] = {} is outside the {} rows of k and v", b, r,
                  kv_batch);
    out[static_cast<std::size_t>(b)] = r;
  }
  return out;
}

void check_ids(const char* op, const Tensor& ids, std::int64_t vocab, std::optional<std::int32_t> ignore_index) {
  check_cpu(op, ids);
  TESSERA_CHECK(ids.dtype() == DType::i32, "{}: ids must be int32, got {}", op, ids.describe());
  const std::int32_t* p = ids.data<std::int32_t>();
  for (std::int64_t i = 0; i < ids.numel(); ++i) {
    TESSERA_CHECK((p[i] >= 0 && p[i] < vocab) || (ignore_index && p[i] == *ignore_index),
                  "{}: id {} at flat position {} of ids {} is outside the vocabulary [0, {})", op, p[i], i,
                  shape_str(ids.shape()), vocab);
  }
}

void check_zero_id(const char* op, std::optional<std::int32_t> zero_id) {
  TESSERA_CHECK(!zero_id || *zero_id < 0, "{}: zero_id {} is a row's id (it must be negative)", op, *zero_id);
}

std::vector<std::int64_t> inverse_permutation(const std::vector<std::int64_t>& dims) {
  std::vector<std::int64_t> inv(dims.size(), -1);
  for (std::size_t i = 0; i < dims.size(); ++i) {
    const std::int64_t d = dims[i];
    TESSERA_CHECK(d >= 0 && d < static_cast<std::int64_t>(dims.size()) && inv[static_cast<std::size_t>(d)] < 0,
                  "permute: [{}] is not a permutation of 0..{}", fmt::join(dims, ", "),
                  static_cast<std::int64_t>(dims.size()) - 1);
    inv[static_cast<std::size_t>(d)] = static_cast<std::int64_t>(i);
  }
  return inv;
}

std::int64_t time_range_rows(const Tensor& src, const std::vector<std::int64_t>& src_rows) {
  return src_rows.empty() ? src.size(0) : static_cast<std::int64_t>(src_rows.size());
}

void check_time_range(const char* op, const Tensor& dst, std::int64_t dst_t, const Tensor& src,
                      const std::vector<std::int64_t>& src_rows, std::int64_t src_t, std::int64_t length) {
  TESSERA_CHECK(dst.dim() == 4 && src.dim() == 4 && dst.dtype() == src.dtype() && dst.device() == src.device() &&
                    dst.size(1) == src.size(1) && dst.size(3) == src.size(3),
                "{}: dst {} and src {} must be [rows, H, T, D] of one dtype, device, H and D", op, dst.describe(),
                src.describe());
  TESSERA_CHECK(length >= 0 && dst_t >= 0 && src_t >= 0 && dst_t + length <= dst.size(2) &&
                    src_t + length <= src.size(2) && time_range_rows(src, src_rows) <= dst.size(0),
                "{}: positions [{}, +{}) of {} rows from [{}, +{}) of src {} do not fit dst {}", op, dst_t, length,
                time_range_rows(src, src_rows), src_t, length, shape_str(src.shape()), shape_str(dst.shape()));
  for (std::int64_t r : src_rows)
    TESSERA_CHECK(r >= 0 && r < src.size(0), "{}: row {} out of range for src {}", op, r, shape_str(src.shape()));
  TESSERA_CHECK(dst.numel() == 0 || dst.raw_data() != src.raw_data(), "{}: dst and src share storage", op);
}

void check_beam_topk(const char* op, const Tensor& logp, const Tensor& beam_scores, const Tensor& eos_only,
                     const BeamTopKOptions& opt) {
  TESSERA_CHECK(opt.beam >= 1 && opt.count >= 1, "{}: beam {} and count {} must be >= 1", op, opt.beam, opt.count);
  TESSERA_CHECK(logp.dim() == 2 && logp.dtype() == DType::f32 && logp.size(0) % opt.beam == 0,
                "{}: log-probabilities {} must be float32 [sentences * beam {}, vocab]", op, logp.describe(), opt.beam);
  const std::int64_t sentences = logp.size(0) / opt.beam, vocab = logp.size(1);
  TESSERA_CHECK(beam_scores.dtype() == DType::f64 && beam_scores.numel() == logp.size(0),
                "{}: beam scores {} must be float64, one a row of {}", op, beam_scores.describe(), logp.describe());
  TESSERA_CHECK(eos_only.dtype() == DType::i32 && eos_only.numel() == sentences,
                "{}: eos_only {} must be int32, one a sentence ({})", op, eos_only.describe(), sentences);
  for (std::int32_t id : {opt.eos, opt.never_output[0], opt.never_output[1]})
    TESSERA_CHECK(id >= -1 && id < vocab, "{}: token id {} outside the vocabulary [0, {})", op, id, vocab);
  TESSERA_CHECK(opt.beam * vocab <= std::numeric_limits<std::int32_t>::max(),
                "{}: {} candidates a sentence are more than int32 flat indices reach", op, opt.beam * vocab);
}

}  // namespace tessera::kernels
