#include "kernels/cpu/nn_kernels.h"

#include <omp.h>

#include <bit>
#include <cmath>
#include <cstring>
#include <limits>
#include <type_traits>

#include "kernels/cpu/reduce.h"
#include "kernels/philox.h"

namespace tessera::cpu {

// ---------------------------------------------------------------- layer norm
LayerNormOutput layer_norm_forward(const Tensor& x, const Tensor& gamma, const Tensor& beta, double eps) {
  check_float("layer_norm", x);
  check_cpu("layer_norm", x);
  TESSERA_CHECK(x.dim() >= 1 && x.size(-1) > 0,
                "layer_norm: input {} needs a last dimension of at least one feature to normalize over",
                shape_str(x.shape()));
  const std::int64_t d = x.size(-1);
  TESSERA_CHECK(gamma.shape() == Shape{d} && beta.shape() == Shape{d},
                "layer_norm: gamma {} and beta {} must have shape [{}] to match input {}", shape_str(gamma.shape()),
                shape_str(beta.shape()), d, shape_str(x.shape()));
  check_same_dtype("layer_norm", x, gamma);
  check_same_dtype("layer_norm", x, beta);
  const std::int64_t rows = d == 0 ? 0 : x.numel() / d;
  Shape row_shape(x.shape().begin(), x.shape().end() - 1);
  LayerNormOutput out{Tensor::empty(x.shape(), x.dtype()), Tensor::empty(row_shape, x.dtype()),
                      Tensor::empty(row_shape, x.dtype())};
  dispatch_float("layer_norm", x.dtype(), [&]<typename T>() {
    const T* in = x.data<T>();
    const T* g = gamma.data<T>();
    const T* b = beta.data<T>();
    T* y = out.y.data<T>();
    T* mean = out.mean.data<T>();
    T* rstd = out.rstd.data<T>();
#pragma omp parallel for schedule(static) if (rows * d > 32768)
    for (std::int64_t r = 0; r < rows; ++r) {
      const T* a = in + r * d;
      T s = 0;
#pragma omp simd reduction(+ : s)
      for (std::int64_t j = 0; j < d; ++j) s += a[j];
      const T mu = s / static_cast<T>(d);
      T v = 0;
#pragma omp simd reduction(+ : v)
      for (std::int64_t j = 0; j < d; ++j) v += (a[j] - mu) * (a[j] - mu);
      const T rs = T(1) / std::sqrt(v / static_cast<T>(d) + static_cast<T>(eps));
      T* o = y + r * d;
#pragma omp simd
      for (std::int64_t j = 0; j < d; ++j) o[j] = (a[j] - mu) * rs * g[j] + b[j];
      mean[r] = mu;
      rstd[r] = rs;
    }
  });
  return out;
}

LayerNormGrads layer_norm_backward(const Tensor& dy, const Tensor& x, const Tensor& gamma, const Tensor& mean,
                                   const Tensor& rstd) {
  check_same_shape("layer_norm_backward", dy, x);
  check_same_dtype("layer_norm_backward", dy, x);
  const std::int64_t d = x.size(-1);
  const std::int64_t rows = d == 0 ? 0 : x.numel() / d;
  TESSERA_CHECK(gamma.shape() == Shape{d}, "layer_norm_backward: gamma {} must have shape [{}] to match input {}",
                shape_str(gamma.shape()), d, shape_str(x.shape()));
  check_same_dtype("layer_norm_backward", x, gamma);
  TESSERA_CHECK(mean.numel() == rows && rstd.numel() == rows,
                "layer_norm_backward: mean {} / rstd {} do not hold one value per row of {}", shape_str(mean.shape()),
                shape_str(rstd.shape()), shape_str(x.shape()));
  LayerNormGrads g{Tensor::empty(x.shape(), x.dtype()), Tensor::zeros({d}, x.dtype()), Tensor::zeros({d}, x.dtype())};
  dispatch_float("layer_norm_backward", x.dtype(), [&]<typename T>() {
    const T* go = dy.data<T>();
    const T* in = x.data<T>();
    const T* w = gamma.data<T>();
    const T* mu = mean.data<T>();
    const T* rs = rstd.data<T>();
    T* dx = g.dx.data<T>();
    const int nthreads = omp_get_max_threads();
    // Per-thread partial sums for dgamma / dbeta, added up at the end (no atomics).
    std::vector<T> partial(static_cast<std::size_t>(2 * nthreads * d), T(0));
#pragma omp parallel num_threads(nthreads) if (rows * d > 32768)
    {
      // __restrict and locals let the compiler vectorize: nothing written aliases the inputs.
      T* __restrict pg = partial.data() + 2 * omp_get_thread_num() * d;
      T* __restrict pb = pg + d;
#pragma omp for schedule(static)
      for (std::int64_t r = 0; r < rows; ++r) {
        const T* __restrict a = in + r * d;
        const T* __restrict gy = go + r * d;
        T* __restrict o = dx + r * d;
        const T m = mu[r], s = rs[r];
        T sum_g = 0, sum_gx = 0;  // sums of (dy*gamma) and (dy*gamma*xhat)
#pragma omp simd reduction(+ : sum_g, sum_gx)
        for (std::int64_t j = 0; j < d; ++j) {
          const T xhat = (a[j] - m) * s;
          const T gg = gy[j] * w[j];
          sum_g += gg;
          sum_gx += gg * xhat;
          pg[j] += gy[j] * xhat;
          pb[j] += gy[j];
        }
        const T inv_d = T(1) / static_cast<T>(d);
        const T c1 = inv_d * sum_g, c2 = inv_d * sum_gx;
#pragma omp simd
        for (std::int64_t j = 0; j < d; ++j) o[j] = s * (gy[j] * w[j] - c1 - (a[j] - m) * s * c2);
      }
    }
    T* dgamma = g.dgamma.data<T>();
    T* dbeta = g.dbeta.data<T>();
    for (int t = 0; t < nthreads; ++t) {
      const T* pg = partial.data() + 2 * t * d;
      for (std::int64_t j = 0; j < d; ++j) {
        dgamma[j] += pg[j];
        dbeta[j] += pg[d + j];
      }
    }
  });
  return g;
}

// ---------------------------------------------------------------- embedding
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

Tensor embedding_forward(const Tensor& weight, const Tensor& ids) {
  check_rank("embedding", weight, 2, "weight");
  check_float("embedding", weight);
  const std::int64_t vocab = weight.size(0), d = weight.size(1);
  check_ids("embedding", ids, vocab, std::nullopt);
  Shape shape = ids.shape();
  shape.push_back(d);
  Tensor out = Tensor::empty(shape, weight.dtype());
  const std::size_t row_bytes = static_cast<std::size_t>(d) * dtype_size(weight.dtype());
  const std::int32_t* id = ids.data<std::int32_t>();
  const char* w = static_cast<const char*>(weight.raw_data());
  char* o = static_cast<char*>(out.raw_data());
  const std::int64_t n = ids.numel();
#pragma omp parallel for schedule(static) if (n * d > 32768)
  for (std::int64_t i = 0; i < n; ++i) std::memcpy(o + i * row_bytes, w + id[i] * row_bytes, row_bytes);
  return out;
}

void embedding_backward(Tensor& dweight, const Tensor& dout, const Tensor& ids) {
  check_rank("embedding_backward", dweight, 2, "dweight");
  const std::int64_t vocab = dweight.size(0), d = dweight.size(1);
  check_ids("embedding_backward", ids, vocab, std::nullopt);
  TESSERA_CHECK(dout.numel() == ids.numel() * d, "embedding_backward: gradient {} does not match ids {} x dim {}",
                shape_str(dout.shape()), shape_str(ids.shape()), d);
  check_same_dtype("embedding_backward", dweight, dout);
  dispatch_float("embedding_backward", dweight.dtype(), [&]<typename T>() {
    const std::int32_t* id = ids.data<std::int32_t>();
    const T* g = dout.data<T>();
    T* w = dweight.data<T>();
    // Parallel over embedding columns: threads never write the same element, and repeated
    // ids accumulate in a fixed order (deterministic).
#pragma omp parallel for schedule(static) if (ids.numel() * d > 32768)
    for (std::int64_t c = 0; c < d; ++c) {
      for (std::int64_t i = 0; i < ids.numel(); ++i) w[id[i] * d + c] += g[i * d + c];
    }
  });
}

// ---------------------------------------------------------------- dropout
namespace {
// v where `keep`, else +0 (also for an infinite or NaN v, as on the GPU), by masking its bits
// rather than branching: the element loop then vectorizes.
template <typename T>
T kept_or_zero(T v, bool keep) {
  using Bits = std::conditional_t<sizeof(T) == 4, std::uint32_t, std::uint64_t>;
  const Bits mask = keep ? ~Bits{0} : Bits{0};
  return std::bit_cast<T>(static_cast<Bits>(std::bit_cast<Bits>(v) & mask));
}
}  // namespace

Tensor dropout_forward(const Tensor& x, double p, std::uint64_t seed, std::uint64_t offset) {
  check_float("dropout", x);
  check_cpu("dropout", x);
  TESSERA_CHECK(p >= 0.0 && p < 1.0, "dropout: probability {} outside [0, 1)", p);
  Tensor y = Tensor::empty(x.shape(), x.dtype());
  dispatch_float("dropout", x.dtype(), [&]<typename T>() {
    const T* in = x.data<T>();
    T* out = y.data<T>();
    const T scale = static_cast<T>(1.0 / (1.0 - p));
    // philox::dropout_keep's test, uniform (word >> 8) / 2^24 >= float(p), in integers: the
    // uniform is k / 2^24 exactly, and float(p) * 2^24 is exact too.
    const auto keep_from =
        static_cast<std::uint32_t>(std::ceil(static_cast<double>(static_cast<float>(p)) * 16777216.0));
    const std::int64_t n = x.numel();
    // One Philox block gives the uniforms of 4 consecutive elements (philox::uniform's layout).
    // Groups of kLanes whole blocks are generated lane by lane, so that the rounds vectorize; the
    // blocks of the last partial group one by one.
    constexpr std::int64_t kGroup = 4 * philox::kLanes;
    const std::int64_t groups = n / kGroup;
#pragma omp parallel for schedule(static) if (n > 8192)
    for (std::int64_t grp = 0; grp < groups; ++grp) {
      std::uint32_t words[philox::kLanes][4];
      philox::philox4x32_10_lanes(offset + static_cast<std::uint64_t>(grp * philox::kLanes), seed, words);
      // Local restrict pointers: the captured ones might alias as far as the compiler knows.
      const T* __restrict__ src = in + grp * kGroup;
      T* __restrict__ dst = out + grp * kGroup;
      const std::uint32_t* bits = &words[0][0];
      for (std::int64_t e = 0; e < kGroup; ++e) dst[e] = kept_or_zero(src[e] * scale, (bits[e] >> 8) >= keep_from);
    }
    for (std::int64_t blk = groups * philox::kLanes; 4 * blk < n; ++blk) {
      const std::uint64_t ctr = offset + static_cast<std::uint64_t>(blk);
      const philox::Block r =
          philox::philox4x32_10(static_cast<std::uint32_t>(ctr), static_cast<std::uint32_t>(ctr >> 32), 0u, 0u,
                                static_cast<std::uint32_t>(seed), static_cast<std::uint32_t>(seed >> 32));
      for (std::int64_t i = 4 * blk; i < std::min(n, 4 * blk + 4); ++i)
        out[i] = kept_or_zero(in[i] * scale, (r.v[i - 4 * blk] >> 8) >= keep_from);
    }
  });
  return y;
}

// ---------------------------------------------------------------- cross entropy
namespace {
struct XentDims {
  std::int64_t n, v;
};
XentDims xent_dims(const char* op, const Tensor& logits, const Tensor& targets, double smoothing,
                   std::int32_t ignore_index) {
  check_rank(op, logits, 2, "logits");
  check_float(op, logits);
  check_cpu(op, logits);
  check_rank(op, targets, 1, "targets");
  TESSERA_CHECK(targets.size(0) == logits.size(0), "{}: targets {} do not match logits {}", op,
                shape_str(targets.shape()), shape_str(logits.shape()));
  TESSERA_CHECK(smoothing >= 0.0 && smoothing < 1.0, "{}: label smoothing {} outside [0, 1)", op, smoothing);
  check_ids(op, targets, logits.size(1), ignore_index);
  return {logits.size(0), logits.size(1)};
}
}  // namespace

CrossEntropyOutput cross_entropy_forward(const Tensor& logits, const Tensor& targets, double smoothing,
                                         std::int32_t ignore_index) {
  const XentDims dm = xent_dims("cross_entropy", logits, targets, smoothing, ignore_index);
  CrossEntropyOutput out{Tensor::empty({dm.n}, logits.dtype()), Tensor::empty({dm.n}, logits.dtype()),
                         Tensor::empty({dm.n}, logits.dtype())};
  dispatch_float("cross_entropy", logits.dtype(), [&]<typename T>() {
    const T* z = logits.data<T>();
    const std::int32_t* t = targets.data<std::int32_t>();
    T* loss = out.loss.data<T>();
    T* lse = out.lse.data<T>();
    T* nll = out.nll.data<T>();
    const T eps = static_cast<T>(smoothing);
    const T vocab = static_cast<T>(dm.v);
#pragma omp parallel for schedule(static) if (dm.n * dm.v > 32768)
    for (std::int64_t i = 0; i < dm.n; ++i) {
      const T* row = z + i * dm.v;
      // Plain names, not a structured binding: OpenMP regions cannot capture those before clang 16.
      const auto row_lse = row_log_sum_exp(row, dm.v);
      const T m = row_lse.max, log_sum = row_lse.log_sum;
      lse[i] = m + log_sum;
      if (t[i] == ignore_index) {
        loss[i] = nll[i] = 0;
        continue;
      }
      nll[i] = (m - row[t[i]]) + log_sum;
      // -sum_j q_j log p_j with log p_j = z_j - lse and q = (1-eps) onehot + eps/V. The uniform
      // part, lse - mean(z) = log_sum - mean(z - m), sums the shifted logits: a sum of the logits
      // themselves overflows for huge ones, and without smoothing it is left out (a -inf logit
      // would make it 0 * inf = NaN).
      loss[i] = (T(1) - eps) * nll[i];
      if (eps > 0) {
        T sum_shifted = 0;
#pragma omp simd reduction(+ : sum_shifted)
        for (std::int64_t j = 0; j < dm.v; ++j) sum_shifted += row[j] - m;
        loss[i] += eps * (log_sum - sum_shifted / vocab);
      }
    }
  });
  return out;
}

Tensor cross_entropy_backward(const Tensor& dloss, const Tensor& logits, const Tensor& targets, const Tensor& lse,
                              double smoothing, std::int32_t ignore_index) {
  const XentDims dm = xent_dims("cross_entropy_backward", logits, targets, smoothing, ignore_index);
  TESSERA_CHECK(dloss.shape() == Shape{dm.n} && lse.shape() == Shape{dm.n},
                "cross_entropy_backward: dloss {} and lse {} must have shape [{}]", shape_str(dloss.shape()),
                shape_str(lse.shape()), dm.n);
  Tensor dz = Tensor::empty(logits.shape(), logits.dtype());
  dispatch_float("cross_entropy_backward", logits.dtype(), [&]<typename T>() {
    const T* z = logits.data<T>();
    const std::int32_t* t = targets.data<std::int32_t>();
    const T* g = dloss.data<T>();
    const T* l = lse.data<T>();
    T* o = dz.data<T>();
    const T eps = static_cast<T>(smoothing);
    const T uniform = eps / static_cast<T>(dm.v);
#pragma omp parallel for schedule(static) if (dm.n * dm.v > 32768)
    for (std::int64_t i = 0; i < dm.n; ++i) {
      T* row = o + i * dm.v;
      if (t[i] == ignore_index) {
        std::fill_n(row, dm.v, T(0));
        continue;
      }
      const T* zr = z + i * dm.v;
      const T gi = g[i], li = l[i];
      for (std::int64_t j = 0; j < dm.v; ++j) row[j] = gi * (exp_vec(zr[j] - li) - uniform);
      row[t[i]] -= g[i] * (T(1) - eps);
    }
  });
  return dz;
}

}  // namespace tessera::cpu
